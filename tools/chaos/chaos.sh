#!/usr/bin/env bash
# chaos.sh: the fabric chaos test. Servers and clients (chaos_node), each
# its own process on one fake-NIC fabric directory, run writes with
# immediate data, sends, reads, flushes and 3 MiB bursts (which fill the
# shared-memory rings) round after round, while a seeded driver, at random
# points, SIGKILLs or SIGSEGVs them (and restarts them), SIGSTOPs and
# SIGCONTs them, asks them to exit(3) mid-frame (SIGUSR1), fills the fabric
# directory with junk and sends stray clients at it, or removes the
# directory. Then it checks, as cases:
#
#   NoHang                 every process ended by itself (or by our kill)
#                          within its deadline; none reported a hang
#   NoLostBytes            no success completion promised bytes that were not
#                          there (write with imm, burst and send checked by
#                          the server, read checked by the client)
#   SurvivorsSeeCleanErrors every process not killed by us exited 0 (done)
#                          or 4 (its peer was lost: an error completion or
#                          a refused connection) -- or 7 when we asked it
#                          to exit mid-frame -- never by a signal or another
#                          code
#   ResourcesBackToBaseline every process that finished checked its fds,
#                          memfds, threads and heap against the baseline
#                          after its first connection (exit 6 otherwise)
#   OperationsHappened     the run did real work: operations completed on
#                          both sides, connections made after kills
#   StraysRefusedByJunk    every stray client sent at a junk listener name
#                          was refused (exit 4)
#   RingsFilled            (shm) frames did find a ring full
#
#   chaos.sh NODE [--seed S] [--seconds T] [--servers N] [--clients M]
#            [--transport shm|socket] [--fabric DIR]
#   chaos.sh NODE --sequenced --launcher LAUNCHER [--seed S] [--runs R]
#            [--clients M]
#
# Sequenced mode (--sequenced; LAUNCHER: the multiprocess launcher): one
# server and M clients under the fabric's Sequencer (docs/two-processes.md,
# "Sequenced mode"), seeds S .. S+R-1. Each seed decides the order of every
# NIC step of every process and a kill plan (which processes get SIGKILL at
# which step); each run is made twice, and its merged trace must come out
# byte for byte the same (case ReplaysFromItsSeed): a failure found at a
# seed replays from that seed alone (the failure prints the command). There
# are no stops and no restarts in this mode (a stopped process only delays
# the sequence; a restarted one would be a new process label), and a hang is
# the Sequencer's deadlock report rather than a deadline.
#
# The seed fixes which process each chaos event hits and when (in wall-clock
# time); the interleaving inside the processes is the machine's. Defaults:
# seed 1, 12 seconds, 2 servers, 4 clients, a fabric directory of its own
# (--fabric: another's, as soak.sh shares its fabric with the chaos). The
# long mode (README) is `tools/harness chaos --seconds 600`.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ -f tools/testing/sh_cases.sh ]]; then
  source tools/testing/sh_cases.sh
else
  source "$here/../testing/sh_cases.sh"
fi
sh_cases_suite FabricChaos

node=$(realpath "$1")
shift
seed=1 seconds=12 servers=2 clients=4 transport=shm fabric="" runs=10
sequenced=0 launcher_path=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --sequenced) sequenced=1; shift ;;
    --launcher) launcher_path=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --transport) transport=$2; shift 2 ;;
    --fabric) fabric=$2; shift 2 ;;
    *) echo "chaos.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
# RPMA_HARNESS_CHAOS_RUNS caps --runs: CI's stages that look at the same
# code again (asan+ubsan, the shared-cache clone; .ci/random_quarter.sh)
# run the first seeds only.
if [[ -n ${RPMA_HARNESS_CHAOS_RUNS:-} ]] && ((RPMA_HARNESS_CHAOS_RUNS > 0 && RPMA_HARNESS_CHAOS_RUNS < runs)); then
  runs=$RPMA_HARNESS_CHAOS_RUNS
fi
if ((sequenced)); then
  [[ -x $launcher_path ]] || {
    echo "chaos.sh: --sequenced needs --launcher PATH (the multiprocess launcher, //tools/multiprocess:multiprocess)" >&2
    exit 2
  }
  launcher=$(realpath "$launcher_path")
