#!/usr/bin/env bash
# soak_report_test.sh: the soak's drift bounds (soak_report.py) on made-up
# samples: a flat run holds every bound; a leak, an fd that is never
# closed, a slowdown each break the one bound that covers it; too short a
# run is refused.
#
#   soak_report_test.sh SOAK_REPORT_PY
set -uo pipefail
source tools/testing/sh_cases.sh
sh_cases_suite SoakReport

report=$(realpath "$1")
work=${TEST_TMPDIR:-$(mktemp -d)}/soak_report
rm -rf "$work" && mkdir -p "$work"

# samples FILE SECONDS RSS_GROWTH_KB_PER_S FD_EVERY_S SLOWDOWN_AFTER_S
samples() {
  awk -v n="$2" -v grow="$3" -v fdev="$4" -v slow="$5" 'BEGIN {
    print "t,server_rss_kb,server_fds,server_threads,client_rss_kb,client_fds,client_threads,client_ops,server_ops"
    ops = 0
    for (t = 1; t <= n; ++t) {
      wobble = (t % 7) * 40            # allocator noise, no trend
      rate = (slow > 0 && t > slow) ? 800 : 1000
      ops += rate + (t % 3) * 10
      extra_fd = fdev > 0 ? int(t / fdev) : 0
      printf "%d,%d,%d,3,%d,%d,3,%d,%d\n", t, 20000 + wobble, 12 + t % 2,
        30000 + wobble + grow * t, 14 + t % 3 + extra_fd, ops, ops
    }
  }' >"$1"
}

# verdict FILE: the report's lines, and its exit status
verdict() { python3 "$report" "$1" --svg "$work/plot.svg" --summary "$work/summary.md"; }

flat_holds() {
  samples "$work/flat.csv" 600 0 0 0
  verdict "$work/flat.csv" && grep -q '<polyline' "$work/plot.svg" &&
    grep -q '^| MemoryFlat | held' "$work/summary.md"
}
leak_breaks_memory() {
  samples "$work/leak.csv" 600 3 0 0   # 3 KiB a second: 1.7 MiB in 10 min
  local out
  out=$(verdict "$work/leak.csv")
  [[ $? == 1 ]] && grep -q '^MemoryFlat broken' <<<"$out" && grep -q '^FdsFlat held' <<<"$out"
}
fd_leak_breaks_fds() {
  samples "$work/fds.csv" 600 0 100 0  # one fd more every 100 s
  local out
  out=$(verdict "$work/fds.csv")
  [[ $? == 1 ]] && grep -q '^FdsFlat broken' <<<"$out" && grep -q '^MemoryFlat held' <<<"$out"
}
slowdown_breaks_throughput() {
  samples "$work/slow.csv" 600 0 0 300  # 20 % slower from minute 5
  local out
  out=$(verdict "$work/slow.csv")
  [[ $? == 1 ]] && grep -q '^ThroughputSteady broken' <<<"$out"
}
short_run_refused() {
  samples "$work/short.csv" 60 0 0 0
  verdict "$work/short.csv"
  [[ $? == 2 ]]
}
check AFlatRunHoldsEveryBound flat_holds
check ALeakBreaksMemoryFlat leak_breaks_memory
check AnFdNeverClosedBreaksFdsFlat fd_leak_breaks_fds
check ASlowdownBreaksThroughputSteady slowdown_breaks_throughput
check ARunShorterThanTwoMinutesIsRefused short_run_refused
finish
