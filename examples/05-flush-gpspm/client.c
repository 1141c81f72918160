/*
 * 05-flush-gpspm/client.c: writes a pattern into the server's region, then
 * sends a flush request for it (rpma_send after rpma_write on one connection:
 * the request cannot overtake the write) and waits for the server's answer
 * that the range is persistent.
 *
 *   client ADDR PORT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"
#include "gpspm.h"

static const char kWho[] = "gpspm client";
#define REGION_SIZE 8192
#define SEED 5
#define OP_CONTEXT 0x5eed0005u

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 3) {
    fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct rpma_peer *peer = NULL;
  struct rpma_mr_local *src_mr = NULL, *msg_mr = NULL;
  struct rpma_mr_remote *dst_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *src = example_malloc(REGION_SIZE);
  /* [0, 32): the request sent; [32, 64): the response received. */
  char *msgs = example_malloc(2 * GPSPM_MSG_SIZE);
  if (src == NULL || msgs == NULL) return 1;
  example_fill(src, REGION_SIZE, SEED);

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(rpma_mr_reg(peer, src, REGION_SIZE,
                                       RPMA_MR_USAGE_WRITE_SRC, &src_mr),
                           kWho, "rpma_mr_reg")) ||
      (ret = example_check(
           rpma_mr_reg(peer, msgs, 2 * GPSPM_MSG_SIZE,
                       RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &msg_mr),
           kWho, "rpma_mr_reg (messages)")))
    goto out_mr;
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(
           example_client_connect(peer, addr, port, cfg, NULL, &conn), kWho,
           "connecting")))
    goto out_cfg;
  struct rpma_conn_private_data pdata = {NULL, 0};
  if ((ret = example_check(rpma_conn_get_private_data(conn, &pdata), kWho,
                           "rpma_conn_get_private_data")) ||
      (ret = example_check(
           rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &dst_mr), kWho,
           "rpma_mr_remote_from_descriptor")))
    goto out_disconnect;

  struct gpspm_flush_request req = {0, REGION_SIZE, OP_CONTEXT};
  memcpy(msgs, &req, sizeof(req));
  const enum ibv_wc_opcode both[2] = {IBV_WC_SEND, IBV_WC_RECV};
  struct ibv_wc wcs[2];
  /* The response's receive first, so the answer never finds no receive. */
  if ((ret = example_check(
           rpma_recv(conn, msg_mr, GPSPM_MSG_SIZE, GPSPM_MSG_SIZE, NULL), kWho,
           "rpma_recv")) ||
      (ret = example_check(rpma_write(conn, dst_mr, 0, src_mr, 0, REGION_SIZE,
                                      RPMA_F_COMPLETION_ON_ERROR, NULL),
                           kWho, "rpma_write")) ||
      (ret = example_check(rpma_send(conn, msg_mr, 0, sizeof(req),
                                     RPMA_F_COMPLETION_ALWAYS, NULL),
                           kWho, "rpma_send (flush request)")) ||
      (ret = example_check(example_wait_all(conn, 2, both, wcs), kWho,
                           "waiting for the flush response")))
    goto out_remote;
  struct gpspm_flush_response resp;
  memcpy(&resp, msgs + GPSPM_MSG_SIZE, sizeof(resp));
  if (wcs[1].byte_len != sizeof(resp) || resp.op_context != OP_CONTEXT ||
      resp.status != 0) {
    fprintf(stderr,
            "%s: flush response %u bytes, op_context 0x%llx, status %llu\n",
            kWho, wcs[1].byte_len, (unsigned long long)resp.op_context,
            (unsigned long long)resp.status);
    ret = -1;
  } else {
    example_say(kWho, "the server persisted the %d bytes written", REGION_SIZE);
  }

out_remote:
  ret |= example_check(rpma_mr_remote_delete(&dst_mr), kWho,
                       "rpma_mr_remote_delete");
out_disconnect:
  ret |= example_check(example_disconnect(&conn), kWho, "disconnecting");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&msg_mr), kWho, "rpma_mr_dereg");
  ret |= example_check(rpma_mr_dereg(&src_mr), kWho, "rpma_mr_dereg");
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(src);
  free(msgs);
  return ret ? 1 : 0;
}