fi
RANDOM=$seed

work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/chaos.XXXXXX")
export RPMA_HARNESS_FABRIC=${fabric:-$work/fabric}
export RPMA_HARNESS_FABRIC_TRANSPORT=$transport
export CHAOS_WAIT_S=${CHAOS_WAIT_S:-20}
# Each process says at its end how often a frame found a shared-memory ring
# full (case RingsFilled: the bursts must have filled rings).
export RPMA_HARNESS_FABRIC_STATS=1
stopfile=$work/stop
addr=192.168.0.1
base_port=$((7400 + RANDOM % 400))

declare -A pid_of role_of killed_by_us log_of
started=0 kills=0 segvs=0 exits_asked=0 exits_mid_frame=0 stops=0 restarts=0
ulimit -c 0
# A SIGSEGV we send is a death, not a bug for ASan to report (it would
# abort with 134 instead of dying by the signal, 139).
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0
results=()  # "name role rc killed log" (killed: the ends our signals explain)

start() {  # start NAME ROLE ARGS...
  local name=$1 role=$2
  shift 2
  local log=$work/$name.$started.log
  "$node" "${role/stray/client}" "$@" >"$log" 2>&1 &
  pid_of[$name]=$!
  role_of[$name]=$role
  log_of[$name]=$log
  killed_by_us[$name]=-  # the exit statuses our signals explain (",137,...")
  started=$((started + 1))
}
server_args() { echo "$addr $((base_port + $1)) $((1000 + $1)) $stopfile"; }
client_args() {  # a fresh seed per start
  echo "$addr $((base_port + $1 % servers)) $((RANDOM * 32768 + RANDOM)) 3 40"
}

# reap NAME: records the exit of a process that ended.
reap() {
  local name=$1 rc
  wait "${pid_of[$name]}" 2>/dev/null
  rc=$?
  results+=("$name ${role_of[$name]} $rc ${killed_by_us[$name]} ${log_of[$name]}")
  unset "pid_of[$name]"
}


# ---- sequenced mode --------------------------------------------------------
replay_diffs=()
# run_sequenced: seeds seed .. seed+runs-1, each twice under the launcher.
run_sequenced() {
  local s r labels label i kill_args plan out trace rc line
  for ((s = seed; s < seed + runs; ++s)); do
    RANDOM=$s
    # The kill plan: 1 to 3 SIGKILLs at steps 20 .. 499 (a run of 4
    # clients x 3 rounds x 10 operations takes about 550 steps), the
    # server now and then; a rule whose step never comes (its victim ended
    # first) does not fire.
    kill_args=() plan=""
    for ((k = 0; k < 1 + RANDOM % 3; ++k)); do
      if ((RANDOM % 5 == 0)); then label=server; else label=client$((RANDOM % clients)); fi
      kill_args+=(--kill "$label@step:$((20 + RANDOM % 480))")
      plan+=" ${kill_args[-1]}"
    done
    labels=(server)
    for ((i = 0; i < clients; ++i)); do labels+=("client$i"); done
    local expects=()
    for label in "${labels[@]}"; do expects+=(--expect "$label=any"); done
    for r in 1 2; do
      out=$work/seq$s.run$r.out
      trace=$work/seq$s.run$r.trace
      "$launcher" --sequence "$s" --trace "$trace" --clients "$clients" --timeout 120 \
        "${kill_args[@]}" "${expects[@]}" \
        "$node" server "$addr" 7400 "$((1000 + s))" "$work/no-stopfile" \
        -- "$node" client "$addr" 7400 "$s%i" 3 10 >"$out" 2>&1
      rc=$?
      started=$((started + clients + 1))
      if ((r == 2)); then
        if ! cmp -s "$work/seq$s.run1.trace" "$trace"; then
          replay_diffs+=("seed $s: the two runs' traces differ ($work/seq$s.run1.trace, $trace)")
        fi
        continue
      fi
      echo "seed $s: kill plan$plan; launcher exit $rc" >>"$work/plans"
      kills=$((kills + $(grep -c '^launcher: kill ' "$out")))
      if grep -q 'deadlock\|hung (killed at the timeout)' "$out"; then
        hung+=("seed $s ($out): $(grep -m1 'deadlock\|hung' "$out")")
      fi
      for label in "${labels[@]}"; do
        local log=$work/seq$s.$label.log
        grep -F "[$label] " "$out" | sed "s/^\[$label\] //" >"$log"
        line=$(grep -F "launcher: ok $label (" "$out" || grep -F "launcher: FAIL $label:" "$out")
        local code=255 killed=-
        case $line in
          *"(exit code "*) code=$(sed 's/.*(exit code \([0-9]*\)).*/\1/' <<<"$line") ;;
          *"killed by signal 9"*) code=137 killed=,137 ;;
          *deadlocked* | *hung*) code=3 ;;  # counted under NoHang
        esac
        results+=("$label ${label%%[0-9]*} $code $killed $log")
      done
    done
  done
}

