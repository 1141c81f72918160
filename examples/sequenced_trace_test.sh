#!/bin/bash
# sequenced_trace_test: the fabric's sequenced mode on real example pairs
# (docs/two-processes.md, "Sequenced mode: the same seed, the same merged
# trace"), each run through the launcher with --sequence:
#   1. the same seed three times gives a byte-identical merged trace
#      (write-with-imm and ping-pong);
#   2. some other seed gives a different interleaving of the same run;
#   3. a server with no client is a deadlock, reported with where it waits;
#   4. a client killed at a step ("kill client0@step:3") ends the server's
#      connection at the same step every run (identical traces).
# Arguments: LAUNCHER WI_SERVER WI_CLIENT PP_SERVER PP_CLIENT CONN_SERVER
set -u
launcher=$1 wi_server=$2 wi_client=$3 pp_server=$4 pp_client=$5 conn_server=$6
tmp=${TEST_TMPDIR:-/tmp}/sequenced.$$
mkdir -p "$tmp"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run NAME SEED [launcher args...]: the merged trace goes to $tmp/NAME.SEED.N
run() {
  local name=$1 seed=$2; shift 2
  local n=0
  while [ -e "$tmp/$name.$seed.$n" ]; do n=$((n + 1)); done
  last="$tmp/$name.$seed.$n"
  "$launcher" --timeout 30 --sequence "$seed" --trace "$last" "$@" \
    >"$last.log" 2>&1
  status=$?
}

pair_wi=("$wi_server" 192.168.0.1 7401 -- "$wi_client" 192.168.0.1 7401
         0xcafe0001 hello)
pair_pp=("$pp_server" 192.168.0.1 7402 7 3 -- "$pp_client" 192.168.0.1 7402
         7 3)

# Same seed: three runs of one pair, two of the other (a third run of the
# second pair found nothing the first pair's third run does not).
for name in wi pp; do
  declare -n pair="pair_$name"
  repeats=3
  [ "$name" = pp ] && repeats=2
  for i in $(seq 1 "$repeats"); do
    run "$name" 1 "${pair[@]}"
    [ "$status" -eq 0 ] || fail "$name seed 1 run $i: exit $status: $(cat "$last.log")"
  done
  first="$tmp/$name.1.0"
  [ -s "$first" ] || fail "$name: empty trace"
  for i in $(seq 1 $((repeats - 1))); do
    cmp -s "$first" "$tmp/$name.1.$i" ||
      fail "$name: seed 1 run $((i + 1)) differs: $(diff "$first" "$tmp/$name.1.$i" | head -5)"
  done
  differs=""
  for seed in 2 3 4 5 6 7 8; do
    run "$name" "$seed" "${pair[@]}"
    [ "$status" -eq 0 ] || fail "$name seed $seed: exit $status"
    if ! cmp -s "$first" "$last"; then differs=$seed; break; fi
  done
  if [ -n "$differs" ]; then
    echo "$name: seed $differs interleaves differently from seed 1:"
    diff "$first" "$tmp/$name.$differs.0" | head -6
  else
    fail "$name: seeds 2..8 all gave seed 1's interleaving"
  fi
done

# 3. Deadlock: a server waiting for a connection nobody will make.
run deadlock 1 "$conn_server" 192.168.0.1 7403
[ "$status" -eq 1 ] || fail "deadlock: exit $status, want 1"
grep -q "deadlock at step 0: every process waits and no NIC step is pending: server waits in rdma_get_cm_event" "$last.log" ||
  fail "deadlock: no report: $(cat "$last.log")"

# 4. A peer killed at a step: the same survivor's view every run. The
# second run keeps the launcher off the CPU for 300 ms after each fork, as a
# loaded machine may: the children join and step meanwhile, and the trace
# must not change (the launcher once stamped "start client0" with the step
# it read after the fork: 0 in one run, 2 in another).
for i in 1 2; do
  pause=()
  [ "$i" -eq 2 ] && pause=(--pause-after-fork 300)
  run kill 1 "${pause[@]}" --kill client0@step:3 --expect server=nonzero "${pair_pp[@]}"
  [ "$status" -eq 0 ] || fail "kill run $i: exit $status: $(cat "$last.log")"
  grep -q "peer process gone" "$last" || fail "kill run $i: the server never saw its peer go"
  grep -q "3 launcher kill client0 signal 9" "$last" ||
    fail "kill run $i: not killed at step 3: $(grep launcher "$last")"
done
cmp -s "$tmp/kill.1.0" "$tmp/kill.1.1" ||
  fail "kill: two runs differ: $(diff "$tmp/kill.1.0" "$tmp/kill.1.1" | head -5)"

rm -rf "$tmp"
if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS"
