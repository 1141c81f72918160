/*
 * rpma_harness_crash.h: what a librpma program may tell rpma-harness's
 * crash checker (crash/crash_check.h) that no librpma call says: that the
 * server made a range persistent itself, and that the program promised
 * something to the outside world. Both are weak symbols: linked against
 * another librpma (Debian's, on an RDMA host) the macros do nothing.
 *
 *   example_persist(&pmem, off, len);        // msync, pmem_persist, ...
 *   RPMA_HARNESS_PERSISTED(pmem.ptr + off, len);
 *   printf("record %u committed\n", n);
 *   RPMA_HARNESS_PROMISE("commit 1");
 */
#ifndef RPMA_HARNESS_RPMA_RPMA_HARNESS_CRASH_H_
#define RPMA_HARNESS_RPMA_RPMA_HARNESS_CRASH_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* R6: [addr, addr + len) of the server's persistent memory is durable. */
void rpma_harness_persisted(const void *addr, size_t len) __attribute__((weak));
/* The program told the world `what`: a crash point; every image after it
 * carries the promise for the invariant (Image::promises). */
void rpma_harness_promise(const char *what) __attribute__((weak));

#ifdef __cplusplus
}
#endif

#define RPMA_HARNESS_PERSISTED(addr, len)                              \
  do {                                                                 \
    if (rpma_harness_persisted) rpma_harness_persisted((addr), (len)); \
  } while (0)
#define RPMA_HARNESS_PROMISE(what)                        \
  do {                                                    \
    if (rpma_harness_promise) rpma_harness_promise(what); \
  } while (0)

#endif /* RPMA_HARNESS_RPMA_RPMA_HARNESS_CRASH_H_ */
