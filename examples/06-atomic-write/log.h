/*
 * log.h: the remote append-only log of the atomic-write pair. `used` is how
 * many bytes of data[] are valid; an appender writes the new bytes, flushes
 * them, then publishes them by replacing `used` with one 8-byte atomic write
 * (so a reader never sees a `used` that covers bytes not yet there).
 */
#ifndef EXAMPLES_06_ATOMIC_WRITE_LOG_H_
#define EXAMPLES_06_ATOMIC_WRITE_LOG_H_

#include <stdint.h>

#define LOG_SIGNATURE "RPMA-HARNESS-LOG"
#define LOG_DATA_SIZE 1024

struct example_log {
  char signature[16];
  /* at offset 16: a multiple of RPMA_ATOMIC_WRITE_ALIGNMENT (8) */
  uint64_t used;
  char data[LOG_DATA_SIZE];
};

#endif  // EXAMPLES_06_ATOMIC_WRITE_LOG_H_
