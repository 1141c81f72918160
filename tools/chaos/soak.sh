#!/usr/bin/env bash
# soak.sh: the fabric over a long run. On one fake-NIC fabric directory, for
# --seconds (default 600):
#   - a soak pair that lives the whole run: a chaos_node server and a client
#     that connects, runs 40 checked operations (writes with immediate data,
#     sends, reads, flushes), disconnects, and again, round after round;
#   - the chaos mix around it (chaos.sh on the same fabric: servers and
#     clients killed, stopped and restarted at seeded points);
#   - an example pair (10-write-with-imm, server and client processes)
#     started again as soon as it ends.
# Every second it samples the soak pair's RSS, fds and threads
# (/proc/PID/status, /proc/PID/fd) and the client's operations; at the end
# tools/chaos/soak_report.py checks the drift bounds, prints the summary
# table and draws the plot (SVG). Cases (tools/testing/sh_cases.sh):
#   SoakPairEndsClean        both soak processes exit 0: no hang, no lost
#                            bytes, resources back to their baseline
#   ExamplePairsAllPassed    every example pair run passed
#   ChaosAroundItClean       chaos.sh's own cases all passed
#   MemoryFlat, FdsFlat, ThroughputSteady   the bounds (soak_report.py)
#
#   soak.sh NODE EXAMPLE_SERVER EXAMPLE_CLIENT [--seconds T] [--seed S]
#           [--out DIR]
#
# The long mode (README): `tools/harness soak` (10 minutes, out in
# /tmp/rpma_soak.<pid>: samples.csv, soak.svg, summary.md, the logs).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ -f tools/testing/sh_cases.sh ]]; then
  source tools/testing/sh_cases.sh
else
  source "$here/../testing/sh_cases.sh"
fi
sh_cases_suite FabricSoak

node=$(realpath "$1")
ex_server=$(realpath "$2")
ex_client=$(realpath "$3")
shift 3
seconds=600 seed=1 outdir=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) outdir=$2; shift 2 ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $seconds =~ ^[0-9]+$ && $seconds -ge 120 ]] ||
  { echo "soak.sh: --seconds needs at least 120 (two minutes to compare)" >&2; exit 2; }
outdir=${outdir:-/tmp/rpma_soak.$$}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
fabric=$(mktemp -d "${TMPDIR:-/tmp}/soak_fabric.XXXXXX")
export RPMA_HARNESS_FABRIC=$fabric/fabric
export CHAOS_WAIT_S=${CHAOS_WAIT_S:-20}
addr=192.168.0.1
soak_port=7300

# The soak pair (an --out directory may hold an earlier run's logs).
rm -f "$outdir/soak_server.log" "$outdir/soak_client.log" "$outdir/stop-server" \
  "$outdir/stop-client" "$outdir/stop-examples"
CHAOS_PROGRESS=1 "$node" server "$addr" "$soak_port" 4242 "$outdir/stop-server" \
  >"$outdir/soak_server.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do
  grep -q listening "$outdir/soak_server.log" 2>/dev/null && break
  sleep 0.02
done
CHAOS_PROGRESS=1 CHAOS_STOPFILE=$outdir/stop-client "$node" client "$addr" "$soak_port" \
  "$seed" 1000000000 40 >"$outdir/soak_client.log" 2>&1 &
client_pid=$!

# The chaos mix on the same fabric, for the whole run.
"$here/chaos.sh" "$node" --seed "$seed" --seconds "$seconds" --servers 2 --clients 3 \
  --fabric "$RPMA_HARNESS_FABRIC" >"$outdir/chaos.log" 2>&1 &
chaos_pid=$!

