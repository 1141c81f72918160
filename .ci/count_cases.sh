# Sourced by .ci/run, .ci/shared_cache.sh and tools/softroce_vm/ci.sh.
#
# count_xml_cases XML...: counts the test cases in gtest XML files (as Bazel
# and the soft-RoCE VM runner keep them) and prints "passed failed skipped".
# Every <testsuite> element is summed: gtest writes one per suite, and Bazel's
# own stub for a non-gtest test (or a crashed one) has one for the target. A
# missing file, or one with no test case, counts as one failure.
count_xml_cases() {
  local passed=0 failed=0 skipped=0 xml tests fails disabled
  sum() {
    grep -o "<testsuite [^>]*>" "$xml" | grep -o " $1=\"[0-9]*\"" | grep -o '[0-9]*' |
      awk '{ s += $1 } END { print s + 0 }'
  }
  for xml in "$@"; do
    if [ ! -f "$xml" ]; then
      echo "ci: no test results in $xml" >&2
      failed=$((failed + 1))
      continue
    fi
    tests=$(sum tests)
    if [ "$tests" -eq 0 ]; then
      echo "ci: $xml has no test case" >&2
      failed=$((failed + 1))
      continue
    fi
    fails=$(( $(sum failures) + $(sum errors) ))
    disabled=$(( $(sum disabled) + $(sum skipped) ))
    failed=$((failed + fails))
    skipped=$((skipped + disabled))
    passed=$((passed + tests - fails - disabled))
  done
  echo "$passed $failed $skipped"
}

# count_cases TESTLOGS TARGET...: counts the test cases of the targets in
# Bazel's testlogs directory; prints "passed failed skipped".
count_cases() {
  local testlogs="$1" target path shards xmls=()
  shift
  for target in "$@"; do
    path="${target#//}"
    path="$testlogs/${path/://}"
    # A sharded test (shard_count) keeps one XML per shard; a test.xml beside
    # them is from an unsharded run before, when older.
    shards=("$path"/shard_*_of_*/test.xml)
    if [ -f "${shards[0]}" ] && { [ ! -f "$path/test.xml" ] || [ "${shards[0]}" -nt "$path/test.xml" ]; }; then
      xmls+=("${shards[@]}")
    else
      xmls+=("$path/test.xml")
    fi
  done
  count_xml_cases "${xmls[@]}"
}
