#!/usr/bin/env bash
# room_order_test: the rooms of product code include each other one way
# only (docs/design.md, "Rooms"; issue 21):
#
#   verbs_backend  <-  nic  <-  faults, check  <-  rpma  <-  mock, verbs_dropin,
#                                                            crash
#
# A file of a room may include its own room and rooms to its left, never one
# to its right or beside it (faults and check are both wrappers over any
# backend: neither includes the other; mock and verbs_dropin, the drop-in
# libibverbs, are both front ends). Product code is every .h/.cc/.c of
# those folders except tests (*_test.*), fuzzers and benchmarks; tests,
# tools/ and examples/ may include anything. Each violation is printed as
# FILE:LINE: the include, and why.
#
# Arguments: the files to check (the rooms' :sources filegroups). First the
# checker is run on a small tree with one upward include, which it must
# reject, so that this test cannot pass by checking nothing.
set -uo pipefail

rank() {
  case "$1" in
    verbs_backend) echo 0 ;;
    nic) echo 1 ;;
    faults | check) echo 2 ;;
    rpma) echo 3 ;;
    mock | verbs_dropin | crash) echo 4 ;;
    *) echo "" ;;
  esac
}

# check FILE...: prints each violation; returns 1 if any.
check() {
  local f room r line n inc target t bad=0
  for f in "$@"; do
    case "$f" in
      *_test.* | *_fuzz.* | *_bench.*) continue ;;
    esac
    room=${f%%/*}
    r=$(rank "$room")
    [ -z "$r" ] && continue
    n=0
    while IFS= read -r line; do
      n=$((n + 1))
      [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]+\"([a-z_]+)/[^\"]+\" ]] || continue
      target=${BASH_REMATCH[1]}
      t=$(rank "$target")
      [ -z "$t" ] && continue
      [ "$target" = "$room" ] && continue
      if [ "$t" -ge "$r" ]; then
        echo "$f:$n: ${line#"${line%%[![:space:]]*}"} -- $room may not include $target"
        bad=1
      fi
    done <"$f"
  done
  return $bad
}

# The checker must catch an upward include.
probe=${TEST_TMPDIR:-$(mktemp -d)}/room_order_probe
mkdir -p "$probe/nic" "$probe/rpma"
printf '#include "rpma/librpma.h"\n' >"$probe/nic/upward.cc"
printf '#include "nic/fake_nic.h"\n' >"$probe/rpma/downward.cc"
if (cd "$probe" && check nic/upward.cc rpma/downward.cc >/dev/null); then
  echo "FAIL: the checker accepted nic/ including rpma/"
  exit 1
fi

files=()
for f in "$@"; do
  case "$f" in
    *.h | *.cc | *.c) files+=("$f") ;;
  esac
done
if [ "${#files[@]}" -lt 20 ]; then
  echo "FAIL: only ${#files[@]} source files given; the filegroups are wrong"
  exit 1
fi
if ! check "${files[@]}"; then
  echo "FAIL: includes against the room order"
  exit 1
fi
echo "PASS: ${#files[@]} files of verbs_backend, nic, faults, check, rpma, mock include each other one way"
