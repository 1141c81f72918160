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

_sh_cases=()  # "name|state|seconds|message": state 1 pass, 0 fail, s skipped
_sh_suite=Shell

sh_cases_suite() { _sh_suite=$1; }

# The wall time of a case, in seconds with milliseconds, from bash's
# EPOCHREALTIME (no process started to read the clock).
_sh_seconds_since() {
  local now=${EPOCHREALTIME/./} then=${1/./}
  local us=$((now - then))
  printf '%d.%03d' $((us / 1000000)) $((us % 1000000 / 1000))
}

check() {
  local name=$1 out start=$EPOCHREALTIME took
  shift
  if out=$("$@" 2>&1); then
    took=$(_sh_seconds_since "$start")
    _sh_cases+=("$name|1|$took|")
    echo "PASS $name ($took s)"
  else
    took=$(_sh_seconds_since "$start")
    _sh_cases+=("$name|0|$took|$out")
    echo "FAIL $name ($took s)"
    echo "$out" | sed 's/^/    /' | tail -n 30
  fi
}

skip() {
  _sh_cases+=("$1|s|0|$2")
  echo "SKIP $1: $2"
}

sh_cases_any_failed() {
  local c
  for c in "${_sh_cases[@]}"; do
    c=${c#*|}
    [[ ${c%%|*} == 0 ]] && return 0
  done
  return 1
}

_sh_escape() { sed 's/&/\&amp;/g; s/</\&lt;/g; s/>/\&gt;/g; s/"/\&quot;/g'; }

finish() {
  local n=${#_sh_cases[@]} f=0 s=0 c name state took msg
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
      took=${state#*|}
      msg=${took#*|}
      took=${took%%|*}
      state=${state%%|*}
      msg=$(tail -n 20 <<<"$msg" | _sh_escape)
      case $state in
        1) echo "  <testcase name=\"$name\" classname=\"$_sh_suite\" time=\"$took\"/>" ;;
        s) echo "  <testcase name=\"$name\" classname=\"$_sh_suite\" time=\"0\"><skipped message=\"$msg\"/></testcase>" ;;
        *) echo "  <testcase name=\"$name\" classname=\"$_sh_suite\" time=\"$took\"><failure message=\"failed\">$msg</failure></testcase>" ;;
      esac
    done
    echo "</testsuite></testsuites>"
  } >"${XML_OUTPUT_FILE:-${TEST_TMPDIR:-/tmp}/test.xml}"
  echo "$_sh_suite: $((n - f - s)) passed, $f failed, $s skipped"
  [[ $f == 0 ]]
}
