/*
 * gpspm.h: the two messages of the "general purpose server persistency
 * method" (GPSPM) pair: the client asks the server to make a range of the
 * server's memory persistent and the server answers once it has. Fixed-size,
 * host byte order (both ends are the same program family on one kind of
 * host).
 */
#ifndef EXAMPLES_05_FLUSH_GPSPM_GPSPM_H_
#define EXAMPLES_05_FLUSH_GPSPM_GPSPM_H_

#include <stdint.h>

struct gpspm_flush_request {
  uint64_t offset; /* into the server's region */
  uint64_t length;
  uint64_t op_context; /* echoed in the response */
};

struct gpspm_flush_response {
  uint64_t op_context;
  uint64_t status; /* 0: persistent and checked; else the server failed */
};

#define GPSPM_MSG_SIZE 32 /* room for either message */

#endif  // EXAMPLES_05_FLUSH_GPSPM_GPSPM_H_
