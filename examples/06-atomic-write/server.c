/*
 * 06-atomic-write/server.c: keeps a log (log.h) in volatile memory (malloc;
 * the flushes the client issues are RPMA_FLUSH_TYPE_VISIBILITY, which is all
 * DRAM offers), lets the client append to it, and after the client has
 * disconnected checks that the log holds exactly the words it was given, in
 * order, and that `used` covers them.
 *
 *   server ADDR PORT WORD...    (the words the client will append)
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"
#include "log.h"

static const char kWho[] = "atomic-write server";

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 4) {
    fprintf(stderr, "usage: %s ADDR PORT WORD...\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct rpma_peer *peer = NULL;
  struct rpma_ep *ep = NULL;
  struct rpma_mr_local *mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  struct example_log *log = example_malloc(sizeof(*log));
  if (log == NULL) return 1;
  memcpy(log->signature, LOG_SIGNATURE, sizeof(log->signature));
  log->used = 0;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(
           rpma_mr_reg(peer, log, sizeof(*log),
                       RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST |
                           RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY,
                       &mr),
           kWho, "rpma_mr_reg")))
    goto out_peer;
  /* [desc size][desc][offset of used: 2 bytes][offset of data: 2 bytes] */
  unsigned char pd[EXAMPLE_PDATA_MAX];
  size_t desc_size = 0;
  if ((ret = example_check(rpma_mr_get_descriptor_size(mr, &desc_size), kWho,
                           "rpma_mr_get_descriptor_size")) ||
      (ret = example_check(rpma_mr_get_descriptor(mr, pd + 1), kWho,
                           "rpma_mr_get_descriptor")))
    goto out_mr;
  pd[0] = (unsigned char)desc_size;
  uint16_t offsets[2] = {offsetof(struct example_log, used),
                         offsetof(struct example_log, data)};
  memcpy(pd + 1 + desc_size, offsets, sizeof(offsets));
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_cfg;
  struct rpma_conn_private_data pdata = {
      pd, (uint8_t)(1 + desc_size + sizeof(offsets))};
  if ((ret = example_check(example_accept(ep, cfg, NULL, 0, 0, &pdata, &conn),
                           kWho, "accepting")))
    goto out_ep;
  ret = example_check(example_wait_closed(&conn), kWho,
                      "waiting for the client to disconnect");

  /* The log must now be the words, back to back, and nothing more. */
  char expected[LOG_DATA_SIZE];
  size_t len = 0;
  for (int i = 3; i < argc; ++i) {
    size_t n = strlen(argv[i]);
    if (len + n > sizeof(expected)) break;
    memcpy(expected + len, argv[i], n);
    len += n;
  }
  if (!ret && (log->used != len || memcmp(log->data, expected, len) != 0 ||
               memcmp(log->signature, LOG_SIGNATURE, 16) != 0)) {
    fprintf(stderr, "%s: log has used %llu \"%.*s\", expected %zu \"%.*s\"\n",
            kWho, (unsigned long long)log->used,
            (int)(log->used < LOG_DATA_SIZE ? log->used : LOG_DATA_SIZE),
            log->data, len, (int)len, expected);
    ret = -1;
  }
  if (!ret)
    example_say(kWho, "log holds \"%.*s\" (%zu bytes)", (int)len, log->data,
                len);

out_ep:
  ret |= example_check(rpma_ep_shutdown(&ep), kWho, "rpma_ep_shutdown");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(log);
  return ret ? 1 : 0;
}
