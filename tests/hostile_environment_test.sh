#!/usr/bin/env bash
# hostile_environment_test.sh: every RPMA_HARNESS_* variable a librpma
# program reads, set to garbage -- unknown words, non-UTF-8 bytes, 100 KB,
# numbers out of range, /dev/zero, a FIFO nobody writes, a directory, a
# missing or over-long path -- against an ordinary librpma program (the
# 10-write-with-imm pair, server and client threads in one process). For
# each value the program must end by itself (no hang: 20 s), never by a
# signal, and say what it made of the value on stderr, naming the variable
# (or the path it could not use). A variable that only means something
# beside another one says so when the other is missing.
#
#   hostile_environment_test.sh PAIR_PROGRAM
set -uo pipefail
source tools/testing/sh_cases.sh
sh_cases_suite HostileEnvironment

program=$(realpath "$1")
work=${TEST_TMPDIR:-$(mktemp -d)}/hostile_env
rm -rf "$work" && mkdir -p "$work"
mkfifo "$work/fifo"
long=$(head -c 100000 /dev/zero | tr '\0' x)
faults_ok=$work/faults.yaml
cat >"$faults_ok" <<'YAML'
faults:
  - name: seldom
    on: post_send
    action: fail
    errno: EIO
    probability: 0.000001
YAML
# Each run's own port: the pair listens on it.
port=$((7600 + RANDOM % 300))

# run_with VAR VALUE [ENV...]: exit code, stderr in $work/err.
run_with() {
  local var=$1 value=$2
  shift 2
  port=$((port + 1))
  env "$var=$value" "$@" timeout 20 "$program" 192.168.0.1 "$port" 1 -- 0x1234 hello \
    >"$work/out" 2>"$work/err"
}

# garbage VAR [ENV...]: words, bytes and sizes the variable does not take.
garbage() {
  local var=$1 value rc ok=0
  shift
  for value in garbage $'\xff\xfe\x80' "$long" -1 99999999999999999999999999 ' rxe'; do
    run_with "$var" "$value" "$@"
    rc=$?
    if ((rc == 124)); then echo "$var='${value:0:20}': hung"; ok=1; continue; fi
    if ((rc >= 128)); then echo "$var='${value:0:20}': killed by signal $((rc - 128))"; ok=1; continue; fi
    if ! grep -aq "$var" "$work/err"; then
      echo "$var='${value:0:20}': exit $rc, and nothing on stderr names $var:"
      head -c 300 "$work/err"; ok=1
    fi
  done
  return $ok
}

# paths VAR [ENV...]: files the variable cannot use.
paths() {
  local var=$1 value rc ok=0
  shift
  for value in /dev/zero "$work/fifo" "$work" /nonexistent/x "$work/"$'\xff\xfe/x' \
    "$work/$long"; do
    run_with "$var" "$value" "$@"
    rc=$?
    if ((rc == 124)); then echo "$var='${value:0:30}': hung"; ok=1; continue; fi
    if ((rc >= 128)); then echo "$var='${value:0:30}': killed by signal $((rc - 128))"; ok=1; continue; fi
    # A path it takes (a directory for a fabric or a journal) needs no word.
    [[ $value == "$work" && ($var == RPMA_HARNESS_FABRIC || $var == RPMA_HARNESS_CRASH_RECORD) ]] && continue
    # /dev/zero takes a trace's lines as a file would.
    [[ $value == /dev/zero && $var == RPMA_HARNESS_TRACE ]] && continue
    if ! grep -aqF -e "$var" -e "${value:0:60}" "$work/err"; then
      echo "$var='${value:0:30}': exit $rc, and nothing on stderr names $var or the path:"
      head -c 300 "$work/err"; ok=1
    fi
  done
  return $ok
}

check BackendGarbage garbage RPMA_HARNESS_BACKEND
check PersonalityGarbage garbage RPMA_HARNESS_PERSONALITY
check LogGarbage garbage RPMA_HARNESS_LOG
check CheckGarbage garbage RPMA_HARNESS_CHECK
check SeedGarbage garbage RPMA_HARNESS_SEED RPMA_HARNESS_FAULTS="$faults_ok"
check FabricTransportGarbage garbage RPMA_HARNESS_FABRIC_TRANSPORT RPMA_HARNESS_FABRIC="$work/fabric-t"
check FabricSharedGarbage garbage RPMA_HARNESS_FABRIC_SHARED RPMA_HARNESS_FABRIC="$work/fabric-s"
check FabricStatsGarbage garbage RPMA_HARNESS_FABRIC_STATS RPMA_HARNESS_FABRIC="$work/fabric-u"
check FaultsPaths paths RPMA_HARNESS_FAULTS
check TracePaths paths RPMA_HARNESS_TRACE
check FabricPaths paths RPMA_HARNESS_FABRIC
check CrashRecordPaths paths RPMA_HARNESS_CRASH_RECORD

needs_another() {
  local var=$1 value=$2 other=$3
  run_with "$var" "$value" || { echo "$var=$value alone: exit $?"; return 1; }
  grep -aq "$var is set but $other is not" "$work/err" || { cat "$work/err"; return 1; }
}
check SeedWithoutFaultsSaysSo needs_another RPMA_HARNESS_SEED 7 RPMA_HARNESS_FAULTS
check FabricStatsWithoutFabricSaysSo needs_another RPMA_HARNESS_FABRIC_STATS 1 RPMA_HARNESS_FABRIC
check FabricTransportWithoutFabricSaysSo needs_another RPMA_HARNESS_FABRIC_TRANSPORT socket RPMA_HARNESS_FABRIC

finish
