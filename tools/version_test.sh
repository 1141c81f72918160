#!/usr/bin/env bash
# Every place that reports the harness version agrees with version.bzl, and
# CHANGELOG.md has a section for it: tools/harness --version, the scenario
# runner's and the launcher's --version. (pkg-config and the CMake package
# version are checked by the CMake and Make consumers in .ci/run; the
# header by examples/bazel_consumer:harness_version_test.)
#   version_test.sh SCENARIO MULTIPROCESS HARNESS VERSION_BZL CHANGELOG
set -euo pipefail
scenario="$1" multiprocess="$2" harness="$3" version_bzl="$4" changelog="$5"
fail=0
version="$(sed -n 's/^RPMA_HARNESS_VERSION = "\(.*\)"$/\1/p' "$version_bzl")"
if ! [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "FAIL: version.bzl: '$version' is not MAJOR.MINOR.PATCH"
  exit 1
fi
expect() {
  local what="$1" got="$2" want="$3"
  if [ "$got" = "$want" ]; then
    echo "ok: $what: $got"
  else
    echo "FAIL: $what: '$got', expected '$want'"
    fail=1
  fi
}
expect "scenario --version" "$("$scenario" --version)" "rpma-harness scenario $version"
expect "multiprocess --version" "$("$multiprocess" --version)" "rpma-harness multiprocess $version"
expect "tools/harness --version" "$("$harness" --version)" "rpma-harness $version"
if grep -q "^## $version - [0-9]\{4\}-[0-9]\{2\}-[0-9]\{2\}$" "$changelog"; then
  echo "ok: CHANGELOG.md has a section for $version"
else
  echo "FAIL: CHANGELOG.md has no '## $version - YYYY-MM-DD' section"
  fail=1
fi
# --check-faults: the fault-file parser, without a run.
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
printf 'faults:\n  - name: deny\n    on: execute\n    opcode: write_with_imm\n    action: complete\n    status: REM_ACCESS_ERR\n' >"$tmp/good.yaml"
printf 'faults:\n  - name: deny\n    on: nowhere\n    action: complete\n' >"$tmp/bad.yaml"
expect "--check-faults on a good file" "$("$scenario" --check-faults "$tmp/good.yaml" | tr '\n' '|')" \
  "$tmp/good.yaml: 1 fault rule|  deny|"
set +e
err="$("$scenario" --check-faults "$tmp/bad.yaml" 2>&1 >/dev/null)"
code=$?
set -e
expect "--check-faults on a bad file: exit" "$code" "2"
case "$err" in
  *"bad.yaml:3:9: fault 'deny'.on: unknown value 'nowhere'"*) echo "ok: the error names the line and the value" ;;
  *) echo "FAIL: --check-faults error: $err"; fail=1 ;;
esac
exit $fail