# ---- wall-clock mode -------------------------------------------------------
junk=0 strays=0 removals=0
# junk_and_stray: fills the fabric directory with junk -- 100 files of no
# meaning, and at a port nobody serves a listener name that is no listener
# (a file, a FIFO, a directory, a symlink to /dev/zero, a socket whose
# process is gone) -- and starts a stray client at that port, which must be
# refused (exit 4) at once: never connect, never hang.
junk_and_stray() {
  local dir=$RPMA_HARNESS_FABRIC k
  [[ -d $dir ]] || return 0
  local port=$((base_port + servers + 1 + RANDOM % 8))
  local path=$dir/l-$addr-$port
  rm -rf "$path"
  case $((RANDOM % 5)) in
    0) head -c 100 /dev/urandom >"$path" ;;
    1) mkfifo "$path" ;;
    2) mkdir "$path" ;;
    3) ln -s /dev/zero "$path" ;;
    4) # bound by its name in the directory: sun_path holds 108 bytes
      (cd "$dir" && python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' \
        "l-$addr-$port") ;;
  esac
  for ((k = 0; k < 100; ++k)); do echo junk >"$dir/junk-$junk-$k"; done
  junk=$((junk + 1))
  start "x$strays" stray "$addr" "$port" "$RANDOM" 1 3
  strays=$((strays + 1))
}
# remove_fabric: removes the whole fabric directory while everyone works.
# Established connections go on (their streams are open); a dial finds no
# listener and is refused. The servers are then killed and restarted (the
# next one recreates the directory, 0700, and listens again). Not done on a
# fabric shared with others (--fabric: the soak's own pair lives there).
remove_fabric() {
  [[ -z $fabric ]] || return 0
  rm -rf "$RPMA_HARNESS_FABRIC"
  removals=$((removals + 1))
  sleep "0.$((2 + RANDOM % 5))"
  local name
  for name in "${!pid_of[@]}"; do
    [[ ${role_of[$name]} == server ]] || continue
    killed_by_us[$name]+=,137
    kill -KILL "${pid_of[$name]}" 2>/dev/null && kills=$((kills + 1))
  done
}

