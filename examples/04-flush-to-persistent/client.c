/*
 * 04-flush-to-persistent/client.c: writes a pattern into the server's
 * "persistent" region and makes it persistent with
 * rpma_flush(RPMA_FLUSH_TYPE_PERSISTENT). It may: the server's peer
 * configuration, applied to the connection, says direct_write_to_pmem, and
 * the remote region's flush types include RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT.
 * The flush's completion (librpma implements it as an 8-byte RDMA read when
 * the NIC has no native flush: IBV_WC_RDMA_READ) means the write is there.
 *
 *   client ADDR PORT
 */
#include <stdio.h>
#include <stdlib.h>

#include "example_common.h"

static const char kWho[] = "flush client";
#define REGION_SIZE 8192
#define SEED 4

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 3) {
    fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct rpma_peer *peer = NULL;
  struct rpma_peer_cfg *pcfg = NULL;
  struct rpma_mr_local *src_mr = NULL;
  struct rpma_mr_remote *dst_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *src = example_malloc(REGION_SIZE);
  if (src == NULL) return 1;
  example_fill(src, REGION_SIZE, SEED);

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(rpma_mr_reg(peer, src, REGION_SIZE,
                                       RPMA_MR_USAGE_WRITE_SRC, &src_mr),
                           kWho, "rpma_mr_reg")))
    goto out_peer;
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(
           example_client_connect(peer, addr, port, cfg, NULL, &conn), kWho,
           "connecting")))
    goto out_cfg;

  /* The server's region and its word on what that memory supports. */
  if ((ret = example_pdata_get_mr_pcfg(kWho, conn, &dst_mr, &pcfg)))
    goto out_remote;
  bool direct = false;
  int flush_types = 0;
  if ((ret =
           example_check(rpma_peer_cfg_get_direct_write_to_pmem(pcfg, &direct),
                         kWho, "rpma_peer_cfg_get_direct_write_to_pmem")) ||
      (ret = example_check(rpma_mr_remote_get_flush_type(dst_mr, &flush_types),
                           kWho, "rpma_mr_remote_get_flush_type")))
    goto out_remote;
  if (!direct || !(flush_types & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT)) {
    fprintf(
        stderr,
        "%s: the server offers no persistent flush (direct %d, types 0x%x)\n",
        kWho, direct, flush_types);
    ret = -1;
    goto out_remote;
  }

  struct ibv_wc wc;
  if ((ret = example_check(rpma_write(conn, dst_mr, 0, src_mr, 0, REGION_SIZE,
                                      RPMA_F_COMPLETION_ON_ERROR, NULL),
                           kWho, "rpma_write")) ||
      (ret = example_check(
           rpma_flush(conn, dst_mr, 0, REGION_SIZE, RPMA_FLUSH_TYPE_PERSISTENT,
                      RPMA_F_COMPLETION_ALWAYS, NULL),
           kWho, "rpma_flush")) ||
      (ret = example_check(example_wait(conn, IBV_WC_RDMA_READ, &wc), kWho,
                           "waiting for the flush")))
    goto out_remote;
  example_say(kWho, "wrote and flushed %d bytes to persistence", REGION_SIZE);

out_remote:
  ret |=
      example_check(rpma_peer_cfg_delete(&pcfg), kWho, "rpma_peer_cfg_delete");
  ret |= example_check(rpma_mr_remote_delete(&dst_mr), kWho,
                       "rpma_mr_remote_delete");
  ret |= example_check(example_disconnect(&conn), kWho, "disconnecting");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&src_mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(src);
  return ret ? 1 : 0;
}
