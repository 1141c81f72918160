/*
 * log.h: the one-record log of 13-crash-consistency, shared by client and
 * server: where the record and its commit word live in the server's
 * persistent memory, the client's variants (five bugs, each with its fixed
 * twin), and the recovery that says whether what survived a crash is
 * consistent.
 *
 * Layout of the persistent region (LOG_SIZE bytes):
 *   [0, 64)     the record: RECORD_LEN bytes, log_record_byte(i)
 *   [256, 264)  the commit word: (sequence << 32) | length, or 0
 *   [256, 272)  the torn-record variant's commit: {sequence, length}
 */
#ifndef EXAMPLES_13_CRASH_CONSISTENCY_LOG_H_
#define EXAMPLES_13_CRASH_CONSISTENCY_LOG_H_

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define LOG_SIZE 8192
#define RECORD_OFFSET 0
#define RECORD_LEN 64
#define COMMIT_OFFSET 256
#define SEQUENCE 1

static inline uint8_t log_record_byte(size_t i) {
  return (uint8_t)('a' + i % 26);
}

/* The client's commit protocols: each bug next to its fix. */
enum log_variant {
  SIGNAL_BEFORE_FLUSH, /* bug: "committed" sent before the flush completed */
  SIGNAL_AFTER_FLUSH,
  COMMIT_WITH_DATA, /* bug: record and commit word flushed once, together */
  COMMIT_AFTER_DATA,
  WRONG_RANGE, /* bug: the record's flush covers the bytes after it */
  RIGHT_RANGE,
  VISIBILITY, /* bug: RPMA_FLUSH_TYPE_VISIBILITY taken for persistence */
  PERSISTENT,
  TORN_RECORD, /* bug: a 16-byte commit written as one rpma_write */
  ATOMIC_RECORD,
  LOG_VARIANTS
};

static const char *const log_variant_names[LOG_VARIANTS] = {
    "signal-before-flush", "signal-after-flush", "commit-with-data",
    "commit-after-data",   "wrong-range",        "right-range",
    "visibility",          "persistent",         "torn-record",
    "atomic-record"};

static inline int log_variant_parse(const char *name) {
  for (int v = 0; v < LOG_VARIANTS; ++v)
    if (strcmp(name, log_variant_names[v]) == 0) return v;
  return -1;
}

/* Reads [offset, offset + len) of the persistent region. */
typedef void (*log_read_fn)(void *ctx, size_t offset, void *dst, size_t len);

/*
 * Recovery and its invariant. Reads the commit; a committed record must be
 * all there, and a commit the server promised (promised_sequence, 0 for
 * none) must have survived. Returns 0, or -1 with what is wrong in `why`.
 */
static inline int log_recover(log_read_fn read, void *ctx,
                              enum log_variant variant,
                              uint64_t promised_sequence, char *why,
                              size_t why_len) {
  uint64_t sequence = 0, length = 0;
  if (variant == TORN_RECORD) {
    uint64_t commit[2];
    read(ctx, COMMIT_OFFSET, commit, sizeof(commit));
    sequence = commit[0];
    length = commit[1];
  } else {
    uint64_t word;
    read(ctx, COMMIT_OFFSET, &word, sizeof(word));
    sequence = word >> 32;
    length = word & 0xffffffffu;
  }
  if (sequence == 0 && length == 0) {
    if (promised_sequence == 0) return 0;
    snprintf(why, why_len, "commit %llu was promised; the log is empty",
             (unsigned long long)promised_sequence);
    return -1;
  }
  if (sequence != SEQUENCE || length != RECORD_LEN) {
    snprintf(why, why_len, "the commit holds sequence %llu, length %llu",
             (unsigned long long)sequence, (unsigned long long)length);
    return -1;
  }
  for (size_t i = 0; i < RECORD_LEN; i += 8) {
    uint8_t got[8];
    read(ctx, RECORD_OFFSET + i, got, sizeof(got));
    for (size_t j = 0; j < 8; ++j) {
      if (got[j] != log_record_byte(i + j)) {
        snprintf(why, why_len,
                 "commit %d names a record whose byte %zu did not survive",
                 SEQUENCE, i + j);
        return -1;
      }
    }
  }
  return 0;
}

#endif /* EXAMPLES_13_CRASH_CONSISTENCY_LOG_H_ */
