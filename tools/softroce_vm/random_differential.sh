#!/usr/bin/env bash
# tools/softroce_vm/random_differential.sh [N] [FIRST_SEED] [FLAVOUR]: runs N
# (default 1000) random verbs programs of one flavour (default random, the
# narrow ones; also wide, duplex, retry, disconnect, destroy, rnr, mtu,
# shared, srq, cq) on live rxe and on the fake's rxe personality inside the
# soft-RoCE VM (tests/random_differential_test.cc), JOBS (default 5) at once
# (the mtu and rnr programs one at a time); a program whose streams differ is
# shrunk and printed as a ready-to-paste Program literal. Prints
# "random differential (FLAVOUR): N programs, K differ".
set -uo pipefail
cd "$(dirname "$0")/../.."
n=${1:-1000}
first=${2:-1}
flavour=${3:-random}
case $flavour in
  random) test=FakeRxeAgreesWithRxe/ ;;
  wide | duplex | retry | disconnect | destroy | rnr | mtu | shared | srq | cq)
    test="FakeRxeAgreesWithRxeOn${flavour^}Programs/" ;;
  *)
    echo "random differential: unknown flavour '$flavour'" >&2
    exit 2
    ;;
esac
prefix=${flavour^^}
bazel build //tests:random_differential_test >/dev/null 2>&1 || {
  echo "random differential: build failed" >&2
  exit 1
}
bin=$(bazel info bazel-bin 2>/dev/null)
# Under TCG (2 cores) ~0.4 s a program alone, ~0.15 s each with three at
# once; rnr, retry, disconnect and destroy programs take a few times longer,
# a cq program ~4.7 s (its drains wait for rxe to finish each step).
per=2
[ "$flavour" = cq ] && per=6
budget=$((n * per + 300))
out=$(mktemp -d /tmp/random_diff.XXXXXX)
tools/softroce_vm/run.sh --out "$out" --timeout $((budget + 120)) \
  --binary-timeout "$budget" \
  --env GTEST_FILTER="*RandomDifferential.$test*rdma_core" \
  --env RPMA_HARNESS_VM_JOBS="${JOBS:-5}" \
  --env "RPMA_HARNESS_${prefix}_PROGRAMS=$n" \
  --env "RPMA_HARNESS_${prefix}_SEED=$first" \
  "$bin/tests/random_differential_test" >"$out/run.log" 2>&1
status=$?
tr -d '\r' <"$out/console.log" | grep -aE "random differential|differs|shrunk|Program\{|Step\{|rxe: |fake: |^shard " || true
echo "random differential: output in $out"
exit $status