run_wall_clock() {
  for ((i = 0; i < servers; ++i)); do
    # shellcheck disable=SC2046
    start "s$i" server $(server_args "$i")
  done
  for ((i = 0; i < servers; ++i)); do  # each listens before clients come
    for _ in $(seq 200); do
      grep -q "listening" "${log_of[s$i]}" 2>/dev/null && break
      sleep 0.02
    done
  done
  for ((i = 0; i < clients; ++i)); do
    # shellcheck disable=SC2046
    start "c$i" client $(client_args "$i")
  done

  end=$((SECONDS + seconds))
  while ((SECONDS < end)); do
    sleep "0.$((2 + RANDOM % 5))"
    # Restart what ended: clients always, a server we killed on its port.
    for name in "${!pid_of[@]}"; do
      kill -0 "${pid_of[$name]}" 2>/dev/null && continue
      reap "$name"
      i=${name#?}
      if [[ ${role_of[$name]} == stray ]]; then
        continue  # a stray runs once
      elif [[ ${role_of[$name]} == client ]]; then
        # shellcheck disable=SC2046
        start "$name" client $(client_args "$i")
      else
        # shellcheck disable=SC2046
        start "$name" server $(server_args "$i")
      fi
      restarts=$((restarts + 1))
    done
    # One chaos event: which process, and what.
    names=("${!pid_of[@]}")
    ((${#names[@]} > 0)) || continue
    mapfile -t names < <(printf '%s\n' "${names[@]}" | sort)
    victim=${names[RANDOM % ${#names[@]}]}
    pid=${pid_of[$victim]}
    case $((RANDOM % 16)) in
      [0-5])
        # Mostly SIGKILL; 1 in 3 SIGSEGV (the same end for the peers, by
        # another signal; no core: ulimit -c 0 above).
        if ((RANDOM % 3 == 0)); then
          killed_by_us[$victim]+=,139
          kill -SEGV "$pid" 2>/dev/null && segvs=$((segvs + 1))
        else
          killed_by_us[$victim]+=,137
          kill -KILL "$pid" 2>/dev/null && kills=$((kills + 1))
        fi
        ;;
      [6-9])
        kill -STOP "$pid" 2>/dev/null && stops=$((stops + 1))
        sleep "0.$((1 + RANDOM % 8))"
        kill -CONT "$pid" 2>/dev/null
        ;;
      10)  # exit(3) at its next post, mid-frame (chaos_node: exit code 7)
        # 138: SIGUSR1 came before main() set its handler (a kill, in effect).
        killed_by_us[$victim]+=,7,138
        kill -USR1 "$pid" 2>/dev/null && exits_asked=$((exits_asked + 1))
        ;;
      1[12]) ;;  # a quiet moment
      1[34]) junk_and_stray ;;
      15) remove_fabric ;;
    esac
  done

  # Clients finish their rounds (or fail); then the servers are told to stop.
  deadline=$((SECONDS + CHAOS_WAIT_S + 10))
  while ((SECONDS < deadline)); do
    left=0
    for name in "${!pid_of[@]}"; do
      [[ ${role_of[$name]} == client ]] || continue
      if kill -0 "${pid_of[$name]}" 2>/dev/null; then left=1; else reap "$name"; fi
    done
    ((left)) || break
    sleep 0.1
  done
  touch "$stopfile"
  deadline=$((SECONDS + CHAOS_WAIT_S + 10))
  while ((SECONDS < deadline)); do
    left=0
    for name in "${!pid_of[@]}"; do
      if kill -0 "${pid_of[$name]}" 2>/dev/null; then left=1; else reap "$name"; fi
    done
    ((left)) || break
    sleep 0.1
  done
  for name in "${!pid_of[@]}"; do  # still running: a hang
    hung+=("$name still running at the end")
    kill -KILL "${pid_of[$name]}" 2>/dev/null
    reap "$name"
  done
}

hung=()
if ((sequenced)); then
  run_sequenced
else
  run_wall_clock
fi

ops_client=0 ops_server=0 conns=0 clean=0 peer_lost=0 ring_full=0
summary() {
  if ((sequenced)); then
    echo "sequenced, seeds $seed..$((seed + runs - 1)) (each run twice), 1 server, $clients clients:"
  else
    echo "seed $seed, ${seconds}s, $servers servers, $clients clients, transport $transport:"
  fi
  echo "  $started processes started, $kills SIGKILLs, $segvs SIGSEGVs, $stops SIGSTOP/SIGCONTs, $restarts restarts"
  echo "  $exits_asked asked to exit mid-frame (SIGUSR1), $exits_mid_frame of them did (the others ended first)"
  ((sequenced)) ||
    echo "  fabric directory: removed $removals times; junk put in $junk times, $strays stray clients sent at it ($strays_refused refused)"
  echo "  operations completed: $ops_client by clients, $ops_server received by servers; $conns connections"
  echo "  ended: $clean done, $peer_lost with their peer lost (exit 4); $ring_full frames found a ring full"
}
bad_hang=() bad_bytes=() bad_exit=() bad_leak=() bad_stray=() strays_refused=0
for r in "${results[@]}"; do
  read -r name role rc killed log <<<"$r"
  line=$(grep '^chaos_node: ' "$log" | grep ' exit ' | tail -1)
  if [[ -n $line ]]; then
    ops=$(sed 's/.* ops \([0-9]*\) .*/\1/' <<<"$line")
    c=$(sed 's/.* conns \([0-9]*\) .*/\1/' <<<"$line")
    conns=$((conns + c))
    if [[ $role == client ]]; then ops_client=$((ops_client + ops)); else ops_server=$((ops_server + ops)); fi
  fi
  # The counts are the process's so far: its last line has them all.
  full=$(sed -n 's/.* \([0-9]*\) frames found the ring full.*/\1/p' "$log" | tail -1)
  ring_full=$((ring_full + ${full:-0}))
  # An end one of our signals explains: the signal's death, or exit 7 asked
  # for by SIGUSR1.
  if [[ $killed, == *",$rc,"* ]]; then
    [[ $rc == 7 ]] && exits_mid_frame=$((exits_mid_frame + 1))
    continue
  fi
  if [[ $role == stray ]]; then
    if [[ $rc == 4 ]]; then strays_refused=$((strays_refused + 1)); else bad_stray+=("$name exit $rc ($log)"); fi
    continue
  fi
  case $rc in
    0) clean=$((clean + 1)) ;;
    4) peer_lost=$((peer_lost + 1)) ;;
    3) bad_hang+=("$name ($log)") ;;
    5) bad_bytes+=("$name ($log)") ;;
    6) bad_leak+=("$name ($log)") ;;
    *) bad_exit+=("$name exit $rc ($log)") ;;
  esac
