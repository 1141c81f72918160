# sh_cases.sh: test cases for shell tests, sourced by an sh_test. Each case
# is one <testcase> of the XML Bazel keeps ($XML_OUTPUT_FILE), so that
# .ci/count_cases.sh counts it as gtest's cases are counted.
#
#   source tools/testing/sh_cases.sh
#   sh_cases_suite Dropin
#   check NAME COMMAND...     # a case: passes when COMMAND exits 0
#   skip NAME WHY             # a case that cannot run here (counted skipped)
#   sh_cases_any_failed       # true once a case has failed
#   finish                    # writes the XML; exits 1 if any case failed

_sh_cases=()  # "name|state|message": state 1 pass, 0 fail, s skipped
_sh_suite=Shell

sh_cases_suite() { _sh_suite=$1; }

check() {
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then
    _sh_cases+=("$name|1|")
    echo "PASS $name"
  else
    _sh_cases+=("$name|0|$out")
    echo "FAIL $name"
    echo "$out" | sed 's/^/    /' | tail -n 30
  fi
}

skip() {
  _sh_cases+=("$1|s|$2")
  echo "SKIP $1: $2"
}

sh_cases_any_failed() {
  local c
  for c in "${_sh_cases[@]}"; do [[ $c == *"|0|"* ]] && return 0; done
  return 1
}

_sh_escape() { sed 's/&/\&amp;/g; s/</\&lt;/g; s/>/\&gt;/g; s/"/\&quot;/g'; }

finish() {
  local n=${#_sh_cases[@]} f=0 s=0 c name state msg
  for c in "${_sh_cases[@]}"; do
    state=${c#*|}
    state=${state%%|*}
    [[ $state == 1 ]] || { [[ $state == s ]] && s=$((s + 1)); } || f=$((f + 1))
  done
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo "<testsuites tests=\"$n\" failures=\"$f\" errors=\"0\">"
    echo "<testsuite name=\"$_sh_suite\" tests=\"$n\" failures=\"$f\" errors=\"0\" skipped=\"$s\">"
    for c in "${_sh_cases[@]}"; do
      name=${c%%|*}
      state=${c#*|}
      msg=${state#*|}
      state=${state%%|*}
      msg=$(tail -n 20 <<<"$msg" | _sh_escape)
      case $state in
        1) echo "  <testcase name=\"$name\" classname=\"$_sh_suite\"/>" ;;
        s) echo "  <testcase name=\"$name\" classname=\"$_sh_suite\"><skipped message=\"$msg\"/></testcase>" ;;
        *) echo "  <testcase name=\"$name\" classname=\"$_sh_suite\"><failure message=\"failed\">$msg</failure></testcase>" ;;
      esac
    done
    echo "</testsuite></testsuites>"
  } >"${XML_OUTPUT_FILE:-${TEST_TMPDIR:-/tmp}/test.xml}"
  echo "$_sh_suite: $((n - f - s)) passed, $f failed, $s skipped"
  [[ $f == 0 ]]
}
