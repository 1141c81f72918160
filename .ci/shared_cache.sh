#!/usr/bin/env bash
# .ci/shared_cache.sh DISK_CACHE LOGDIR: is every cached build output
# relocatable, and is the suite hermetic? (issue 29)
#
# A team shares one Bazel cache between checkouts (a --disk_cache on a
# build machine, a remote cache in CI): an action's output made in one
# checkout is handed to every other. So an output that names the absolute
# path of the checkout, output base or execroot where it was built
# (a RUNPATH, a generated script, a pkg-config prefix) works in the first
# checkout and breaks -- or silently runs the first checkout's files -- in
# the next. This stage is that team, on one machine:
#
#   1. the checkout this script is in (A) has built and tested //... with
#      --disk_cache=DISK_CACHE (.ci/run's test command does);
#   2. a second clone (B) of the same commit, in another directory (so
#      another output base and execroot), runs the whole suite from the same
#      cache: --nocache_test_results (every test runs again), in Bazel's
#      linux-sandbox (an action sees only its declared inputs in its
#      execroot) with a private, empty /tmp per action
#      (--sandbox_tmpfs_path=/tmp), as a remote executor would run it;
#   3. every file of B's bazel-bin is scanned for A's paths (output base,
#      execroot, workspace): an output that names one came from the cache
#      with A's path baked in.
#
# Prints "shared cache: N passed, N failed, N skipped" (B's test cases, and
# the scan as one case) and, for a failed scan, each file and the path it
# names. Exits non-zero on any failure. B's output base is removed at the
# end (bazel clean --expunge).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd -P)
cache=$1 work=$2
. "$here/.ci/count_cases.sh"
. "$here/.ci/random_quarter.sh"

a_output_base=$(cd "$here" && bazel info output_base 2>/dev/null)
a_execroot=$(cd "$here" && bazel info execution_root 2>/dev/null)
commit=$(git -C "$here" rev-parse HEAD)
# Not under /tmp: each sandboxed action gets a private tmpfs there, which
# would hide a workspace below it.
b=$(mktemp -d /var/tmp/rpma-harness-second-clone.XXXXXX) || exit 1
git clone -q --no-checkout "$here" "$b/repo" && git -C "$b/repo" checkout -q "$commit" || {
  echo "shared cache: cannot clone $here into $b" >&2
  echo "shared cache: 0 passed, 1 failed, 0 skipped"
  exit 1
}
cd "$b/repo" || exit 1

status=0
# The random programs at a quarter of their count (.ci/random_quarter.sh):
# this stage asks whether the suite is hermetic, not again whether the fake
# agrees with every recorded program (the test command did).
# --noremote_upload_local_results: what this clone builds itself stays out
# of the cache, which .ci/run keeps from run to run; every entry is the
# first clone's, whose paths the scan below looks for.
bazel test --disk_cache="$cache" --noremote_upload_local_results \
  --nocache_test_results --keep_going \
  --config=hermetic "${random_quarter[@]}" \
  //... >"$work/second-clone.log" 2>&1 || status=$?
grep -E "FAILED|TIMEOUT|NO STATUS|ERROR:" "$work/second-clone.log" >&2
tests=$(bazel query 'tests(//...) except attr(tags, "manual", tests(//...))' 2>/dev/null)
# shellcheck disable=SC2086
read -r passed failed skipped < <(count_cases "$(bazel info bazel-testlogs 2>/dev/null)" $tests)
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
# How much came from the cache (a second clone that rebuilt everything
# would prove nothing about cached outputs).
grep -E "^INFO: [0-9]+ processes" "$work/second-clone.log" | tail -1 >&2

# The scan: regular files only (runfiles trees are symlinks into the
# output tree), text and binaries alike.
bin=$(bazel info bazel-bin 2>/dev/null)
scanned=$(find "$bin/" -type f | wc -l)
leaks=$(find "$bin/" -type f -print0 |
  xargs -0 grep -l -a -F -e "$a_output_base" -e "$a_execroot" -e "$here/" 2>/dev/null)
if [ -n "$leaks" ]; then
  echo "shared cache: outputs of the second clone that name the first clone's paths" \
    "($here, $a_output_base):" >&2
  while read -r f; do
    echo "  ${f#"$bin"/}: $(grep -a -o -F -e "$a_output_base" -e "$a_execroot" -e "$here/" "$f" | sort -u | head -3 | tr '\n' ' ')" >&2
  done <<<"$leaks"
  failed=$((failed + 1))
else
  passed=$((passed + 1))
  echo "shared cache: $scanned output files scanned, none names the first clone" >&2
fi

bazel clean --expunge >/dev/null 2>&1
cd / && rm -rf "$b"
echo "shared cache: ${passed} passed, ${failed} failed, ${skipped} skipped"
[ "$failed" -eq 0 ]
