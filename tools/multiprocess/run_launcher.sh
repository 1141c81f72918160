#!/bin/sh
# rpma_multiprocess_test's test program: runs the launcher with its
# arguments ($1 is the launcher). See defs.bzl.
exec "$@"
