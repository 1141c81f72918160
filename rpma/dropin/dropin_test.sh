#!/usr/bin/env bash
# dropin_test.sh: the drop-in librpma.so.0 takes the place of Debian's
# librpma0 for programs built against Debian's librpma-dev, and those programs
# then run on the harness's fake NIC.
#
# The programs are built at Bazel build time by debian_build.sh (genrules in
# BUILD), the way a user builds them; this script checks how they were built
# (their build logs: gcc -H's include list) and runs them.
#
# Each check is one test case in $XML_OUTPUT_FILE (so .ci/run counts them);
# the script exits 1 if any fails. Needs Debian's librpma-dev and librpma0
# (tools/harness installs them), gcc, pkg-config, make and cmake.
#
#   dropin_test.sh PREFIX_LIB_SO SYMBOLS_TXT PAIRS_TXT BUILT_PROG_LOG
#
# BUILT_PROG_LOG: debian_built/prog.log; its directory holds every program
# debian_build.sh built and its log.
set -uo pipefail

ours_so=$(realpath "$1")
symbols_txt=$(realpath "$2")
pairs_txt=$(realpath "$3")
built=$(dirname "$4")
ours_lib=$(dirname "$ours_so")
ours_prefix=$(dirname "$ours_lib")
work=${TEST_TMPDIR:-$(mktemp -d)}/dropin
rm -rf "$work" && mkdir -p "$work"
deb_lib=/usr/lib/x86_64-linux-gnu/librpma.so.0
deb_hdr=/usr/include/librpma.h
# Under --config=asan / asan_ubsan the drop-in itself is instrumented; a
# program built without ASan then needs the runtime loaded first.
preload=""
if readelf -d "$ours_so" | grep -q 'NEEDED.*libasan'; then
  preload=$(gcc -print-file-name=libasan.so)
fi
if readelf -d "$ours_so" | grep -q 'NEEDED.*libtsan'; then
  preload=$(gcc -print-file-name=libtsan.so)
fi

source tools/testing/sh_cases.sh
sh_cases_suite Dropin

# built LOG: the build debian_build.sh ran succeeded (else its log says why).
built_ok() {
  [[ -f $1 ]] || { echo "$1 is missing"; return 1; }
  tail -n 1 "$1" | grep -q '^debian_build: ok$' && return 0
  echo "the build failed:"
  tail -n 30 "$1"
  return 1
}

need() {
  [[ -f $deb_lib && -f $deb_hdr && -f /usr/lib/x86_64-linux-gnu/librpma.so ]] ||
    { echo "Debian's librpma-dev / librpma0 are not installed (apt-get install librpma-dev librpma0)"; return 1; }
}
check DebianLibrpmaDevIsInstalled need

# --- the library's identity ----------------------------------------------------

