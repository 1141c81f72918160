/*
 * 06-atomic-write/client.c: appends each word to the server's log (log.h):
 * reads `used`, writes the word after it, flushes, publishes the new length
 * with rpma_atomic_write() (8 bytes, at an offset aligned to
 * RPMA_ATOMIC_WRITE_ALIGNMENT), and flushes again; it waits only for that last
 * flush before the next word. At the end it reads `used` back and checks it.
 *
 *   client ADDR PORT WORD...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"
#include "log.h"

static const char kWho[] = "atomic-write client";

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 4) {
    fprintf(stderr, "usage: %s ADDR PORT WORD...\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct rpma_peer *peer = NULL;
  struct rpma_mr_local *src_mr = NULL, *used_mr = NULL;
  struct rpma_mr_remote *log_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *words = example_malloc(LOG_DATA_SIZE);
  uint64_t *used = example_malloc(sizeof(uint64_t));
  if (words == NULL || used == NULL) return 1;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(rpma_mr_reg(peer, words, LOG_DATA_SIZE,
                                       RPMA_MR_USAGE_WRITE_SRC, &src_mr),
                           kWho, "rpma_mr_reg (words)")) ||
      (ret = example_check(rpma_mr_reg(peer, used, sizeof(*used),
                                       RPMA_MR_USAGE_READ_DST, &used_mr),
                           kWho, "rpma_mr_reg (used)")))
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
                           "rpma_conn_get_private_data")))
    goto out_disconnect;
  const unsigned char *pd = pdata.ptr;
  uint16_t offsets[2];
  if (pdata.len < 1 || pdata.len < 1 + pd[0] + sizeof(offsets)) {
    fprintf(stderr, "%s: private data too short\n", kWho);
    ret = -1;
    goto out_disconnect;
  }
  memcpy(offsets, pd + 1 + pd[0], sizeof(offsets));
  const size_t used_offset = offsets[0], data_offset = offsets[1];
  if (used_offset % RPMA_ATOMIC_WRITE_ALIGNMENT != 0) {
    fprintf(stderr, "%s: `used` at %zu is not %d-byte aligned\n", kWho,
            used_offset, RPMA_ATOMIC_WRITE_ALIGNMENT);
    ret = -1;
    goto out_disconnect;
  }
  if ((ret =
           example_check(rpma_mr_remote_from_descriptor(pd + 1, pd[0], &log_mr),
                         kWho, "rpma_mr_remote_from_descriptor")))
    goto out_disconnect;

  struct ibv_wc wc;
  if ((ret = example_check(
           rpma_read(conn, used_mr, 0, log_mr, used_offset, sizeof(*used),
                     RPMA_F_COMPLETION_ALWAYS, NULL),
           kWho, "rpma_read (used)")) ||
      (ret = example_check(example_wait(conn, IBV_WC_RDMA_READ, &wc), kWho,
                           "waiting for the read")))
    goto out_remote;
  uint64_t end = *used;
  example_say(kWho, "the log has %llu bytes", (unsigned long long)end);
  size_t staged = 0;
  for (int i = 3; i < argc && !ret; ++i) {
    size_t n = strlen(argv[i]);
    if (end + n > LOG_DATA_SIZE || staged + n > LOG_DATA_SIZE) {
      fprintf(stderr, "%s: the log is full\n", kWho);
      ret = -1;
      break;
    }
    memcpy(words + staged, argv[i], n);
    uint64_t new_used = end + n;
    char src[8];
    memcpy(src, &new_used, sizeof(src));
    if ((ret = example_check(
             rpma_write(conn, log_mr, data_offset + end, src_mr, staged, n,
                        RPMA_F_COMPLETION_ON_ERROR, NULL),
             kWho, "rpma_write (word)")) ||
        (ret = example_check(rpma_flush(conn, log_mr, data_offset + end, n,
                                        RPMA_FLUSH_TYPE_VISIBILITY,
                                        RPMA_F_COMPLETION_ON_ERROR, NULL),
                             kWho, "rpma_flush (word)")) ||
        (ret =
             example_check(rpma_atomic_write(conn, log_mr, used_offset, src,
                                             RPMA_F_COMPLETION_ON_ERROR, NULL),
                           kWho, "rpma_atomic_write (used)")) ||
        (ret = example_check(rpma_flush(conn, log_mr, used_offset, 8,
                                        RPMA_FLUSH_TYPE_VISIBILITY,
                                        RPMA_F_COMPLETION_ALWAYS, NULL),
                             kWho, "rpma_flush (used)")) ||
        (ret = example_check(example_wait(conn, IBV_WC_RDMA_READ, &wc), kWho,
                             "waiting for the flush")))
      break;
    example_say(kWho, "appended \"%s\"", argv[i]);
    end = new_used;
    staged += n;
  }
  if (!ret) {
    *used = 0;
    if ((ret = example_check(
             rpma_read(conn, used_mr, 0, log_mr, used_offset, sizeof(*used),
                       RPMA_F_COMPLETION_ALWAYS, NULL),
             kWho, "rpma_read (used)")) == 0 &&
        (ret = example_check(example_wait(conn, IBV_WC_RDMA_READ, &wc), kWho,
                             "waiting for the read")) == 0 &&
        *used != end) {
      fprintf(stderr, "%s: used reads %llu, expected %llu\n", kWho,
              (unsigned long long)*used, (unsigned long long)end);
      ret = -1;
    }
  }

out_remote:
  ret |= example_check(rpma_mr_remote_delete(&log_mr), kWho,
                       "rpma_mr_remote_delete");
out_disconnect:
  ret |= example_check(example_disconnect(&conn), kWho, "disconnecting");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&used_mr), kWho, "rpma_mr_dereg");
  ret |= example_check(rpma_mr_dereg(&src_mr), kWho, "rpma_mr_dereg");
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(words);
  free(used);
  return ret ? 1 : 0;
}
