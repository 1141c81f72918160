#!/usr/bin/env bash
# rpma_api_coverage_test.sh: the rpma_api fuzz target calls every function
# librpma.h declares, so that none is left out of the fuzzing. The names come
# the way tests/api_abuse_test.sh's EveryFunctionIsCalled takes them; a call
# is a name followed by "(" in the target's code, outside comments and string
# literals (the target names calls in its Violation() messages too).
#
#   rpma_api_coverage_test.sh LIBRPMA_H RPMA_API_FUZZ_CC
set -uo pipefail
source tools/testing/sh_cases.sh
sh_cases_suite RpmaApiCoverage

header=$1
target=$2

# A declaration's name starts its line, or follows "int " or
# "const char *" (rpma_log_function is a type, not a function).
declared() {
  grep -oE '^(int |const char \*)?rpma_[a-z0-9_]+\(' "$header" |
    grep -oE 'rpma_[a-z0-9_]+' | sort -u
}

# The functions a C++ source calls: string literals, then // comments,
# removed first.
called_in() {
  sed -E 's/"([^"\\]|\\.)*"//g; s://.*$::' "$1" |
    grep -oE '\brpma_[a-z0-9_]+\(' | grep -oE 'rpma_[a-z0-9_]+' | sort -u
}

# The declared functions $1 does not call, one a line.
missing_in() { comm -23 <(declared) <(called_in "$1"); }

every_function_is_called() {
  local n missing
  n=$(declared | grep -c .)
  [[ $n == 84 ]] || { echo "librpma.h declares $n functions, expected 84:"; declared; return 1; }
  missing=$(missing_in "$target")
  [[ -z $missing ]] || { echo "rpma_api_fuzz.cc never calls:"; echo "$missing"; return 1; }
  echo "$n functions, all called"
}

# The check can fail: the target without its rpma_ep_get_fd calls, or with
# one left only in a comment and a string, misses exactly that function.
notices_a_missing_call() {
  local dir=${TEST_TMPDIR:-$(mktemp -d)} missing
  grep -v 'rpma_ep_get_fd(' "$target" >"$dir/without.cc"
  printf '%s\n' '// rpma_ep_get_fd(ep, &fd)' 'const char* s = "rpma_ep_get_fd(";' \
    >>"$dir/without.cc"
  missing=$(missing_in "$dir/without.cc")
  [[ $missing == rpma_ep_get_fd ]] || { echo "expected only rpma_ep_get_fd missing, got:"; echo "$missing"; return 1; }
}

check EveryFunctionIsCalled every_function_is_called
check NoticesAMissingCall notices_a_missing_call
finish
