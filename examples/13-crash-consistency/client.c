/*
 * 13-crash-consistency/client.c: appends record 1 to the server's log in
 * persistent memory and tells the server it is durable, in one of ten
 * ways (log.h): five persistence bugs, each beside its fix. Every way works
 * when nothing crashes; crash_test.cc crashes the server at every point
 * that matters and shows which ways lose the record.
 *
 *   client ADDR PORT VARIANT
 */
#include <stdio.h>
#include <stdlib.h>

#include "example_common.h"
#include "log.h"

static const char kWho[] = "log client";

struct log_conn {
  struct rpma_conn *conn;
  struct rpma_mr_remote *dst;
  struct rpma_mr_local *src_mr;
  char *src;
};

static int write_at(struct log_conn *c, size_t offset, size_t len) {
  return example_check(rpma_write(c->conn, c->dst, offset, c->src_mr, offset,
                                  len, RPMA_F_COMPLETION_ON_ERROR, NULL),
                       kWho, "rpma_write");
}

/* Posts a flush; waits for its completion unless told not to. */
static int flush(struct log_conn *c, size_t offset, size_t len,
                 enum rpma_flush_type type, bool wait) {
  struct ibv_wc wc;
  int ret = example_check(
      rpma_flush(c->conn, c->dst, offset, len, type,
                 wait ? RPMA_F_COMPLETION_ALWAYS : RPMA_F_COMPLETION_ON_ERROR,
                 NULL),
      kWho, "rpma_flush");
  if (!ret && wait)
    ret = example_check(example_wait(c->conn, IBV_WC_RDMA_READ, &wc), kWho,
                        "waiting for the flush");
  return ret;
}

/* The commit word, 8 bytes that are never torn (rpma_atomic_write(3)). */
static int commit_atomically(struct log_conn *c) {
  return example_check(
      rpma_atomic_write(c->conn, c->dst, COMMIT_OFFSET, c->src + COMMIT_OFFSET,
                        RPMA_F_COMPLETION_ON_ERROR, NULL),
      kWho, "rpma_atomic_write");
}

/* "Record 1 is durable": a 0-byte write with immediate data. */
static int signal_server(struct log_conn *c) {
  return example_check(
      rpma_write_with_imm(c->conn, NULL, 0, NULL, 0, 0,
                          RPMA_F_COMPLETION_ON_ERROR, SEQUENCE, NULL),
      kWho, "rpma_write_with_imm");
}

