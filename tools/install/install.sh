#!/usr/bin/env bash
# tools/install/install.sh PREFIX [bazel args...]: builds the harness's
# libraries (bazel build -c opt) and installs them for CMake and Make
# projects (what `tools/harness install PREFIX` runs):
#
#   PREFIX/include/rpma-harness/   librpma.h, rpma_harness_crash.h, rpma_harness_version.h, rpma/, check/, nic/, faults/, mock/, crash/, verbs_backend/
#   PREFIX/lib/librpma_harness.a           the librpma C API, FakeNic,
#                                          FaultInjector, ScopedBackend,
#                                          the rdma-core backend
#   PREFIX/lib/librpma_harness_testing.a   gMock matchers (WR/WC and rpma),
#                                          ConnectedPair, MockVerbsBackend,
#                                          the crash checker (crash/)
#   PREFIX/lib/librpma_harness_gtest_main.a  main() + the flight recorder
#   PREFIX/lib/librpma.so.0, librpma.so    the drop-in shared librpma, when
#   PREFIX/lib/pkgconfig/librpma.pc        this tree has rpma/dropin (its
#   PREFIX/include/librpma.h               //rpma/dropin:prefix tree)
#   PREFIX/lib/fake-verbs/libibverbs.so.1, librdmacm.so.1  the drop-in
#                                          verbs and rdma_cm (verbs programs
#                                          on the fake NIC)
#   PREFIX/lib/pkgconfig/rpma-harness.pc, rpma-harness-testing.pc,
#                        rpma-harness-gtest-main.pc
#   PREFIX/lib/cmake/rpma_harness/rpma_harnessConfig.cmake, rpma_harnessConfigVersion.cmake
#   PREFIX/bin/rpma-harness-scenario       the scenario runner
#   PREFIX/bin/rpma-harness-launcher       server and clients as processes on
#                                          one fake fabric (tools/multiprocess)
#   PREFIX/bin/rpma-harness-crash-check    crash consistency of a journalled
#                                          run (tools/crash_check)
#
# Run from anywhere; PREFIX is made if missing. Files are copied, not linked
# to Bazel's output tree, so the install outlives `bazel clean`.
set -euo pipefail

if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  echo "usage: tools/harness install PREFIX [bazel build args...]" >&2
  exit 2
fi
prefix="$1"
shift
mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
cd "$(dirname "$0")/../.."
here="$PWD/tools/install"

