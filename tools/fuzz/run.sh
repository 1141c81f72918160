#!/usr/bin/env bash
# tools/fuzz/run.sh: builds the libFuzzer targets with clang and runs them.
#
#   tools/fuzz/run.sh build                  build every target
#   tools/fuzz/run.sh run NAME [SECONDS]     fuzz one target (default 60 s)
#   tools/fuzz/run.sh all [SECONDS]          build, then fuzz each target for
#                                            SECONDS, two at a time (CI);
#                                            non-zero on a crash
#   tools/fuzz/run.sh list                   the target names
#
# Why a script and not Bazel: Bazel's default toolchain here is gcc, and
# libFuzzer needs clang (-fsanitize=fuzzer). The script compiles the few
# sources a target needs with clang++ directly (Debian's clang 14 ships
# libFuzzer); nothing is downloaded. Objects and binaries go to
# $RPMA_FUZZ_OUT (default .fuzz-out/ in the repository, git-ignored).
#
# Each target starts from its seed corpus, tools/fuzz/corpus/NAME/, read-only;
# new inputs go to $RPMA_FUZZ_OUT/corpus/NAME. A crash leaves
# $RPMA_FUZZ_OUT/crashes/NAME-crash-<sha1>; after fixing the bug, copy it
# into tools/fuzz/corpus/NAME/ (keep the crash- prefix) so that
# //tools/fuzz:fuzz_corpus_test replays it on every `bazel test //...`.
# To fuzz longer: tools/fuzz/run.sh run fake_nic_wr 3600 (extra arguments
# after SECONDS go to libFuzzer, e.g. -jobs=2 -workers=2).
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT="${RPMA_FUZZ_OUT:-$PWD/.fuzz-out}"
CXX="${CXX_FUZZ:-clang++}"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
CXXFLAGS="-std=c++17 -O1 -g -fno-omit-frame-pointer -I. -Irpma -Wall -Wextra"

# name -> entry function and the target's own sources.
declare -A ENTRY=(
  [fake_nic_wr]=FuzzFakeNicWr
  [mr_descriptor]=FuzzMrDescriptor
  [rpma_api]=FuzzRpmaApi
  [fault_file]=FuzzFaultFile
  [crash_journal]=FuzzCrashJournal
)
declare -A LIBS=()
# Memory limits per target (libFuzzer flags). The scenario parser must stay
# bounded whatever the text: its input bound is 64 KiB (inputs up to 70 KB
# are generated, so the bound itself is fuzzed), no single allocation may
# reach 64 MB (an MR sized from the file would), and the whole process,
# ASan's quarantine (16 MB here) included, stays under 512 MB.
declare -A LIMITS=(
  [scenario_parser]="-rss_limit_mb=512 -malloc_limit_mb=64 -max_len=70000"
  [fault_file]="-rss_limit_mb=512 -max_len=70000"
  [crash_journal]="-rss_limit_mb=512 -max_len=20000"
  [replay_trace]="-rss_limit_mb=512 -max_len=140000"
)
declare -A TARGET_ASAN=(
  [scenario_parser]="quarantine_size_mb=16"
)
declare -A SOURCES=(
  [fake_nic_wr]="tools/fuzz/fake_nic_wr_fuzz.cc tests/connected_qps.cc"
  [mr_descriptor]="tools/fuzz/mr_descriptor_fuzz.cc"
  [rpma_api]="tools/fuzz/rpma_api_fuzz.cc"
  [fault_file]="tools/fuzz/fault_file_fuzz.cc"
  [crash_journal]="tools/fuzz/crash_journal_fuzz.cc crash/crash_check.cc crash/persistence_model.cc"
)
if [ -f tools/scenario/scenario_parser.cc ]; then
  ENTRY[scenario_parser]=FuzzScenarioParser
  ENTRY[replay_trace]=FuzzReplayTrace
  SOURCES[scenario_parser]="tools/fuzz/scenario_parser_fuzz.cc tools/scenario/scenario_parser.cc tools/scenario/scenario_budget.cc tools/scenario/scenario_runner.cc crash/crash_check.cc crash/persistence_model.cc"
  LIBS[scenario_parser]="-lyaml-cpp"
  SOURCES[replay_trace]="tools/fuzz/replay_trace_fuzz.cc tools/scenario/scenario_parser.cc tools/scenario/scenario_budget.cc tools/scenario/scenario_runner.cc crash/crash_check.cc crash/persistence_model.cc"
  LIBS[replay_trace]="-lyaml-cpp"
fi

