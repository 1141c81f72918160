/*
 * 07-multiple-connections/server.c: one endpoint, several connections at
 * once. Accepts NCLIENTS connections; each client exposes its name in a
 * region it registered as a read source and sends, in the private data, that
 * region's descriptor and (to check against) a copy of the name:
 *   [desc size][desc][name, NUL-terminated]
 * With every connection open, the server reads each client's name with
 * rpma_read(), checks it, and disconnects that client.
 *
 *   server ADDR PORT NCLIENTS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"

static const char kWho[] = "multiple-connections server";
#define MAX_CLIENTS 8
#define NAME_SIZE 32

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 4 || atoi(argv[3]) < 1 || atoi(argv[3]) > MAX_CLIENTS) {
    fprintf(stderr, "usage: %s ADDR PORT NCLIENTS (1..%d)\n", argv[0],
            MAX_CLIENTS);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  const int nclients = atoi(argv[3]);
  struct rpma_peer *peer = NULL;
  struct rpma_ep *ep = NULL;
  struct rpma_mr_local *names_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conns[MAX_CLIENTS] = {NULL};
  char *names = example_malloc(MAX_CLIENTS * NAME_SIZE);
  if (names == NULL) return 1;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(rpma_mr_reg(peer, names, MAX_CLIENTS * NAME_SIZE,
                                       RPMA_MR_USAGE_READ_DST, &names_mr),
                           kWho, "rpma_mr_reg")))
    goto out_peer;
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_cfg;

  int accepted = 0;
  for (; accepted < nclients; ++accepted) {
    if ((ret = example_check(
             example_accept(ep, cfg, NULL, 0, 0, NULL, &conns[accepted]), kWho,
             "accepting")))
      break;
    example_say(kWho, "connection %d of %d established", accepted + 1,
                nclients);
  }
  for (int i = 0; i < accepted; ++i) {
    struct rpma_conn_private_data pdata = {NULL, 0};
    struct rpma_mr_remote *name_mr = NULL;
    struct ibv_wc wc;
    char *name = names + i * NAME_SIZE;
    int r = example_check(rpma_conn_get_private_data(conns[i], &pdata), kWho,
                          "rpma_conn_get_private_data");
    const unsigned char *pd = pdata.ptr;
    if (!r && (pdata.len < 2 || pdata.len < 1 + pd[0] + 1 ||
               pd[pdata.len - 1] != '\0')) {
      fprintf(stderr, "%s: client %d sent malformed private data\n", kWho, i);
      r = -1;
    }
    if (!r)
      r = example_check(rpma_mr_remote_from_descriptor(pd + 1, pd[0], &name_mr),
                        kWho, "rpma_mr_remote_from_descriptor");
    const char *claimed = r ? "" : (const char *)pd + 1 + pd[0];
    if (!r)
      r = example_check(rpma_read(conns[i], names_mr, i * NAME_SIZE, name_mr, 0,
                                  NAME_SIZE, RPMA_F_COMPLETION_ALWAYS, NULL),
                        kWho, "rpma_read");
    if (!r)
      r = example_check(example_wait(conns[i], IBV_WC_RDMA_READ, &wc), kWho,
                        "waiting for the read");
    if (!r && strncmp(name, claimed, NAME_SIZE) != 0) {
      fprintf(stderr, "%s: client %d's memory says \"%.*s\", it said \"%s\"\n",
              kWho, i, NAME_SIZE, name, claimed);
      r = -1;
    }
    if (!r) example_say(kWho, "read the name \"%s\"", name);
    if (name_mr) r |= rpma_mr_remote_delete(&name_mr);
    r |= example_check(example_disconnect(&conns[i]), kWho, "disconnecting");
    ret |= r;
  }

  ret |= example_check(rpma_ep_shutdown(&ep), kWho, "rpma_ep_shutdown");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&names_mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(names);
  return ret ? 1 : 0;
}