static int append(struct log_conn *c, enum log_variant variant) {
  const enum rpma_flush_type persistent = RPMA_FLUSH_TYPE_PERSISTENT;
  int ret;
  switch (variant) {
    case SIGNAL_BEFORE_FLUSH:
      /* Bug: the flushes are posted but never waited for. */
      if ((ret = write_at(c, RECORD_OFFSET, RECORD_LEN)) ||
          (ret = flush(c, RECORD_OFFSET, RECORD_LEN, persistent, false)) ||
          (ret = commit_atomically(c)) ||
          (ret = flush(c, COMMIT_OFFSET, 8, persistent, false)))
        return ret;
      return signal_server(c);
    case COMMIT_WITH_DATA:
      /* Bug: one flush for record and commit: the commit may persist and
       * the record not. */
      if ((ret = write_at(c, RECORD_OFFSET, RECORD_LEN)) ||
          (ret = commit_atomically(c)) ||
          (ret = flush(c, RECORD_OFFSET, COMMIT_OFFSET + 8, persistent, true)))
        return ret;
      return signal_server(c);
    case WRONG_RANGE:
      /* Bug: the record's flush covers the 64 bytes after it. */
      if ((ret = write_at(c, RECORD_OFFSET, RECORD_LEN)) ||
          (ret = flush(c, RECORD_OFFSET + RECORD_LEN, RECORD_LEN, persistent,
                       true)) ||
          (ret = commit_atomically(c)) ||
          (ret = flush(c, COMMIT_OFFSET, 8, persistent, true)))
        return ret;
      return signal_server(c);
    case VISIBILITY:
      /* Bug: visible is not persistent. */
      if ((ret = write_at(c, RECORD_OFFSET, RECORD_LEN)) ||
          (ret = flush(c, RECORD_OFFSET, RECORD_LEN, RPMA_FLUSH_TYPE_VISIBILITY,
                       true)) ||
          (ret = commit_atomically(c)) ||
          (ret = flush(c, COMMIT_OFFSET, 8, persistent, true)))
        return ret;
      return signal_server(c);
    case TORN_RECORD:
      /* Bug: a 16-byte commit {sequence, length} in one rpma_write. */
      if ((ret = write_at(c, RECORD_OFFSET, RECORD_LEN)) ||
          (ret = flush(c, RECORD_OFFSET, RECORD_LEN, persistent, true)) ||
          (ret = write_at(c, COMMIT_OFFSET, 16)) ||
          (ret = flush(c, COMMIT_OFFSET, 16, persistent, true)))
        return ret;
      return signal_server(c);
    default:
      /* Every fix is this one protocol: the record, flushed and waited
       * for; then the 8-byte commit word, flushed and waited for; then the
       * word to the server. */
      if ((ret = write_at(c, RECORD_OFFSET, RECORD_LEN)) ||
          (ret = flush(c, RECORD_OFFSET, RECORD_LEN, persistent, true)) ||
          (ret = commit_atomically(c)) ||
          (ret = flush(c, COMMIT_OFFSET, 8, persistent, true)))
        return ret;
      return signal_server(c);
  }
}

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 4 || log_variant_parse(argv[3]) < 0) {
    fprintf(stderr, "usage: %s ADDR PORT VARIANT\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  const enum log_variant variant = (enum log_variant)log_variant_parse(argv[3]);
  struct rpma_peer *peer = NULL;
  struct rpma_peer_cfg *pcfg = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct log_conn c = {NULL, NULL, NULL, example_malloc(LOG_SIZE)};
  if (c.src == NULL) return 1;
  for (size_t i = 0; i < RECORD_LEN; ++i)
    c.src[RECORD_OFFSET + i] = (char)log_record_byte(i);
  if (variant == TORN_RECORD) {
    const uint64_t commit[2] = {SEQUENCE, RECORD_LEN};
    memcpy(c.src + COMMIT_OFFSET, commit, sizeof(commit));
  } else {
    const uint64_t word = (uint64_t)SEQUENCE << 32 | RECORD_LEN;
    memcpy(c.src + COMMIT_OFFSET, &word, sizeof(word));
  }

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(rpma_mr_reg(peer, c.src, LOG_SIZE,
                                       RPMA_MR_USAGE_WRITE_SRC, &c.src_mr),
                           kWho, "rpma_mr_reg")))
    goto out_peer;
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(
           example_client_connect(peer, addr, port, cfg, NULL, &c.conn), kWho,
           "connecting")))
    goto out_cfg;

  /* The server's region and its word that it writes directly to PMem. */
  if ((ret = example_pdata_get_mr_pcfg(kWho, c.conn, &c.dst, &pcfg)))
    goto out_remote;

  if ((ret = append(&c, variant))) goto out_remote;
  example_say(kWho, "appended record %d (%s)", SEQUENCE,
              log_variant_names[variant]);
  /* The server hangs up once it has the word. */
  ret = example_check(example_wait_closed(&c.conn), kWho,
                      "waiting for the server to hang up");

out_remote:
  ret |=
      example_check(rpma_peer_cfg_delete(&pcfg), kWho, "rpma_peer_cfg_delete");
  ret |= example_check(rpma_mr_remote_delete(&c.dst), kWho,
                       "rpma_mr_remote_delete");
  if (c.conn != NULL)
    ret |= example_check(example_disconnect(&c.conn), kWho, "disconnecting");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&c.src_mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(c.src);
  return ret ? 1 : 0;
}