soname_is_debians() {
  local ours deb
  ours=$(readelf -d "$ours_so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  deb=$(readelf -d "$deb_lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  echo "ours: $ours, Debian's: $deb"
  [[ $ours == librpma.so.0 && $ours == "$deb" ]]
}
check SonameIsLibrpmaSo0LikeDebians soname_is_debians

# The version definitions (readelf -V .gnu.version_d): the file's base entry
# and one node, the same name as Debian's.
verdefs() { readelf -V "$1" | sed -n '/version_d/,/version_r/p' | grep -o 'Name: [^ ]*' | grep -v 'Name: librpma.so' ; }
version_node_is_debians() {
  local ours deb
  ours=$(verdefs "$ours_so")
  deb=$(verdefs "$deb_lib")
  echo "ours: $ours; Debian's: $deb"
  [[ $ours == "Name: LIBRPMA_1.0" && $ours == "$deb" ]]
}
check VersionNodeIsLibrpma10LikeDebians version_node_is_debians

defined() { nm -D --defined-only --with-symbol-versions "$1" | awk '{ print $3 }' | sort; }
exports_exactly_debians_symbols() {
  defined "$ours_so" >"$work/ours.syms"
  defined "$deb_lib" >"$work/deb.syms"
  sed 's/$/@@LIBRPMA_1.0/' "$symbols_txt" | sort >"$work/list.syms"
  echo "LIBRPMA_1.0" >>"$work/list.syms" # the node itself (an ABS symbol)
  sort -o "$work/list.syms" "$work/list.syms"
  local ok=0
  diff "$work/deb.syms" "$work/list.syms" >/dev/null ||
    { echo "rpma/dropin/symbols.bzl is not Debian's list:"; diff "$work/deb.syms" "$work/list.syms"; ok=1; }
  if ! diff "$work/deb.syms" "$work/ours.syms" >"$work/syms.diff"; then
    echo "exports differ from Debian's librpma0 (< Debian only, > ours only):"
    cat "$work/syms.diff"
    ok=1
  fi
  echo "$(grep -c '^rpma_' "$work/ours.syms") of $(grep -c '^rpma_' "$work/deb.syms") rpma_* functions at @@LIBRPMA_1.0"
  return $ok
}
check ExportsExactlyDebiansSymbolsAtLibrpma10 exports_exactly_debians_symbols

no_cxx_symbols_exported() {
  # Nothing of the harness's C++ (mangled _Z names, our namespaces) leaks.
  local leaked
  leaked=$(nm -D --defined-only "$ours_so" | awk '{ print $3 }' | grep -v -E '^(rpma_|LIBRPMA_1\.0$)' || true)
  [[ -z $leaked ]] || { echo "exported besides librpma's: $leaked"; return 1; }
}
check ExportsNothingButLibrpma no_cxx_symbols_exported

# --- a program built against Debian's package -----------------------------------

build_against_debian() {
  # Plain gcc, Debian's header (the default include path) and library
  # (debian_build.sh prog: gcc -H -o prog prog.c -lrpma).
  built_ok "$built/prog.log" || return 1
  cp "$built/prog" "$work/prog"
  grep -q "^\. $deb_hdr\$" "$built/prog.log" || { echo "did not include $deb_hdr:"; grep librpma "$built/prog.log"; return 1; }
  readelf -d "$work/prog" | grep -q 'NEEDED.*\[librpma.so.0\]' || { echo "prog does not record librpma.so.0"; return 1; }
  nm -D "$work/prog" | grep -q 'rpma_peer_new@LIBRPMA_1.0' || { echo "prog's references are not versioned LIBRPMA_1.0"; nm -D "$work/prog" | grep rpma_; return 1; }
}
check GccDashLrpmaAgainstDebiansLibrpmaDev build_against_debian

debian_library_fails_here() {
  # The same binary on Debian's library: there is no RDMA device here.
  if ls /sys/class/infiniband/* >/dev/null 2>&1; then
    echo "this host has an RDMA device; not asserting Debian's library fails"
    return 0
  fi
  if "$work/prog" 192.168.0.1 7390 >"$work/deb.out" 2>&1; then
    echo "prog succeeded on Debian's librpma without an RDMA device:"
    cat "$work/deb.out"
    return 1
  fi
  echo "as expected: $(head -n 2 "$work/deb.out")"
}
check SameBinaryOnDebiansLibraryFindsNoDevice debian_library_fails_here

loader_takes_ours() {
  local line
  line=$(LD_LIBRARY_PATH=$ours_lib ldd "$work/prog" | grep librpma.so.0)
  echo "$line"
  [[ $(realpath "$(awk '{ print $3 }' <<<"$line")") == "$ours_so" ]]
}
check LoaderTakesOursWithLdLibraryPath loader_takes_ours

runs_on_the_fake() { # runs_on_the_fake LOG CMD...: exit 0, no loader warning, the fake's trace
  local log=$1
  shift
  if ! LD_PRELOAD=$preload LD_LIBRARY_PATH=${library_path-$ours_lib} RPMA_HARNESS_LOG=1 RPMA_HARNESS_BACKEND=fake \
    timeout 120 "$@" >"$log" 2>&1; then
    echo "exited non-zero:"
    tail -n 30 "$log"
    return 1
  fi
  if grep -E -i "no version information|version .* not found|symbol lookup error" "$log"; then
    echo "the loader complained"
    return 1
  fi
  # The harness's own trace (RPMA_HARNESS_LOG): fake_nic event records.
  grep -q '^fake_nic: #[0-9]* ' "$log" || { echo "no fake_nic trace in the output:"; tail -n 20 "$log"; return 1; }
}
# The same, with LD_LIBRARY_PATH empty: the program's RUNPATH finds the drop-in.
runs_on_the_fake_without_library_path() { library_path="" runs_on_the_fake "$@"; }
prog_runs_on_fake() {
  runs_on_the_fake "$work/prog.out" "$work/prog" 192.168.0.1 7391 || return 1
  grep -q '^prog: ok' "$work/prog.out" || return 1
  # The connect reached the fake NIC's CM: its trace has the request.
  grep -q '^fake_nic: #[0-9]* cm_event .*CONNECT_REQUEST' "$work/prog.out" ||
    { echo "no CONNECT_REQUEST in the fake's trace"; return 1; }
  grep -c '^fake_nic: #' "$work/prog.out" | sed 's/$/ fake_nic trace records/'
}
check DebianBuiltProgramRunsOnTheFakeNic prog_runs_on_fake

prog_follows_backend_choice() {
  # RPMA_HARNESS_BACKEND=rdma-core reaches the real backend through the
  # drop-in too; with no RDMA device here, the first call fails as librpma's
  # would (RPMA_E_PROVIDER).
  if ls /sys/class/infiniband/* >/dev/null 2>&1; then
    echo "this host has an RDMA device; not asserting rdma-core fails"
    return 0
  fi
  if LD_PRELOAD=$preload LD_LIBRARY_PATH=$ours_lib RPMA_HARNESS_BACKEND=rdma-core RPMA_HARNESS_LOG=1 \
    timeout 60 "$work/prog" 192.168.0.1 7394 >"$work/rdma-core.out" 2>&1; then
    echo "prog succeeded on the rdma-core backend without an RDMA device"
    return 1
  fi
  grep -q 'Provider error' "$work/rdma-core.out" || { cat "$work/rdma-core.out"; return 1; }
  ! grep -q '^fake_nic: ' "$work/rdma-core.out"
}
check DropinOnRdmaCoreBackendFailsWithoutADevice prog_follows_backend_choice

# --- pkg-config: Make and CMake projects ------------------------------------------

pc_points_at_ours() {
  local cflags libs
  cflags=$(PKG_CONFIG_PATH=$ours_lib/pkgconfig pkg-config --cflags librpma) || return 1
  libs=$(PKG_CONFIG_PATH=$ours_lib/pkgconfig pkg-config --libs librpma) || return 1
  echo "cflags: $cflags; libs: $libs; version $(PKG_CONFIG_PATH=$ours_lib/pkgconfig pkg-config --modversion librpma)"
  [[ $(realpath "${cflags#-I}") == "$(realpath "$ours_prefix/include")" ]] &&
    grep -q -- "-L$ours_lib\b\|-L$(realpath "$ours_lib")" <<<"$libs" ||
    [[ $(realpath "$(sed 's/^-L\([^ ]*\).*/\1/' <<<"$libs")") == "$(realpath "$ours_lib")" ]]
}
check PkgConfigPointsAtTheDropin pc_points_at_ours

make_project() {
  # debian_build.sh make: CFLAGS=-H PKG_CONFIG_PATH=<the drop-in's> make.
  built_ok "$built/make.log" || return 1
  # Our header, not Debian's, on that include path.
  grep -q "^\. <execroot>/.*/rpma/dropin/prefix/.*include/librpma.h\$" "$built/make.log" && ! grep -q "^\. $deb_hdr\$" "$built/make.log" ||
    { echo "wrong librpma.h:"; grep librpma "$built/make.log"; return 1; }
  runs_on_the_fake "$work/make.out" "$built/make/prog" 192.168.0.1 7392
}
check MakeProjectLinksThroughPkgConfig make_project

cmake_project() {
  # debian_build.sh cmake: PKG_CONFIG_PATH=<the drop-in's> cmake; cmake --build.
  built_ok "$built/cmake.log" || return 1
  # pkg-config's -L went into the link as a RUNPATH that named the drop-in's
  # lib directory (debian_build.sh checked it and logged it), and the build
  # made that entry $ORIGIN-relative so that the cached program works from
  # any checkout's output tree: it leads to this very file (symlinks
  # resolved), ours without LD_LIBRARY_PATH, and names no absolute path.
  grep -q '^cmake RUNPATH: <execroot>/.*/rpma/dropin/prefix/lib$' "$built/cmake.log" ||
    { echo "the build log does not show CMake's own RUNPATH"; return 1; }
  local runpath found=0 d origin
  origin=$(dirname "$(realpath "$built/cmake/prog")")
  runpath=$(readelf -d "$built/cmake/prog" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p; s/.*(RPATH).*\[\(.*\)\]/\1/p')
  for d in ${runpath//:/ }; do
    [[ $d == /* ]] && { echo "the CMake-built prog's RUNPATH ($runpath) names an absolute path"; return 1; }
    d=${d//\$ORIGIN/$origin}
    [[ $(realpath "$d/librpma.so.0" 2>/dev/null) == "$(realpath "$ours_so")" ]] && found=1
  done
  [[ $found == 1 ]] || { echo "the CMake-built prog's RUNPATH ($runpath) does not lead to $ours_so"; return 1; }
  runs_on_the_fake_without_library_path "$work/cmake.out" "$built/cmake/prog" 192.168.0.1 7393
}
check CMakeProjectLinksThroughPkgConfig cmake_project

# --- every example pair, built against Debian's package, run on ours -------------------

# debian_build.sh pair: server.c and client.c (main renamed) with plain gcc
# against Debian's librpma-dev, linked with example_common.c and the
# launcher (compiled once), -lrpma.
while read -r dir port nclients rest; do
  [[ -z "$dir" ]] && continue
  name=$(sed -E 's/^[0-9]+-//; s/(^|-)([a-z])/\U\2/g' <<<"$dir")
  pair() {
    built_ok "$built/pairs/$dir.log" || return 1
    mkdir -p "$work/pairs/$dir"
    # shellcheck disable=SC2086
    runs_on_the_fake "$work/pairs/$dir/out" "$built/pairs/$dir/pair" 192.168.0.1 "$port" "$nclients" $rest || return 1
    grep -q '^launcher: server and clients passed' "$work/pairs/$dir/out"
  }
  check "Example${name}PairBuiltAgainstDebianRunsOnTheFake" pair
done <"$pairs_txt"

finish