done
bad_hang+=("${hung[@]}")

show() {  # show WHAT ITEMS...: fails with the items and their logs' ends
  local what=$1
  shift
  (($# == 0)) && return 0
  echo "$what:"
  local item log
  for item in "$@"; do
    echo "  $item"
    log=$(sed -n 's/.*(\(.*\)).*/\1/p' <<<"$item")
    [[ -n $log && -f $log ]] || continue
    # The process's own words, then a sanitizer's report whole (its last
    # lines alone name no allocation), or else the log's last lines.
    grep '^chaos_node: ' "$log" | tail -5 | sed 's/^/    /'
    if grep -q '^==[0-9]*==ERROR: ' "$log"; then
      sed -n '/^==[0-9]*==ERROR: /,$p' "$log" | head -60 | sed 's/^/    /'
    else
      tail -5 "$log" | sed 's/^/    /'
    fi
  done
  return 1
}
summary
check NoHang show "hung" "${bad_hang[@]}"
check NoLostBytes show "lost bytes" "${bad_bytes[@]}"
check SurvivorsSeeCleanErrors show "unclean ends" "${bad_exit[@]}"
check ResourcesBackToBaseline show "not back to baseline" "${bad_leak[@]}"
did_work() {
  summary
  ((kills > 0 && ops_client > 0 && ops_server > 0 && conns > servers && clean > 0)) || {
    echo "too little happened to judge"; return 1; }
}
check OperationsHappened did_work
if ((!sequenced)); then
  strays_ok() { show "strays not refused" "${bad_stray[@]}"; }
  if ((strays > 0)); then
    check StraysRefusedByJunk strays_ok
  else
    skip StraysRefusedByJunk "the seed sent no stray client in ${seconds}s"
  fi
fi
if ((!sequenced)) && [[ $transport == shm ]]; then
  rings_full() {
    ((ring_full > 0)) || { echo "no frame found a ring full: the bursts did not fill one"; return 1; }
  }
  check RingsFilled rings_full
fi
if ((sequenced)); then
  check ReplaysFromItsSeed show "not replayed" "${replay_diffs[@]}"
fi
if sh_cases_any_failed; then
  # Bazel removes TEST_TMPDIR after the test: the evidence goes to the
  # test's outputs (bazel-testlogs/.../test.outputs/outputs.zip).
  if [[ -n ${TEST_UNDECLARED_OUTPUTS_DIR:-} ]]; then
    kept=$TEST_UNDECLARED_OUTPUTS_DIR/$(basename "$work")
    mkdir -p "$kept" && find "$work" -maxdepth 1 -type f -exec cp {} "$kept/" \; &&
      work=$kept
  fi
  echo "kept for a look: $work"
  if ((sequenced)); then
    echo "a failing seed S replays alone (and twice): tools/harness chaos --sequenced --seed S --runs 1 --clients $clients"
    cat "$work/plans"
  fi
else
  rm -rf "$work"
fi
finish
