/*
 * 07-multiple-connections/client.c: puts its name into a region registered
 * as a read source, connects with the region's descriptor and the name in the
 * private data, and waits for the server to read it and disconnect.
 *
 *   client ADDR PORT NAME
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"

static const char kWho[] = "multiple-connections client";
#define NAME_SIZE 32

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 4 || strlen(argv[3]) >= NAME_SIZE) {
    fprintf(stderr, "usage: %s ADDR PORT NAME (< %d characters)\n", argv[0],
            NAME_SIZE);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2], *name_arg = argv[3];
  struct rpma_peer *peer = NULL;
  struct rpma_mr_local *name_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *name = example_malloc(NAME_SIZE);
  if (name == NULL) return 1;
  snprintf(name, NAME_SIZE, "%s", name_arg);

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(
           rpma_mr_reg(peer, name, NAME_SIZE, RPMA_MR_USAGE_READ_SRC, &name_mr),
           kWho, "rpma_mr_reg")))
    goto out_peer;
  unsigned char pd[EXAMPLE_PDATA_MAX];
  size_t desc_size = 0;
  if ((ret = example_check(rpma_mr_get_descriptor_size(name_mr, &desc_size),
                           kWho, "rpma_mr_get_descriptor_size")) ||
      (ret = example_check(rpma_mr_get_descriptor(name_mr, pd + 1), kWho,
                           "rpma_mr_get_descriptor")))
    goto out_mr;
  size_t name_len = strlen(name) + 1;
  if (1 + desc_size + name_len > sizeof(pd)) {
    fprintf(stderr, "%s: name too long for the private data\n", kWho);
    ret = -1;
    goto out_mr;
  }
  pd[0] = (unsigned char)desc_size;
  memcpy(pd + 1 + desc_size, name, name_len);
  struct rpma_conn_private_data pdata = {pd,
                                         (uint8_t)(1 + desc_size + name_len)};
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(
           example_client_connect(peer, addr, port, cfg, &pdata, &conn), kWho,
           "connecting")))
    goto out_cfg;
  example_say(kWho, "\"%s\" connected; waiting for the server", name);
  ret = example_check(example_wait_closed(&conn), kWho,
                      "waiting for the server to disconnect");

out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&name_mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(name);
  return ret ? 1 : 0;
}
