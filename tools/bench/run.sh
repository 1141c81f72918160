#!/usr/bin/env bash
# tools/bench/run.sh: every speed figure of the harness in one run, each with
# its baseline measured in the same run and the ratio, and docs/performance.md's benchmark
# table regenerated from them (between <!-- bench-table:begin/end -->).
#
#   tools/bench/run.sh [--repetitions N] [--suite] [--no-readme]
#                      [-- extra rpma_bench flags, e.g. --benchmark_filter=X]
#
#   --repetitions N  run every benchmark N times (default 1); the table shows
#                    the median and the spread (min-max) of each ratio
#   --suite          also time `bazel test //... --nocache_test_results`
#                    warm (built first, then timed; minutes on a busy box)
#   --no-readme      print the table, leave docs/performance.md alone
#
# Needs python3 and, for the start-up figure, hyperfine (apt-get install
# hyperfine); without it that row is left out. Outputs stay in
# $BENCH_OUT (default /tmp/rpma_bench.<pid>).
set -euo pipefail
cd "$(dirname "$0")/../.."

reps=1 suite=0 readme=1 extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --repetitions) reps="$2"; shift 2 ;;
    --suite) suite=1; shift ;;
    --no-readme) readme=0; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--repetitions N] [--suite] [--no-readme] [-- rpma_bench flags]" >&2; exit 2 ;;
  esac
done
out="${BENCH_OUT:-/tmp/rpma_bench.$$}"
mkdir -p "$out"

bazel build -c opt //tools/bench:rpma_bench //tools:scenario >"$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log" >&2; exit 1; }
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"

# rpma_bench: data path figures, their baselines (model, memcpy, bare calls,
# one pair) and ratios.
args=(--benchmark_out="$out/bench.json" --benchmark_out_format=json)
[ "$reps" -gt 1 ] && args+=(--benchmark_repetitions="$reps")
"$bin/tools/bench/rpma_bench" "${args[@]}" "${extra[@]}" | tee "$out/bench.txt"

report=(python3 tools/bench/report.py "$out/bench.json")

# The scenario runner's start-up and a whole small scenario, against
# /bin/true, wall time (a process start cannot be timed in thread CPU time).
if command -v hyperfine >/dev/null; then
  hyperfine -N --warmup 20 --runs 300 --export-json "$out/startup.json" \
    /bin/true "$bin/tools/scenario --help" \
    "$bin/tools/scenario $PWD/tools/scenarios/happy_path.yaml --quiet" >"$out/startup.txt" 2>&1 ||
    { cat "$out/startup.txt" >&2; exit 1; }
  report+=(--startup "$out/startup.json")
else
  echo "run.sh: no hyperfine; the start-up row is left out" >&2
fi

# The default test suite, warm: built first, then timed with cached results
# ignored; the slowest target is named.
if [ "$suite" -eq 1 ]; then
  bazel build //... >"$out/suite-build.log" 2>&1
  start=$(date +%s.%N)
  bazel test //... --nocache_test_results >"$out/suite.log" 2>&1 || true
  end=$(date +%s.%N)
  slowest=$(grep -E 'PASSED|FAILED' "$out/suite.log" | grep -oE '//[^ ]+ .* in [0-9.]+s' |
    sed -E 's#^(//[^ ]+) .* in ([0-9.]+)s#\2 \1#' | sort -rn | sed -n 1p)  # not head: under pipefail its SIGPIPE to sort ends the script
  {
    echo "suite_seconds=$(python3 -c "print($end - $start)")"
    [ -n "$slowest" ] && echo "slowest=${slowest#* } ${slowest%% *}"
  } >"$out/suite.txt"
  grep -E 'PASSED|FAILED|TIMEOUT' "$out/suite.log" || true
  report+=(--suite "$out/suite.txt")
fi

[ "$readme" -eq 1 ] && report+=(--readme docs/performance.md --chart docs/images/bench_ratios.svg)
echo
"${report[@]}"
echo "outputs in $out" >&2
