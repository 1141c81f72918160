#!/usr/bin/env bash
# tools/softroce_vm/ci.sh: the real-NIC part of CI. Builds the tests that run
# on both backends, runs them on rxe in the soft-RoCE VM with the rdma-core
# backend, and checks rxe's completion streams against the recording the
# fake NIC's rxe personality is tested against (tests/testdata/rxe_streams.txt):
# the host's conformance_test compares the fake with that recording, this
# compares live rxe with it, so together they compare the fake with rxe.
#
# It runs the shipped scenarios (tools/scenarios/) on rxe with the rdma-core
# backend and the same expectations as on the fake
# (scenarios_on_rxe_test; those needing fake-only faults are skipped, each
# with its reason on a "SCENARIO SKIP" line).
#
# It also runs every example pair (examples/, listed in examples/pairs.bzl)
# as a server process and client processes on rxe, and two of them again
# built with plain gcc against Debian's librpma-dev but loading the drop-in
# librpma.so.0 (rpma/dropin, found through a RUNPATH); each pair is one case.
#
# Prints "softroce vm: N passed, N failed, N skipped" and exits non-zero on
# any failure or difference. RECORD=1 rewrites the recording instead.
set -uo pipefail
cd "$(dirname "$0")/../.."

targets=(//tests:conformance_test //tests:write_imm_flow_test
         //tools/softroce_vm:rxe_smoke_test //tests:random_differential_test
         //tools/softroce_vm:peer_death_probe_test
         //tools/softroce_vm:scenarios_on_rxe_test
         //tools/softroce_vm:static_verbs_probe_test)
out=$(mktemp -d /tmp/softroce_vm_ci.XXXXXX)
# The example pairs' programs (:*_server, :*_client) and their list.
pair_targets=(//examples:pairs.txt //rpma/dropin
  $(bazel query 'kind("cc_binary", //examples:all)' 2>/dev/null))
# Plain programs (no gtest XML): a case each, passed when it exits 0. The
# verbs program the drop-in libibverbs test runs on the fake, here on rxe.
plain_targets=(//verbs_dropin:loopback_write_imm //verbs_dropin:hostile_verbs
  //verbs_dropin:uc_verbs //verbs_dropin:ex_verbs //verbs_dropin:async_events
  //verbs_dropin:cm_verbs //verbs_dropin:psn_verbs
  //tests:api_abuse
  //rpma/dropin:debian_built/api_abuse)
if ! bazel build "${targets[@]}" "${pair_targets[@]}" "${plain_targets[@]}" >"$out/build.log" 2>&1; then
  tail -20 "$out/build.log" >&2
  echo "softroce vm: 0 passed, 1 failed, 0 skipped (build failed)"
  exit 1
fi
bin=$(bazel info bazel-bin 2>/dev/null)
binaries=()
for t in "${targets[@]}"; do
  path="${t#//}"
  binaries+=("$bin/${path/://}")
done
plain=()
for t in "${plain_targets[@]}"; do
  path="${t#//}"
  if [[ $t == //rpma/dropin:debian_built/api_abuse ]]; then
    # Debian's librpma under abuse: the same program name as ours, so a
    # copy with its own name (run.sh keys a program's output by its name).
    cp "$bin/${path/://}" "$out/api_abuse_librpma12"
    plain+=("$out/api_abuse_librpma12")
  else
    plain+=("$bin/${path/://}")
  fi
done

# pairs.txt lines are "<dir> <port> <nclients> <args>"; run.sh wants the two
# binaries after the client count.
: >"$out/pairs"
while read -r dir port n rest; do
  [ -n "$dir" ] || continue
  t=${dir//-/_}
  echo "$dir $port $n $bin/examples/${t}_server $bin/examples/${t}_client $rest" >>"$out/pairs"
done <"$bin/examples/pairs.txt"
# 13-crash-consistency's other nine variants: without a crash each must work
# on a real NIC too (the bugs only show when power fails).
port=7420
for v in signal-before-flush commit-with-data commit-after-data wrong-range \
  right-range visibility persistent torn-record atomic-record; do
  port=$((port + 1))
  echo "13-crash-consistency-$v $port 1 $bin/examples/13_crash_consistency_server $bin/examples/13_crash_consistency_client $v -- $v" >>"$out/pairs"
done

# The drop-in on a real NIC: two pairs compiled and linked against Debian's
# librpma-dev (its header, -lrpma), with a RUNPATH to the drop-in's directory
# so the loader takes ours in the guest as LD_LIBRARY_PATH would here.
dropin_lib=$(realpath "$bin/rpma/dropin/prefix/lib")
for dir in 10-write-with-imm 12-srq-ping-pong; do
  d=$out/dropin/$dir
  mkdir -p "$d"
  for side in server client; do
    if ! gcc -std=c11 -D_GNU_SOURCE -Iexamples/common -Iexamples/$dir -o "$d/$side" \
      "examples/$dir/$side.c" examples/common/example_common.c -lrpma -libverbs \
      -Wl,-rpath,"$dropin_lib" >>"$out/build.log" 2>&1; then
      tail -20 "$out/build.log" >&2
      echo "softroce vm: 0 passed, 1 failed, 0 skipped (building $dir against Debian's librpma-dev failed)"
      exit 1
    fi
  done
  grep "^$dir " "$bin/examples/pairs.txt" |
    while read -r _ port n rest; do
      echo "dropin-$dir $((port + 100)) $n $d/server $d/client $rest"
    done >>"$out/pairs"
done

status=0
# random_differential_test: each flavour's random programs on rxe and on the
# fake in the VM, in five processes at once (RPMA_HARNESS_VM_JOBS=5: a
# program spends most of its time waiting out quiet windows on rxe), except
# the mtu programs (each sets the netdev's MTU) and the rnr programs (a race
# of rxe's two timers that load can tip), which run in one. FULL=1 (and
# RECORD=1) runs every recorded program: 200 narrow ones (and 23
# regressions), 100 wide, 200 duplex, 100 retry, 50 disconnect, 50 destroy,
# 50 rnr, 100 mtu, 100 shared, 100 srq and 100 cq, 1173 in 458 s of the
# VM's time with five processes, every stream equal to its recording (7 Dec
# 2026; 560 s with three). By default (what CI runs) 558 of them in ~200
# s, each flavour's first N, N by its cost per program (five processes):
# 150 narrow (0.10 s) and the 23 regressions, 80 wide (0.14 s), 80 duplex
# (0.18 s), 40 retry (0.43 s), 25 disconnect and 25 destroy (0.7 s), 15
# rnr (1.4 s, one process), 30 mtu (0.58 s, one process), 40 shared and 40
# srq (0.24 s), 10 cq (the first 15 took 61 s: a cq drain waits 250 ms
# before its first poll, and the first cq programs are the long ones; 15
# until psn_verbs joined the stage). 683 programs (all
# narrow, 100 duplex, 50 retry, 60 shared, 60 srq) took 238 s, which with
# hostile_verbs' new cases put the VM stage 30 s past its share. The host's
# random_differential_test holds the fake to every recorded program on every
# run, and this part re-asks live rxe, whose kernel is pinned, for the
# recording it already gave; a seed's lines compare whole either way.
full=0
{ [ "${FULL:-0}" = 1 ] || [ "${RECORD:-0}" = 1 ]; } && full=1
# PREFIX:ALL:CI -- each flavour's program count, all and in CI
# (RPMA_HARNESS_<PREFIX>_PROGRAMS).
flavours=(RANDOM:200:150 WIDE:100:80 DUPLEX:200:80 RETRY:100:40
  DISCONNECT:50:25 DESTROY:50:25 RNR:50:15 MTU:100:30 SHARED:100:40
  SRQ:100:40 CQ:100:10)
counts=()
declare -A want_seeds
for f in "${flavours[@]}"; do
  IFS=: read -r prefix all ci <<<"$f"
  n=$ci
  [ "$full" = 1 ] && n=$all
  counts+=(--env "RPMA_HARNESS_${prefix}_PROGRAMS=$n")
  want_seeds[$prefix]=$n
done
run_vm() {
  tools/softroce_vm/run.sh --out "$out/vm" --env RPMA_HARNESS_PRINT_STREAMS=1 \
    --env RPMA_HARNESS_VM_JOBS=5 \
    --timeout 1300 --binary-timeout 950 "${counts[@]}" \
    --pairs "$out/pairs" "${binaries[@]}" "${plain[@]}" >"$out/run.log" 2>&1
}
run_vm || status=$?
# A run that ended before qemu started (no console) tested nothing: CI once
# saw run.sh end at once with an empty log. Said, and tried once more.
if [ ! -f "$out/vm/console.log" ]; then
  echo "softroce vm: run.sh ended (exit $status) before the VM booted; its log:" >&2
  tail -20 "$out/run.log" >&2
  echo "softroce vm: trying once more" >&2
  status=0
  run_vm || status=$?
fi
tr -d '\r' <"$out/vm/console.log" | grep -a "^random differential" >&2
# The shipped scenarios on rxe: which ran, and why the others were skipped.
tr -d '\r' <"$out/vm/console.log" | grep -a -E "^SCENARIO (PASS|FAIL|SKIP) " >&2
grep -E "^softroce_vm: " "$out/run.log" >&2

. .ci/count_cases.sh
xmls=()
for b in "${binaries[@]}"; do xmls+=("$out/vm/$(basename "$b").xml"); done
xmls+=("$out/vm/example_pairs.xml")
read -r passed failed skipped < <(count_xml_cases "${xmls[@]}")
for b in "${plain[@]}"; do
  name=$(basename "$b")
  if grep -aq "^=====EXIT $name 0=====" "$out/vm/results.log"; then
    passed=$((passed + 1))
  else
    echo "softroce vm: $name failed on rxe:" >&2
    tr -d '\r' <"$out/vm/console.log" | grep -a "^$name:" >&2
    failed=$((failed + 1))
  fi
done
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1

# Plain programs whose rxe output is recorded, a case each: live rxe must
# print the recording again (the host's tests hold the fake to the same
# files). NAME:FILE:KEEP -- KEEP selects the lines that are the program's
# answer (kernel messages never are); a recording's "#" lines are comments.
#  - uc_verbs: UC QPs as a verbs program meets them (dropin_verbs_test);
#  - hostile_verbs: the verbs API misused, ibv_modify_qp's attribute
#    checks at each transition (dropin_verbs_test);
#  - cm_verbs: librdmacm misused and its events' parameters
#    (dropin_verbs_test);
#  - ex_verbs: the extended verbs, ibv_wr_* and ibv_start_poll
#    (dropin_verbs_test);
#  - async_events: ibv_get_async_event, CQ overrun, SRQ limit
#    (dropin_verbs_test);
#  - psn_verbs: two RC QPs whose PSNs disagree (dropin_verbs_test);
#  - api_abuse, api_abuse_librpma12: the librpma API under abuse
#    (tests/api_abuse.c), ours on the rdma-core backend and Debian's
#    librpma 1.2 (api_abuse_test, dropin_verbs_test).
for rec in 'uc_verbs:verbs_dropin/testdata/uc_verbs.rxe.txt:' \
  'hostile_verbs:verbs_dropin/testdata/hostile_verbs.rxe.txt:' \
  'cm_verbs:verbs_dropin/testdata/cm_verbs.rxe.txt:' \
  'ex_verbs:verbs_dropin/testdata/ex_verbs.rxe.txt:' \
  'async_events:verbs_dropin/testdata/async_events.rxe.txt:' \
  'psn_verbs:verbs_dropin/testdata/psn_verbs.rxe.txt:' \
  'api_abuse:tests/testdata/api_abuse.rxe.txt:^abuse ' \
  'api_abuse_librpma12:tests/testdata/api_abuse.librpma12.rxe.txt:^abuse '; do
  IFS=: read -r name file keep <<<"$rec"
  tr -d '\r' <"$out/vm/console.log" |
    awk -v n="$name" '$0 ~ ("running " n "$") {f=1; next} $0 ~ (n " exited") {f=0} f' |
    grep -av '^\[ *[0-9]' | grep -a "$keep" >"$out/$name.txt"
  if [ "${RECORD:-0}" = 1 ]; then
    { grep '^#' "$file"; cat "$out/$name.txt"; } >"$out/new.txt" && mv "$out/new.txt" "$file"
  elif diff <(grep -v '^#' "$file") "$out/$name.txt" >"$out/$name.diff"; then
    passed=$((passed + 1))
  else
    echo "softroce vm: $name on rxe no longer prints $file:" >&2
    cat "$out/$name.diff" >&2
    failed=$((failed + 1))
  fi
done

# The differential: live rxe against the recording.
recording=tests/testdata/rxe_streams.txt
grep -a '^STREAM ' "$out/vm/console.log" | tr -d '\r' >"$out/streams.txt"
if [ "${RECORD:-0}" = 1 ]; then
  { grep '^#' "$recording"; cat "$out/streams.txt"; } >"$out/new.txt"
  mv "$out/new.txt" "$recording"
  echo "softroce vm: recorded $(wc -l <"$out/streams.txt") stream lines into $recording" >&2
elif ! diff <(grep -v '^#' "$recording") "$out/streams.txt" >"$out/streams.diff"; then
  echo "softroce vm: rxe's completion streams differ from $recording:" >&2
  cat "$out/streams.diff" >&2
  failed=$((failed + 1))
fi
# The random programs' rxe streams (RANDOM: the narrow programs; WIDE: the
# wide ones, SENDs, READs, atomics and receives with buffers; DUPLEX: both
# directions, several SGEs, local protection faults; RETRY: the duplex ops
# without their one-way rule, short ACK timeouts, RETRY_EXC_ERR;
# DISCONNECT: retry programs with rdma_disconnect from either side at any
# point, and the CM events each side gets; DESTROY: disconnect programs
# that destroy either QP at any point, with traffic towards it; RNR: retry
# programs whose WRs wait out RNR NAKs while the retransmit timer runs;
# MTU: duplex programs at path MTUs of 256 to 4096 bytes, set through rxe's
# netdev, their sizes a byte either side of packet boundaries; SHARED:
# duplex programs on two or three QP pairs sharing each side's CQ, PD and
# MRs; SRQ: shared programs whose server QPs take receives from one SRQ;
# CQ: retry programs whose CQs hold 1, 3 or 7 completions):
# the host's
# random_differential_test holds the fake to them (in the VM it compares
# rxe with the fake directly). PREFIX FILE: renewed with RECORD=1, else
# live rxe must print it again.
for rec in RANDOM:tests/testdata/rxe_random_streams.txt \
  WIDE:tests/testdata/rxe_random_wide_streams.txt \
  DUPLEX:tests/testdata/rxe_random_duplex_streams.txt \
  RETRY:tests/testdata/rxe_random_retry_streams.txt \
  DISCONNECT:tests/testdata/rxe_random_disconnect_streams.txt \
  DESTROY:tests/testdata/rxe_random_destroy_streams.txt \
  RNR:tests/testdata/rxe_random_rnr_streams.txt \
  MTU:tests/testdata/rxe_random_mtu_streams.txt \
  SHARED:tests/testdata/rxe_random_shared_streams.txt \
  SRQ:tests/testdata/rxe_random_srq_streams.txt \
  CQ:tests/testdata/rxe_random_cq_streams.txt; do
  IFS=: read -r prefix recording <<<"$rec"
  grep -a "^$prefix " "$out/vm/console.log" | tr -d '\r' >"$out/$prefix.txt"
  # The seeds rxe ran (their first line order), and the recording's lines
  # of those seeds: all of it after a full run.
  ran=$(awk '!seen[$2]++ {n++} END {print n + 0}' "$out/$prefix.txt")
  grep -v '^#' "$recording" >"$out/$prefix.recorded"
  if [ "$full" = 0 ]; then
    awk 'NR == FNR {ran[$2] = 1; next} ($2 in ran)' "$out/$prefix.txt" \
      "$out/$prefix.recorded" >"$out/$prefix.subset" &&
      mv "$out/$prefix.subset" "$out/$prefix.recorded"
  fi
  if [ "${RECORD:-0}" = 1 ]; then
    { grep '^#' "$recording"; cat "$out/$prefix.txt"; } >"$out/new.txt"
    mv "$out/new.txt" "$recording"
  elif [ "$ran" -lt "${want_seeds[$prefix]}" ]; then
    echo "softroce vm: rxe ran $ran $prefix programs, wanted ${want_seeds[$prefix]} or more" >&2
    failed=$((failed + 1))
  elif ! diff "$out/$prefix.recorded" "$out/$prefix.txt" >"$out/$prefix.diff"; then
    echo "softroce vm: rxe's $prefix program streams differ from $recording:" >&2
    head -40 "$out/$prefix.diff" >&2
    failed=$((failed + 1))
  fi
done
echo "softroce vm: ${passed} passed, ${failed} failed, ${skipped} skipped ($out)"
[ "$failed" -eq 0 ]
