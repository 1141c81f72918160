#!/bin/sh
# rpma_multiprocess_test's test program: runs the launcher with its
# arguments (the first one left is the launcher). See defs.bzl.
#
#   run_launcher.sh [--verbs-dropin LIBIBVERBS_SO] LAUNCHER ARGS...
#
# --verbs-dropin: every process gets the drop-in libibverbs.so.1's
# directory (librdmacm.so.1 is beside it) on LD_LIBRARY_PATH, as an
# absolute path.
if [ "${1:-}" = "--verbs-dropin" ]; then
  dir=$(cd "$(dirname "$2")" && pwd -P) || exit 2
  shift 2
  launcher=$1
  shift
  exec "$launcher" --env "LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
fi
exec "$@"
