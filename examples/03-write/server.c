/*
 * 03-write/server.c: exposes a zeroed region of volatile memory as an RDMA
 * write destination (descriptor in the private data), waits for the client
 * to write it and disconnect, then checks every byte it received.
 *
 *   server ADDR PORT
 */
#include <stdio.h>
#include <stdlib.h>

#include "example_common.h"

static const char kWho[] = "write server";
#define REGION_SIZE 4096
#define SEED 3

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 3) {
    fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct rpma_peer *peer = NULL;
  struct rpma_ep *ep = NULL;
  struct rpma_mr_local *dst_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *dst = example_malloc(REGION_SIZE);
  if (dst == NULL) return 1;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  /* The client also reads back from it (read-after-write). */
  if ((ret = example_check(
           rpma_mr_reg(peer, dst, REGION_SIZE,
                       RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC,
                       &dst_mr),
           kWho, "rpma_mr_reg")))
    goto out_peer;
  size_t desc_size = 0;
  char desc[EXAMPLE_PDATA_MAX];
  if ((ret = example_check(rpma_mr_get_descriptor_size(dst_mr, &desc_size),
                           kWho, "rpma_mr_get_descriptor_size")) ||
      (ret = example_check(rpma_mr_get_descriptor(dst_mr, desc), kWho,
                           "rpma_mr_get_descriptor")))
    goto out_mr;
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_cfg;
  struct rpma_conn_private_data pdata = {desc, (uint8_t)desc_size};
  if ((ret = example_check(example_accept(ep, cfg, NULL, 0, 0, &pdata, &conn),
                           kWho, "accepting")))
    goto out_ep;
  ret = example_check(example_wait_closed(&conn), kWho,
                      "waiting for the client to disconnect");
  if (!ret) ret = example_verify(kWho, dst, REGION_SIZE, SEED);
  if (!ret)
    example_say(kWho, "received %d bytes, all as expected", REGION_SIZE);

out_ep:
  ret |= example_check(rpma_ep_shutdown(&ep), kWho, "rpma_ep_shutdown");
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