# What goes into each archive: Bazel's own .a / .lo of each library (all
# linkstatic, see copts.bzl).
core=(//rpma:rpma //rpma:default_backend //rpma:persistence //rpma:fake_backend //rpma:mr_descriptor //check:checking_backend //nic:fake_nic //nic:fabric_sequence //faults:fault_injection //faults:fault_file
      //verbs_backend:rdma_core_backend //verbs_backend:unavailable_backend)
testing=(//mock:matchers //mock:rpma_matchers //mock:connected_pair
         //mock:mock_verbs_backend //crash:crash_check //crash:persistence_model)
gtest_main=(//mock:gtest_main //mock:flight_recorder)
targets=("${core[@]}" "${testing[@]}" "${gtest_main[@]}" //tools:scenario
         //tools/multiprocess:multiprocess //tools/crash_check //:version_h)
dropin=()
if [ -f rpma/dropin/BUILD ]; then
  dropin=(//rpma/dropin:prefix)
fi
verbs_dropin=()
if [ -f verbs_dropin/BUILD ]; then
  verbs_dropin=(//verbs_dropin:lib)
fi

bazel build -c opt "$@" "${targets[@]}" "${dropin[@]}" "${verbs_dropin[@]}"
bin="$(bazel info -c opt "$@" bazel-bin 2>/dev/null)"

# The archive Bazel made for a label (lib<name>.a, or .lo when alwayslink).
archive_of() {
  local label="$1" package name
  package="${label#//}"
  package="${package%%:*}"
  name="${label##*:}"
  for ext in a lo; do
    if [ -f "$bin/$package/lib$name.$ext" ]; then
      echo "$bin/$package/lib$name.$ext"
      return
    fi
  done
  echo "install: no archive for $label under $bin" >&2
  exit 1
}

# merge OUT LABEL...: one static archive with every member of theirs.
merge() {
  local out="$1" script label
  shift
  script="CREATE $out"$'\n'
  for label in "$@"; do
    script+="ADDLIB $(archive_of "$label")"$'\n'
  done
  script+=$'SAVE\nEND\n'
  rm -f "$out"
  ar -M <<<"$script"
  ranlib "$out"
}

inc="$prefix/include/rpma-harness"
lib="$prefix/lib"
mkdir -p "$inc/rpma" "$inc/mock" "$inc/nic" "$inc/faults" "$inc/check" "$inc/crash" "$inc/verbs_backend" "$lib/pkgconfig" \
  "$lib/cmake/rpma_harness" "$prefix/bin"

# Headers: <librpma.h> at the top (as -I ${includedir}/rpma-harness), the
# C++ ones under the paths they include each other by.
install -m 644 rpma/librpma.h "$inc/librpma.h"
install -m 644 "$bin/rpma_harness_version.h" "$inc/rpma_harness_version.h"
install -m 644 rpma/harness.h rpma/librpma_check.h rpma/persistence.h rpma/rpma_harness_crash.h "$inc/rpma/"
# <rpma_harness_crash.h> as C programs include it (beside <librpma.h>).
install -m 644 rpma/rpma_harness_crash.h "$inc/rpma_harness_crash.h"
install -m 644 crash/crash_check.h crash/persistence_model.h crash/expect_crash_consistent.h "$inc/crash/"
install -m 644 nic/fake_nic.h nic/fake_nic_lifecycle.h nic/nic_tap.h "$inc/nic/"
install -m 644 faults/fault_injection.h "$inc/faults/"
install -m 644 mock/matchers.h mock/rpma_matchers.h mock/connected_pair.h \
  mock/flight_recorder.h mock/mock_verbs_backend.h "$inc/mock/"
install -m 644 check/checking_backend.h "$inc/check/"
install -m 644 verbs_backend/verbs_backend.h verbs_backend/forwarding_backend.h verbs_backend/rdma_core_backend.h \
  "$inc/verbs_backend/"

merge "$lib/librpma_harness.a" "${core[@]}"
merge "$lib/librpma_harness_testing.a" "${testing[@]}"
merge "$lib/librpma_harness_gtest_main.a" "${gtest_main[@]}"
install -m 755 "$bin/tools/scenario" "$prefix/bin/rpma-harness-scenario"
install -m 755 "$bin/tools/multiprocess/multiprocess" "$prefix/bin/rpma-harness-launcher"
install -m 755 "$bin/tools/crash_check/crash_check" "$prefix/bin/rpma-harness-crash-check"

# The drop-in: its own install-shaped tree (a relocatable librpma.pc).
with_dropin=0
if [ ${#dropin[@]} -gt 0 ]; then
  tree="$bin/rpma/dropin/prefix"
  install -m 755 "$tree/lib/librpma.so.0" "$lib/librpma.so.0"
  ln -sf librpma.so.0 "$lib/librpma.so"
  install -m 644 "$tree/lib/pkgconfig/librpma.pc" "$lib/pkgconfig/librpma.pc"
  install -m 644 "$tree/include/librpma.h" "$prefix/include/librpma.h"
  with_dropin=1
fi

# The drop-in libibverbs: a directory of its own, put first on
# LD_LIBRARY_PATH only by who wants verbs programs on the fake.
if [ ${#verbs_dropin[@]} -gt 0 ]; then
  mkdir -p "$lib/fake-verbs"
  install -m 755 "$bin/verbs_dropin/lib/libibverbs.so.1" "$lib/fake-verbs/libibverbs.so.1"
  install -m 755 "$bin/verbs_dropin/lib/librdmacm.so.1" "$lib/fake-verbs/librdmacm.so.1"
fi

# The harness version, as tools/harness --version reads it from version.bzl.
version="$(tools/harness --version)"
version="${version#rpma-harness }"

subst() {
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$1" >"$2"
}
subst "$here/rpma-harness.pc.in" "$lib/pkgconfig/rpma-harness.pc"
subst "$here/rpma-harness-testing.pc.in" "$lib/pkgconfig/rpma-harness-testing.pc"
subst "$here/rpma-harness-gtest-main.pc.in" "$lib/pkgconfig/rpma-harness-gtest-main.pc"
install -m 644 "$here/rpma_harnessConfig.cmake" "$lib/cmake/rpma_harness/"
subst "$here/rpma_harnessConfigVersion.cmake.in" "$lib/cmake/rpma_harness/rpma_harnessConfigVersion.cmake"

echo "installed rpma-harness $version in $prefix$([ "$with_dropin" -eq 1 ] && echo " (with the drop-in librpma.so.0)")"
echo "  pkg-config: PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --cflags --libs rpma-harness"
echo "  CMake:      -DCMAKE_PREFIX_PATH=$prefix, find_package(rpma_harness $version REQUIRED)"