# What every target links: the fake NIC, the rpma layer, the backends.
common_sources() {
  ls nic/*.cc faults/*.cc rpma/*.cc verbs_backend/*.cc \
    check/checking_backend.cc \
    2>/dev/null | grep -v '_test\.cc$'
}

compile() {  # src obj extra-flags...
  local src="$1" obj="$2"
  shift 2
  mkdir -p "$(dirname "$obj")"
  # Up to date: newer than its source, every header and this script.
  if [ "$obj" -nt "$src" ] && [ "$obj" -nt "$0" ] &&
     [ -z "$(find check crash nic faults mock rpma verbs_backend tests tools -name '*.h' -newer "$obj" 2>/dev/null | head -1)" ]; then
    return 0
  fi
  # shellcheck disable=SC2086
  "$CXX" $CXXFLAGS $SAN "$@" -c "$src" -o "$obj"
}

# Two jobs at a time (this machine class has two cores): `two_at_a_time
# CMD...` starts CMD in the background once fewer than two run;
# `all_jobs_done` waits for the rest. Either returns non-zero when a job it
# waited for failed.
_jobs=()
two_at_a_time() {
  local rc=0
  if [ ${#_jobs[@]} -ge 2 ]; then
    wait "${_jobs[0]}" || rc=1
    _jobs=("${_jobs[@]:1}")
  fi
  "$@" &
  _jobs+=($!)
  return $rc
}
all_jobs_done() {
  local rc=0 pid
  for pid in "${_jobs[@]}"; do wait "$pid" || rc=1; done
  _jobs=()
  return $rc
}

link_target() {  # name common-objects...
  local name="$1" src obj
  shift
  local target_objs=()
  for src in ${SOURCES[$name]}; do target_objs+=("$OUT/obj/${src//\//_}.o"); done
  # shellcheck disable=SC2086
  "$CXX" $SAN -fsanitize=fuzzer "$@" "${target_objs[@]}" \
    "$OUT/obj/entry_$name.o" ${LIBS[$name]:-} -libverbs -lrdmacm -lpthread \
    -o "$OUT/bin/${name}_fuzzer" &&
    echo "fuzz: built $OUT/bin/${name}_fuzzer" >&2
}

build() {
  echo "fuzz: building with $("$CXX" --version | head -1)" >&2
  mkdir -p "$OUT/obj" "$OUT/bin"
  local objs=() src obj failed=0 name
  for src in $(common_sources); do
    obj="$OUT/obj/${src//\//_}.o"
    objs+=("$obj")
    two_at_a_time compile "$src" "$obj" -fsanitize=fuzzer-no-link || failed=1
  done
  # The targets' own sources (some shared by two targets: each once).
  for src in $(printf '%s\n' ${SOURCES[@]} | sort -u); do
    two_at_a_time compile "$src" "$OUT/obj/${src//\//_}.o" -fsanitize=fuzzer-no-link || failed=1
  done
  for name in "${!ENTRY[@]}"; do
    two_at_a_time compile tools/fuzz/libfuzzer_entry.cc "$OUT/obj/entry_$name.o" \
      -fsanitize=fuzzer-no-link "-DRPMA_HARNESS_FUZZ_TARGET=${ENTRY[$name]}" || failed=1
  done
  all_jobs_done || failed=1
  [ "$failed" -eq 0 ] || { echo "fuzz: a compile failed" >&2; return 1; }
  for name in "${!ENTRY[@]}"; do
    two_at_a_time link_target "$name" "${objs[@]}" || failed=1
  done
  all_jobs_done || failed=1
  [ "$failed" -eq 0 ] || { echo "fuzz: a link failed" >&2; return 1; }
}

run_one() {  # name seconds [libfuzzer args...]
  local name="$1" seconds="$2"
  shift 2
  local bin="$OUT/bin/${name}_fuzzer"
  [ -x "$bin" ] || { echo "fuzz: $bin not built (run.sh build)" >&2; return 2; }
  mkdir -p "$OUT/corpus/$name" "$OUT/crashes"
  local log="$OUT/$name.log"
  local status=0
  local asan="${ASAN_OPTIONS:-detect_leaks=1}"
  [ -n "${TARGET_ASAN[$name]:-}" ] && asan="$asan:${TARGET_ASAN[$name]}"
  # shellcheck disable=SC2086
  ASAN_OPTIONS="$asan" \
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    ${LIMITS[$name]:-} \
    -print_final_stats=1 -artifact_prefix="$OUT/crashes/$name-" "$@" \
    "$OUT/corpus/$name" "tools/fuzz/corpus/$name" >"$log" 2>&1 || status=$?
  local execs speed units
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  units=$(ls "$OUT/corpus/$name" "tools/fuzz/corpus/$name" 2>/dev/null | grep -vc ':$' || true)
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $name FAILED after ${execs:-0} runs (log: $log):" >&2
    grep -E "ERROR|SUMMARY|invariant|artifact|Test unit written" "$log" | head -20 >&2
    echo "fuzz $name: FAILED, ${execs:-0} runs, ${speed:-0} exec/s"
    return 1
  fi
  echo "fuzz $name: ok, ${execs:-0} runs in ${seconds}s, ${speed:-0} exec/s, corpus $units inputs"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  build)
    build
    ;;
  run)
    [ $# -ge 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
    name="$1"
    seconds="${2:-60}"
    shift $(( $# >= 2 ? 2 : 1 ))
    run_one "$name" "$seconds" "$@"
    ;;
  all)
    # Two targets fuzz at a time, each SECONDS on a core of its own.
    seconds="${1:-60}"
    build
    failed=0
    for name in $(printf '%s\n' "${!ENTRY[@]}" | sort); do
      two_at_a_time run_one "$name" "$seconds" || failed=1
    done
    all_jobs_done || failed=1
    [ "$failed" -eq 0 ]
    ;;
  list)
    printf '%s\n' "${!ENTRY[@]}" | sort
    ;;
  *)
    sed -n '2,12p' "$0" >&2
    exit 2
    ;;
esac
