#!/usr/bin/env bash
# tools/softroce_vm/random_differential.sh [N] [FIRST_SEED]: runs N (default
# 1000) random verbs programs on live rxe and on the fake's rxe personality
# inside the soft-RoCE VM (tests/random_differential_test.cc); a program
# whose streams differ is shrunk and printed as a ready-to-paste Program
# literal. Prints "random differential: N programs, K differ".
set -uo pipefail
cd "$(dirname "$0")/../.."
n=${1:-1000}
first=${2:-1}
bazel build //tests:random_differential_test >/dev/null 2>&1 || {
  echo "random differential: build failed" >&2
  exit 1
}
bin=$(bazel info bazel-bin 2>/dev/null)
# ~0.7 s per program on rxe under TCG (2 cores).
budget=$((n + 300))
out=$(mktemp -d /tmp/random_diff.XXXXXX)
tools/softroce_vm/run.sh --out "$out" --timeout $((budget + 120)) \
  --binary-timeout "$budget" \
  --env RPMA_HARNESS_RANDOM_PROGRAMS="$n" --env RPMA_HARNESS_RANDOM_SEED="$first" \
  "$bin/tests/random_differential_test" >"$out/run.log" 2>&1
status=$?
tr -d '\r' <"$out/console.log" | grep -aE "random differential:|differs|shrunk|Program\{|Step\{|rxe: |fake: " || true
echo "random differential: output in $out"
exit $status
