/*
 * 05-flush-gpspm/server.c: persistence without rpma_flush(): the server
 * persists on request ("GPSPM"). It needs no persistent-flush support from
 * the NIC and no peer configuration.
 *
 * The "persistent" memory is an ordinary file mapped MAP_SHARED (no PMem
 * here; example_persist() msync()s the range where PMem code would call
 * pmem_persist()). The server exposes it for writes, receives a flush
 * request (struct gpspm_flush_request), persists that range, reads it back
 * from the file, checks it, and answers with a gpspm_flush_response.
 *
 *   server ADDR PORT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"
#include "gpspm.h"

static const char kWho[] = "gpspm server";
#define REGION_SIZE 8192
#define SEED 5

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 3) {
    fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct example_pmem pmem;
  struct rpma_peer *peer = NULL;
  struct rpma_ep *ep = NULL;
  struct rpma_mr_local *mr = NULL, *msg_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  /* [0, 32): the request received; [32, 64): the response sent. */
  char *msgs = example_malloc(2 * GPSPM_MSG_SIZE);
  char *back = malloc(REGION_SIZE);
  if (msgs == NULL || back == NULL ||
      example_pmem_map("gpspm", REGION_SIZE, &pmem))
    return 1;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_unmap;
  if ((ret = example_check(rpma_mr_reg(peer, pmem.ptr, REGION_SIZE,
                                       RPMA_MR_USAGE_WRITE_DST, &mr),
                           kWho, "rpma_mr_reg")) ||
      (ret = example_check(
           rpma_mr_reg(peer, msgs, 2 * GPSPM_MSG_SIZE,
                       RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &msg_mr),
           kWho, "rpma_mr_reg (messages)")))
    goto out_mr;
  size_t desc_size = 0;
  char desc[EXAMPLE_PDATA_MAX];
  if ((ret = example_check(rpma_mr_get_descriptor_size(mr, &desc_size), kWho,
                           "rpma_mr_get_descriptor_size")) ||
      (ret = example_check(rpma_mr_get_descriptor(mr, desc), kWho,
                           "rpma_mr_get_descriptor")))
    goto out_mr;
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_cfg;
  struct rpma_conn_private_data pdata = {desc, (uint8_t)desc_size};
  /* The flush request's receive is posted before the accept. */
  if ((ret = example_check(
           example_accept(ep, cfg, msg_mr, 0, GPSPM_MSG_SIZE, &pdata, &conn),
           kWho, "accepting")))
    goto out_ep;

  struct ibv_wc wc;
  if ((ret = example_check(example_wait(conn, IBV_WC_RECV, &wc), kWho,
                           "waiting for the flush request")))
    goto out_conn;
  struct gpspm_flush_request req;
  memcpy(&req, msgs, sizeof(req));
  struct gpspm_flush_response resp = {req.op_context, 1};
  if (wc.byte_len != sizeof(req) || req.offset > REGION_SIZE ||
      req.length > REGION_SIZE - req.offset) {
    fprintf(stderr, "%s: bad flush request (%u bytes, [%llu, +%llu))\n", kWho,
            wc.byte_len, (unsigned long long)req.offset,
            (unsigned long long)req.length);
    ret = -1;
  } else if (example_persist(&pmem, req.offset, req.length) == 0 &&
             example_pmem_read_back(&pmem, req.offset, back, req.length) == 0 &&
             example_verify(kWho, back, req.length, SEED) == 0) {
    /* The pattern starts at offset 0 of the region; so does the request. */
    resp.status = req.offset == 0 ? 0 : 1;
    example_say(kWho, "persisted [%llu, +%llu) of %s",
                (unsigned long long)req.offset, (unsigned long long)req.length,
                pmem.path);
  }
  memcpy(msgs + GPSPM_MSG_SIZE, &resp, sizeof(resp));
  /* Answered even when it failed, so the client does not wait forever. */
  int sent = example_check(rpma_send(conn, msg_mr, GPSPM_MSG_SIZE, sizeof(resp),
                                     RPMA_F_COMPLETION_ALWAYS, NULL),
                           kWho, "rpma_send (flush response)");
  if (!sent)
    sent = example_check(example_wait(conn, IBV_WC_SEND, &wc), kWho,
                         "waiting for the response to go");
  if (sent || resp.status != 0) ret = -1;

out_conn:
  ret |= example_check(example_wait_closed(&conn), kWho,
                       "waiting for the client to disconnect");
out_ep:
  ret |= example_check(rpma_ep_shutdown(&ep), kWho, "rpma_ep_shutdown");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&msg_mr), kWho, "rpma_mr_dereg");
  ret |= example_check(rpma_mr_dereg(&mr), kWho, "rpma_mr_dereg");
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_unmap:
  example_pmem_unmap(&pmem);
  free(back);
  free(msgs);
  return ret ? 1 : 0;
}
