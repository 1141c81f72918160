#!/usr/bin/env bash
# mismatch_test.sh: the example pairs' checks can fail. Each case runs a
# pair's one-process launcher on the fake NIC with server and client
# arguments that disagree, and requires the pair to report the mismatch and
# exit 1 (not 0, not hang). One XML case per run.
#
#   mismatch_test.sh LAUNCHER_DIR
set -uo pipefail
dir=$1
cases=()

expect_failure() { # NAME LAUNCHER ARGS...
  local name=$1 launcher=$2 out rc
  shift 2
  out=$(timeout 60 "$dir/$launcher" 192.168.0.1 7399 "$@" 2>&1)
  rc=$?
  if [[ $rc == 1 ]] && grep -q '^launcher: FAILED' <<<"$out"; then
    cases+=("$name|1|")
    echo "PASS $name: $(grep -v '^launcher:' <<<"$out" | grep -i -m1 -E 'expected|mismatch|failed')"
  else
    cases+=("$name|0|exit $rc")
    echo "FAIL $name (exit $rc)"
    echo "$out" | tail -n 20 | sed 's/^/    /'
  fi
}

expect_failure AtomicWriteServerNoticesOtherWords 06_atomic_write_test 1 alpha beta -- alpha gamma
expect_failure PingPongServerNoticesWrongSeed 08_messages_ping_pong_test 1 8 5 -- 7 5
expect_failure PingPongServerNoticesWrongRoundCount 08_messages_ping_pong_test 1 7 4 -- 7 5
expect_failure ReceiveCqServerNoticesWrongRoundCount 11_receive_completion_queue_test 1 100 3 -- 100 4
expect_failure SrqServerNoticesWrongRoundCount 12_srq_ping_pong_test 2 2 3 -- %i000 4

n=${#cases[@]}
f=0
for c in "${cases[@]}"; do [[ $(cut -d'|' -f2 <<<"$c") == 1 ]] || f=$((f + 1)); done
{
  echo '<?xml version="1.0" encoding="UTF-8"?>'
  echo "<testsuites tests=\"$n\" failures=\"$f\" errors=\"0\">"
  echo "<testsuite name=\"ExampleMismatch\" tests=\"$n\" failures=\"$f\" errors=\"0\" skipped=\"0\">"
  for c in "${cases[@]}"; do
    if [[ $(cut -d'|' -f2 <<<"$c") == 1 ]]; then
      echo "  <testcase name=\"${c%%|*}\" classname=\"ExampleMismatch\"/>"
    else
      echo "  <testcase name=\"${c%%|*}\" classname=\"ExampleMismatch\"><failure message=\"$(cut -d'|' -f3 <<<"$c")\"/></testcase>"
    fi
  done
  echo "</testsuite></testsuites>"
} >"${XML_OUTPUT_FILE:-/dev/null}"
echo "mismatch: $((n - f)) passed, $f failed"
[[ $f == 0 ]]