# Example pairs, one after another.
(
  port=7350 runs=0 failed=0 longest_ms=0
  while [[ ! -e $outdir/stop-examples ]]; do
    port=$((7350 + (runs % 40)))
    # The log goes before the server starts: the shell truncates it only in
    # the forked child, and a grep that runs first would find the last
    # run's "listening" line and start the client before this server
    # listens (that was the "refused by a listening server" of earlier
    # soaks: REJECTED status 8, no such name yet).
    rm -f "$outdir/example_server.trace" "$outdir/example_client.trace" "$outdir/example_server.log"
    RPMA_HARNESS_TRACE=$outdir/example_server.trace \
      "$ex_server" "$addr" "$port" >"$outdir/example_server.log" 2>&1 &
    s=$!
    # The client starts once the server says it listens (up to 60 s: under
    # the soak's load a start can be slow; how slow is kept).
    t0=$(date +%s%N) listening=0
    while (( $(date +%s%N) - t0 < 60000000000 )); do
      grep -q "listening on $addr:$port" "$outdir/example_server.log" 2>/dev/null && { listening=1; break; }
      sleep 0.01
    done
    waited_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    ((waited_ms > longest_ms)) && longest_ms=$waited_ms
    ((listening)) || echo "soak: example server on port $port not listening after ${waited_ms} ms" >>"$outdir/examples.log"
    RPMA_HARNESS_TRACE=$outdir/example_client.trace RPMA_HARNESS_FABRIC_STATS=1 \
      timeout 60 "$ex_client" "$addr" "$port" 0xcafe0001 written-with-imm >>"$outdir/examples.log" 2>&1
    c=$?
    if ((c != 0)); then  # what the client's NIC saw, and what the directory held
      keep=$outdir/example-failure-$((runs + 1))
      mkdir -p "$keep"
      cp "$outdir/example_client.trace" "$keep/" 2>/dev/null
      ls -la "$RPMA_HARNESS_FABRIC" >"$keep/fabric-ls.txt" 2>&1
      echo "server waited for: ${waited_ms} ms (listening: $listening)" >"$keep/wait.txt"
    fi
    # A server whose client failed may wait for ever: 10 s, then it goes.
    for _ in $(seq 1000); do kill -0 "$s" 2>/dev/null || break; sleep 0.01; done
    kill -KILL "$s" 2>/dev/null
    wait "$s"
    sv=$?
    [[ -n ${keep:-} ]] && cp "$outdir/example_server.trace" "$outdir/example_server.log" "$keep/" 2>/dev/null
    keep=""
    ((c == 0)) || echo "soak: example pair run $((runs + 1)) on port $port failed (client exit $c)" >>"$outdir/examples.log"
    cat "$outdir/example_server.log" >>"$outdir/examples.log"
    runs=$((runs + 1))
    ((c == 0 && sv == 0)) || failed=$((failed + 1))
    echo "$runs $failed $longest_ms" >"$outdir/examples.count"
  done
) &
examples_pid=$!

# proc_sample PID: "rss_kb fds threads" (or "0 0 0" once it is gone).
proc_sample() {
  local rss threads fds
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null)
  threads=$(awk '/^Threads:/ { print $2 }' "/proc/$1/status" 2>/dev/null)
  fds=$(find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  echo "${rss:-0} ${fds:-0} ${threads:-0}"
}
last_ops() {  # the latest progress line's operation count
  grep ' progress ops ' "$1" 2>/dev/null | tail -1 | awk '{ print $5 }'
}

echo "t,server_rss_kb,server_fds,server_threads,client_rss_kb,client_fds,client_threads,client_ops,server_ops" \
  >"$outdir/samples.csv"
start=$(date +%s.%N)
for ((t = 1; t <= seconds; ++t)); do
  # Sleep to the next whole second of the run, not one second per loop.
  now=$(date +%s.%N)
  delay=$(awk -v s="$start" -v n="$now" -v t="$t" 'BEGIN { d = s + t - n; print (d > 0 ? d : 0) }')
  sleep "$delay"
  read -r srss sfds sthr <<<"$(proc_sample "$server_pid")"
  read -r crss cfds cthr <<<"$(proc_sample "$client_pid")"
  echo "$t,$srss,$sfds,$sthr,$crss,$cfds,$cthr,$(last_ops "$outdir/soak_client.log"),$(last_ops "$outdir/soak_server.log")" \
    >>"$outdir/samples.csv"
done

# Wind down: the client ends its round, then the server; the chaos run ends
# by itself at --seconds.
touch "$outdir/stop-client" "$outdir/stop-examples"
wait "$client_pid"
client_rc=$?
touch "$outdir/stop-server"
wait "$server_pid"
server_rc=$?
wait "$examples_pid"
wait "$chaos_pid"
chaos_rc=$?
rm -rf "$fabric"

soak_pair_clean() {
  tail -2 "$outdir/soak_client.log" "$outdir/soak_server.log"
  [[ $client_rc == 0 && $server_rc == 0 ]]
}
examples_passed() {
  local runs failed longest
  read -r runs failed longest <"$outdir/examples.count"
  echo "$runs example pair runs, $failed failed; the slowest server took $longest ms to listen"
  [[ $runs -gt 0 && $failed == 0 ]]
}
chaos_clean() {
  grep -E '^(PASS|FAIL|SKIP) |processes started|operations completed|FabricChaos' "$outdir/chaos.log"
  [[ $chaos_rc == 0 ]]
}
check SoakPairEndsClean soak_pair_clean
check ExamplePairsAllPassed examples_passed
check ChaosAroundItClean chaos_clean
python3 "$here/soak_report.py" "$outdir/samples.csv" --svg "$outdir/soak.svg" \
  --summary "$outdir/summary.md" >"$outdir/report.txt" 2>&1
report_rc=$?
cat "$outdir/report.txt"
for bound in MemoryFlat FdsFlat ThroughputSteady; do
  bound_held() { grep -q "^$1 held" "$outdir/report.txt"; }
  check "$bound" bound_held "$bound"
done
((report_rc == 0 || report_rc == 1)) || echo "soak_report.py failed ($report_rc)"
echo "soak: samples, plot and logs in $outdir"
finish
