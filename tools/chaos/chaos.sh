#!/usr/bin/env bash
# chaos.sh: the fabric chaos test. Servers and clients (chaos_node), each
# its own process on one fake-NIC fabric directory, run writes with
# immediate data, sends, reads and flushes round after round, while a
# seeded driver SIGKILLs and SIGSTOPs / SIGCONTs them at random points and
# restarts what it killed. Then it checks, as cases:
#
#   NoHang                 every process ended by itself (or by our kill)
#                          within its deadline; none reported a hang
#   NoLostBytes            no success completion promised bytes that were not
#                          there (write with imm and send checked by the
#                          server, read checked by the client)
#   SurvivorsSeeCleanErrors every process not killed by us exited 0 (done)
#                          or 4 (its peer was lost: an error completion or
#                          a refused connection), never by a signal or
#                          another code
#   ResourcesBackToBaseline every process that finished checked its fds,
#                          memfds, threads and heap against the baseline
#                          after its first connection (exit 6 otherwise)
#   OperationsHappened     the run did real work: operations completed on
#                          both sides, connections made after kills
#
#   chaos.sh NODE [--seed S] [--seconds T] [--servers N] [--clients M]
#            [--transport shm|socket] [--fabric DIR]
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
seed=1 seconds=12 servers=2 clients=4 transport=shm fabric=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --seed) seed=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --transport) transport=$2; shift 2 ;;
    --fabric) fabric=$2; shift 2 ;;
    *) echo "chaos.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
RANDOM=$seed

work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/chaos.XXXXXX")
export RPMA_HARNESS_FABRIC=${fabric:-$work/fabric}
export RPMA_HARNESS_FABRIC_TRANSPORT=$transport
export CHAOS_WAIT_S=${CHAOS_WAIT_S:-20}
stopfile=$work/stop
addr=192.168.0.1
base_port=$((7400 + RANDOM % 400))

declare -A pid_of role_of killed_by_us log_of
started=0 kills=0 stops=0 restarts=0
results=()  # "name role rc killed"

start() {  # start NAME ROLE ARGS...
  local name=$1 role=$2
  shift 2
  local log=$work/$name.$started.log
  "$node" "$role" "$@" >"$log" 2>&1 &
  pid_of[$name]=$!
  role_of[$name]=$role
  log_of[$name]=$log
  killed_by_us[$name]=0
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
    if [[ ${role_of[$name]} == client ]]; then
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
  case $((RANDOM % 4)) in
    0 | 1)
      killed_by_us[$victim]=1
      kill -KILL "$pid" 2>/dev/null && kills=$((kills + 1))
      ;;
    2)
      kill -STOP "$pid" 2>/dev/null && stops=$((stops + 1))
      sleep "0.$((1 + RANDOM % 8))"
      kill -CONT "$pid" 2>/dev/null
      ;;
    3) ;;  # a quiet moment
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
hung=()
for name in "${!pid_of[@]}"; do  # still running: a hang
  hung+=("$name")
  kill -KILL "${pid_of[$name]}" 2>/dev/null
  reap "$name"
done

ops_client=0 ops_server=0 conns=0 clean=0 peer_lost=0
summary() {
  echo "seed $seed, ${seconds}s, $servers servers, $clients clients, transport $transport:"
  echo "  $started processes started, $kills SIGKILLs, $stops SIGSTOP/SIGCONTs, $restarts restarts"
  echo "  operations completed: $ops_client by clients, $ops_server received by servers; $conns connections"
  echo "  ended: $clean done, $peer_lost with their peer lost (exit 4)"
}
bad_hang=() bad_bytes=() bad_exit=() bad_leak=()
for r in "${results[@]}"; do
  read -r name role rc killed log <<<"$r"
  line=$(grep '^chaos_node: ' "$log" | grep ' exit ' | tail -1)
  if [[ -n $line ]]; then
    ops=$(sed 's/.* ops \([0-9]*\) .*/\1/' <<<"$line")
    c=$(sed 's/.* conns \([0-9]*\) .*/\1/' <<<"$line")
    conns=$((conns + c))
    if [[ $role == client ]]; then ops_client=$((ops_client + ops)); else ops_server=$((ops_server + ops)); fi
  fi
  if ((killed)) && [[ $rc == 137 ]]; then continue; fi
  case $rc in
    0) clean=$((clean + 1)) ;;
    4) peer_lost=$((peer_lost + 1)) ;;
    3) bad_hang+=("$name ($log)") ;;
    5) bad_bytes+=("$name ($log)") ;;
    6) bad_leak+=("$name ($log)") ;;
    *) bad_exit+=("$name exit $rc ($log)") ;;
  esac
done
for name in "${hung[@]}"; do bad_hang+=("$name still running at the end"); done

show() {  # show WHAT ITEMS...: fails with the items and their logs' tails
  local what=$1
  shift
  (($# == 0)) && return 0
  echo "$what:"
  local item log
  for item in "$@"; do
    echo "  $item"
    log=$(sed -n 's/.*(\(.*\)).*/\1/p' <<<"$item")
    [[ -n $log && -f $log ]] && tail -5 "$log" | sed 's/^/    /'
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
  ((ops_client > 0 && ops_server > 0 && conns > servers && clean > 0)) || {
    echo "too little happened to judge"; return 1; }
}
check OperationsHappened did_work
rm -rf "$work"
finish
