#!/bin/bash
# RPMA_HARNESS_CHECK on a plain program: the at-exit report of live rpma
# objects, with where each was created, and strict mode's exit code (66).
set -u
prog="$1"
fail() { echo "FAIL: $*"; exit 1; }

out=$(RPMA_HARNESS_CHECK=strict "$prog" leak 2>&1); rc=$?
[ "$rc" -eq 66 ] || fail "strict leak: exit $rc, want 66; output: $out"
grep -q 'RPMA-HARNESS CHECK \[leak\]: rpma_peer' <<<"$out" || fail "no peer report: $out"
grep -q 'RPMA-HARNESS CHECK \[leak\]: rpma_mr_local' <<<"$out" || fail "no MR report: $out"
grep -q 'created at:' <<<"$out" || fail "no creation stack: $out"
grep -q 'in make_peer_and_mr' <<<"$out" || fail "the creating function is not named: $out"
grep -q 'rpma-harness check: 2 finding(s): leak=2 (strict: exiting with 66)' <<<"$out" \
  || fail "no summary line: $out"

out=$(RPMA_HARNESS_CHECK=1 "$prog" leak 2>&1); rc=$?
[ "$rc" -eq 0 ] || fail "non-strict leak: exit $rc, want 0: $out"
grep -q 'leak=2' <<<"$out" || fail "non-strict: no summary: $out"

out=$(RPMA_HARNESS_CHECK=strict "$prog" clean 2>&1); rc=$?
[ "$rc" -eq 0 ] || fail "strict clean: exit $rc: $out"
! grep -q 'RPMA-HARNESS' <<<"$out" || fail "clean program reported: $out"

out=$("$prog" leak 2>&1); rc=$?
[ "$rc" -eq 0 ] || fail "unchecked leak: exit $rc: $out"
! grep -q 'RPMA-HARNESS' <<<"$out" || fail "unchecked program reported: $out"

out=$(RPMA_HARNESS_CHECK=lenght "$prog" clean 2>&1); rc=$?
grep -q "unknown check 'lenght'" <<<"$out" || fail "bad value not explained: $out"
echo PASS
