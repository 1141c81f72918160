/*
 * 02-read/server.c: exposes a region of volatile memory (malloc) as an RDMA
 * read source; its descriptor goes to the client in the connection's private
 * data. Waits for the client to read it and disconnect.
 *
 *   server ADDR PORT
 */
#include <stdio.h>
#include <stdlib.h>

#include "example_common.h"

static const char kWho[] = "read server";
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
  struct rpma_ep *ep = NULL;
  struct rpma_mr_local *src_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *src = example_malloc(REGION_SIZE);
  if (src == NULL) return 1;
  example_fill(src, REGION_SIZE, SEED);

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(
           rpma_mr_reg(peer, src, REGION_SIZE, RPMA_MR_USAGE_READ_SRC, &src_mr),
           kWho, "rpma_mr_reg")))
    goto out_peer;
  size_t desc_size = 0;
  char desc[EXAMPLE_PDATA_MAX];
  if ((ret = example_check(rpma_mr_get_descriptor_size(src_mr, &desc_size),
                           kWho, "rpma_mr_get_descriptor_size")) ||
      (ret = example_check(rpma_mr_get_descriptor(src_mr, desc), kWho,
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
  example_say(kWho, "exposing %d bytes for reading", REGION_SIZE);
  ret = example_check(example_wait_closed(&conn), kWho,
                      "waiting for the client to disconnect");
  /* A read must leave its source as it was. */
  ret |= example_verify(kWho, src, REGION_SIZE, SEED);

out_ep:
  ret |= example_check(rpma_ep_shutdown(&ep), kWho, "rpma_ep_shutdown");
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
