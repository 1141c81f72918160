/*
 * librpma_check.h: fails the build, with a message that says why, when
 * <librpma.h> is not rpma-harness's.
 *
 * With Debian's librpma-dev installed there are two librpma.h on the system:
 * /usr/include/librpma.h (librpma 1.2) and the harness's rpma/librpma.h. The
 * harness's include directory comes first in every build the harness sets up
 * (Bazel's -isystem for @rpma_harness//rpma, pkg-config's -I, CMake's
 * imported targets), before /usr/include. If a build's flags put
 * /usr/include first anyway (`-isystem /usr/include` ahead of ours), or miss
 * ours, this header stops it. The harness's C++ headers and sources include
 * it; programs may too:
 *
 *   #include "rpma/librpma_check.h"   // or test RPMA_HARNESS_LIBRPMA_H
 */
#ifndef RPMA_HARNESS_RPMA_LIBRPMA_CHECK_H_
#define RPMA_HARNESS_RPMA_LIBRPMA_CHECK_H_

#include <librpma.h>

#ifndef RPMA_HARNESS_LIBRPMA_H
#error \
    "rpma-harness: <librpma.h> resolved to a header that is not the harness's (Debian's librpma-dev installs /usr/include/librpma.h, librpma 1.2); put the harness's include directory before /usr/include (Bazel: deps @rpma_harness//rpma; pkg-config --cflags rpma-harness; CMake: rpma_harness::rpma), or remove librpma-dev"
#endif

#endif /* RPMA_HARNESS_RPMA_LIBRPMA_CHECK_H_ */
