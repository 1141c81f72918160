#!/bin/bash
# process_faults_test.sh LAUNCHER SERVER CLIENT ONE_PROCESS_PAIR
# RPMA_HARNESS_FAULTS on 10-write-with-imm: a faults file given to one
# process of the pair (launcher --faults LABEL=FILE) acts in that process
# only; in one process it acts on the program's default backend; a bad file
# is an error, never a run without faults.
set -u
launcher="$1" server="$2" client="$3" pair="$4"
data="$(dirname "$0")/testdata"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
want() {  # want TEXT-FILE GREP-PATTERN WHAT
  grep -qE -- "$2" "$1" || fail "$3: no line matching /$2/"
}
not_want() {
  if grep -qE -- "$2" "$1"; then fail "$3: a line matches /$2/"; fi
}
out="${TEST_TMPDIR:-/tmp}/process_faults.$$"

echo "== client0 only: its write-with-imm completes with REM_ACCESS_ERR"
"$launcher" --timeout 30 --expect client0=1 --expect server=1 \
  --faults "client0=$data/deny_write_with_imm.yaml" \
  "$server" 192.168.0.1 7451 -- "$client" 192.168.0.1 7451 0xcafe0001 hi \
  >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 0 ] || fail "client-only: launcher exit $rc"
want "$out" '^\[client0\] completion \(wr_id 0\) failed: remote access error' \
  "client-only: the client's write fails"
# The server's NIC has no fault: its receive is flushed when the client's
# QP goes to the error state and the client disconnects.
want "$out" '^\[server\] completion \(wr_id 0\) failed: Work Request Flushed Error' \
  "client-only: the server's receive is flushed"
not_want "$out" '^\[server\].*(remote access|local protection)' \
  "client-only: no fault in the server"

echo "== server only: its first polled completion says LOC_PROT_ERR"
"$launcher" --timeout 30 --expect server=1 \
  --faults "server=$data/recv_status_rewritten.yaml" \
  "$server" 192.168.0.1 7452 -- "$client" 192.168.0.1 7452 0xcafe0001 hi \
  >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 0 ] || fail "server-only: launcher exit $rc"
want "$out" '^\[server\] completion \(wr_id 0\) failed: local protection error' \
  "server-only: the server's receive fails"
want "$out" '^\[client0\] write-with-imm client: wrote "hi" with immediate data 0xcafe0001' \
  "server-only: the client's write succeeds"

echo "== a bad file for one process: the launcher refuses it, nothing starts"
"$launcher" --timeout 30 --faults "server=$data/bad_side.yaml" \
  "$server" 192.168.0.1 7453 -- "$client" 192.168.0.1 7453 0xcafe0001 hi \
  >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 2 ] || fail "bad file: launcher exit $rc, want 2 (usage)"
want "$out" "bad_side.yaml:4:5: faults\[0\]\.side: a faults file \(RPMA_HARNESS_FAULTS\) applies to the one process it is given to" \
  "bad file: the message names the line and the key"
not_want "$out" '^\[server\]' "bad file: the server did not start"
"$launcher" --timeout 30 --faults "client7=$data/deny_write_with_imm.yaml" \
  "$server" 192.168.0.1 7454 >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 2 ] || fail "unknown label: launcher exit $rc, want 2"
want "$out" 'faults client7=\.\.\.: no such process' "unknown label: message"

echo "== one process (server and client threads on one fake NIC)"
RPMA_HARNESS_FAULTS="$data/deny_write_with_imm.yaml" \
  "$pair" 192.168.0.1 7455 1 -- 0xcafe0001 hi >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -ne 0 ] || fail "one process: the pair passed despite the fault"
want "$out" 'completion \(wr_id 0\) failed: remote access error' \
  "one process: the write fails"

echo "== one program with an unusable file: the error, then calls fail"
RPMA_HARNESS_FAULTS="$data/no_such_file.yaml" \
  "$client" 192.168.0.1 7456 0xcafe0001 hi >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -ne 0 ] || fail "missing file: the client passed"
want "$out" "^rpma-harness: no NIC is available: RPMA_HARNESS_FAULTS=$data/no_such_file.yaml: $data/no_such_file.yaml: cannot open the faults file: No such file or directory" \
  "missing file: the message"
[ "$(grep -c 'cannot open the faults file' "$out")" = 1 ] ||
  fail "missing file: the message is not printed once"
want "$out" 'rpma_utils_get_ibv_context failed|failed: Provider error' \
  "missing file: the first call fails"

rm -f "$out"
if [ $failures -ne 0 ]; then
  echo "process_faults_test: $failures failure(s)"
  exit 1
fi
echo "process_faults_test: PASS"
