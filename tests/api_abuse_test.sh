#!/usr/bin/env bash
# api_abuse_test.sh: the harness's librpma under abuse (tests/api_abuse.c:
# every one of the 84 functions with NULLs, unknown values, edge sizes and
# calls in the wrong order), held to three references:
#   - librpma's man pages: every case the man pages answer gets that answer;
#   - what the same program printed on rxe with the rdma-core backend
#     (testdata/api_abuse.rxe.txt, recorded in the soft-RoCE VM), answer
#     for answer, completions and CM events included;
#   - what Debian's own librpma 1.2 printed on rxe
#     (testdata/api_abuse.librpma12.rxe.txt).
# A case may differ from a reference only where
# testdata/api_abuse.differences.txt lists it, with the reason; a listed
# case that no longer differs fails too, so the list stays true.
#
#   api_abuse_test.sh API_ABUSE LIBRPMA_H RXE_TXT LIBRPMA12_RXE_TXT DIFFERENCES COMPARE_PY
set -uo pipefail
source tools/testing/sh_cases.sh
sh_cases_suite ApiAbuse

program=$(realpath "$1")
header=$2
rxe=$3
librpma12=$4
differences=$5
compare_py=$6
work=${TEST_TMPDIR:-$(mktemp -d)}/api_abuse
rm -rf "$work" && mkdir -p "$work"

# The fake NIC as rxe: the recording is rxe's.
RPMA_HARNESS_PERSONALITY=rxe timeout 600 "$program" 127.0.0.1 7600 \
  >"$work/fake.txt" 2>"$work/fake.err"
echo $? >"$work/fake.rc"

# The case key of a line: everything before the answer.
answers() { grep -a '^abuse ' "$1" | tr -d '\r'; }

ran_to_the_end() {
  [[ $(cat "$work/fake.rc") == 0 ]] || { echo "exit $(cat "$work/fake.rc")"; tail -5 "$work/fake.err"; return 1; }
  grep -q '^abuse done$' "$work/fake.txt" || { echo "no 'abuse done' line"; return 1; }
  ! grep -a 'crashed by signal\|could not fork\|: exit [0-9]\|failed$' "$work/fake.txt"
}

# Every public function of librpma.h is called at least once.
every_function_is_called() {
  local fns called missing
  # A declaration's name starts its line, or follows "int " or
  # "const char *" (rpma_log_function is a type, not a function).
  fns=$(grep -oE '^(int |const char \*)?rpma_[a-z0-9_]+\(' "$header" |
    grep -oE 'rpma_[a-z0-9_]+' | sort -u)
  local n
  n=$(echo "$fns" | grep -c .)
  [[ $n == 84 ]] || { echo "librpma.h declares $n functions, expected 84:"; echo "$fns"; return 1; }
  called=$(answers "$work/fake.txt" | awk '{ print $3 }' | sort -u)
  missing=$(comm -23 <(echo "$fns") <(echo "$called"))
  [[ -z $missing ]] || { echo "never called:"; echo "$missing"; return 1; }
  echo "$n functions, $(answers "$work/fake.txt" | grep -c .) cases"
}

# Every case the man pages answer is answered so, except those listed as
# "man" in the differences file (the library's own answer differs from
# its man page; the harness follows the library there).
answers_as_the_man_pages_say() {
  local bad
  bad=$(grep -a 'man-page-says:' "$work/fake.txt" | sed 's/: [^:]*man-page-says.*//' |
    grep -vxF -f <(awk -F' [|] ' '$1 == "man" { print $2 }' "$differences"))
  [[ -z $bad ]] || { echo "answers the man pages do not give:"; echo "$bad"; return 1; }
}

compare() { python3 "$compare_py" "$@" "$differences"; }

check RunsToTheEndWithoutACrash ran_to_the_end
check EveryFunctionIsCalled every_function_is_called
check AnswersAsTheManPagesSay answers_as_the_man_pages_say
check AnswersAsOnRxe compare fake-vs-rxe "$work/fake.txt" "$rxe"
# The two recordings: the harness's librpma against Debian's, both on rxe.
check AnswersAsLibrpma12OnRxe compare ours-vs-librpma12 "$rxe" "$librpma12"
finish
