/*
 * 04-flush-to-persistent/server.c: the rpma_flush() way to persistence.
 *
 * The "persistent" memory is an ordinary file mapped MAP_SHARED (there is no
 * PMem here; see example_pmem_map()). The server registers it for writes and
 * for RPMA_FLUSH_TYPE_PERSISTENT, says in a peer configuration that writes
 * reach its persistent domain directly (direct_write_to_pmem), and sends
 * both descriptors in the private data:
 *   [mr descriptor size][peer cfg descriptor size][mr desc][peer cfg desc]
 * Once the client has written, flushed and disconnected, the server reads the
 * file back (not through the mapping) and checks every byte.
 *
 *   server ADDR PORT
 */
#include <stdio.h>
#include <stdlib.h>

#include "example_common.h"

static const char kWho[] = "flush server";
#define REGION_SIZE 8192
#define SEED 4

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 3) {
    fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct example_pmem pmem;
  struct rpma_peer *peer = NULL;
  struct rpma_peer_cfg *pcfg = NULL;
  struct rpma_ep *ep = NULL;
  struct rpma_mr_local *mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *back = malloc(REGION_SIZE);
  if (back == NULL || example_pmem_map("flush", REGION_SIZE, &pmem)) return 1;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_unmap;
  if ((ret = example_check(rpma_mr_reg(peer, pmem.ptr, REGION_SIZE,
                                       RPMA_MR_USAGE_WRITE_DST |
                                           RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT,
                                       &mr),
                           kWho, "rpma_mr_reg")))
    goto out_peer;
  if ((ret = example_check(rpma_peer_cfg_new(&pcfg), kWho,
                           "rpma_peer_cfg_new")) ||
      (ret = example_check(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true),
                           kWho, "rpma_peer_cfg_set_direct_write_to_pmem")))
    goto out_mr;

  /* Both descriptors in the private data. */
  unsigned char pd[EXAMPLE_PDATA_MAX];
  struct rpma_conn_private_data pdata;
  if ((ret = example_pdata_put_mr_pcfg(kWho, mr, pcfg, pd, &pdata)))
    goto out_pcfg;

  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_pcfg;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_cfg;
  if ((ret = example_check(example_accept(ep, cfg, NULL, 0, 0, &pdata, &conn),
                           kWho, "accepting")))
    goto out_ep;
  ret = example_check(example_wait_closed(&conn), kWho,
                      "waiting for the client to disconnect");
  if (!ret) ret = example_pmem_read_back(&pmem, 0, back, REGION_SIZE);
  if (!ret) ret = example_verify(kWho, back, REGION_SIZE, SEED);
  if (!ret)
    example_say(kWho, "%s holds the %d bytes the client flushed", pmem.path,
                REGION_SIZE);

out_ep:
  ret |= example_check(rpma_ep_shutdown(&ep), kWho, "rpma_ep_shutdown");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_pcfg:
  ret |=
      example_check(rpma_peer_cfg_delete(&pcfg), kWho, "rpma_peer_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_unmap:
  example_pmem_unmap(&pmem);
  free(back);
  return ret ? 1 : 0;
}
