/*
 * 02-read/client.c: reads the server's whole region into local volatile
 * memory with rpma_read(), waits for the IBV_WC_RDMA_READ completion and
 * checks every byte.
 *
 *   client ADDR PORT
 */
#include <stdio.h>
#include <stdlib.h>

#include "example_common.h"

static const char kWho[] = "read client";
#define REGION_SIZE 4096
#define SEED 2

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 3) {
    fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct rpma_peer *peer = NULL;
  struct rpma_mr_local *dst_mr = NULL;
  struct rpma_mr_remote *src_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *dst = example_malloc(REGION_SIZE);
  if (dst == NULL) return 1;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(
           rpma_mr_reg(peer, dst, REGION_SIZE, RPMA_MR_USAGE_READ_DST, &dst_mr),
           kWho, "rpma_mr_reg")))
    goto out_peer;
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(
           example_client_connect(peer, addr, port, cfg, NULL, &conn), kWho,
           "connecting")))
    goto out_cfg;

  struct rpma_conn_private_data pdata = {NULL, 0};
  size_t remote_size = 0;
  if ((ret = example_check(rpma_conn_get_private_data(conn, &pdata), kWho,
                           "rpma_conn_get_private_data")) ||
      (ret = example_check(
           rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &src_mr), kWho,
           "rpma_mr_remote_from_descriptor")))
    goto out_disconnect;
  if ((ret = example_check(rpma_mr_remote_get_size(src_mr, &remote_size), kWho,
                           "rpma_mr_remote_get_size")))
    goto out_remote;
  if (remote_size != REGION_SIZE) {
    fprintf(stderr, "%s: the remote region has %zu bytes, expected %d\n", kWho,
            remote_size, REGION_SIZE);
    ret = -1;
    goto out_remote;
  }
  struct ibv_wc wc;
  if ((ret = example_check(rpma_read(conn, dst_mr, 0, src_mr, 0, REGION_SIZE,
                                     RPMA_F_COMPLETION_ALWAYS, NULL),
                           kWho, "rpma_read")) ||
      (ret = example_check(example_wait(conn, IBV_WC_RDMA_READ, &wc), kWho,
                           "waiting for the read")))
    goto out_remote;
  ret = example_verify(kWho, dst, REGION_SIZE, SEED);
  if (!ret) example_say(kWho, "read %d bytes, all as expected", REGION_SIZE);

out_remote:
  ret |= example_check(rpma_mr_remote_delete(&src_mr), kWho,
                       "rpma_mr_remote_delete");
out_disconnect:
  ret |= example_check(example_disconnect(&conn), kWho, "disconnecting");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&dst_mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(dst);
  return ret ? 1 : 0;
}
