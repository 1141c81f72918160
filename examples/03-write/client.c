/*
 * 03-write/client.c: writes a pattern into the server's region with an
 * unsignaled rpma_write(), then reads its first 8 bytes back (a read after a
 * write on the same connection completes only after the write has been
 * placed: the "read-after-write" way to know a write arrived), checks them,
 * and disconnects. The server checks the whole region.
 *
 *   client ADDR PORT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"

static const char kWho[] = "write client";
#define REGION_SIZE 4096
#define SEED 3
#define READ_BACK 8

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 3) {
    fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct rpma_peer *peer = NULL;
  struct rpma_mr_local *src_mr = NULL, *back_mr = NULL;
  struct rpma_mr_remote *dst_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *src = example_malloc(REGION_SIZE);
  char *back = example_malloc(READ_BACK);
  if (src == NULL || back == NULL) return 1;
  example_fill(src, REGION_SIZE, SEED);

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(rpma_mr_reg(peer, src, REGION_SIZE,
                                       RPMA_MR_USAGE_WRITE_SRC, &src_mr),
                           kWho, "rpma_mr_reg (source)")))
    goto out_peer;
  if ((ret = example_check(
           rpma_mr_reg(peer, back, READ_BACK, RPMA_MR_USAGE_READ_DST, &back_mr),
           kWho, "rpma_mr_reg (read-back)")))
    goto out_src_mr;
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_back_mr;
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
  struct ibv_wc wc;
  if ((ret = example_check(rpma_write(conn, dst_mr, 0, src_mr, 0, REGION_SIZE,
                                      RPMA_F_COMPLETION_ON_ERROR, NULL),
                           kWho, "rpma_write")) ||
      (ret = example_check(rpma_read(conn, back_mr, 0, dst_mr, 0, READ_BACK,
                                     RPMA_F_COMPLETION_ALWAYS, NULL),
                           kWho, "rpma_read")) ||
      (ret = example_check(example_wait(conn, IBV_WC_RDMA_READ, &wc), kWho,
                           "waiting for the read-after-write")))
    goto out_remote;
  ret = example_verify(kWho, back, READ_BACK, SEED);
  if (!ret)
    example_say(kWho, "wrote %d bytes; read-after-write matches", REGION_SIZE);

out_remote:
  ret |= example_check(rpma_mr_remote_delete(&dst_mr), kWho,
                       "rpma_mr_remote_delete");
out_disconnect:
  ret |= example_check(example_disconnect(&conn), kWho, "disconnecting");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_back_mr:
  ret |= example_check(rpma_mr_dereg(&back_mr), kWho, "rpma_mr_dereg");
out_src_mr:
  ret |= example_check(rpma_mr_dereg(&src_mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(src);
  free(back);
  return ret ? 1 : 0;
}
