#!/usr/bin/env bash
# dropin_test.sh: the drop-in librpma.so.0 takes the place of Debian's
# librpma0 for programs built against Debian's librpma-dev, and those programs
# then run on the harness's fake NIC.
#
# Each check is one test case in $XML_OUTPUT_FILE (so .ci/run counts them);
# the script exits 1 if any fails. Needs Debian's librpma-dev and librpma0
# (tools/harness installs them), gcc, pkg-config, make and cmake.
#
#   dropin_test.sh PREFIX_LIB_SO SYMBOLS_TXT PAIRS_TXT EXAMPLES_DIR
set -uo pipefail

ours_so=$(realpath "$1")
symbols_txt=$(realpath "$2")
pairs_txt=$(realpath "$3")
examples=$(realpath "$4")
ours_lib=$(dirname "$ours_so")
ours_prefix=$(dirname "$ours_lib")
testdata=$(dirname "$(realpath "${BASH_SOURCE[0]}")")/testdata
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

cases=() # "name|ok|message"
check() { # check NAME COMMAND... : one test case
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then
    cases+=("$name|1|")
    echo "PASS $name"
  else
    cases+=("$name|0|$out")
    echo "FAIL $name"
    echo "$out" | sed 's/^/    /' | tail -n 30
  fi
}

write_xml() {
  local n=${#cases[@]} f=0 c name ok msg
  for c in "${cases[@]}"; do [[ $(cut -d'|' -f2 <<<"$c") == 1 ]] || f=$((f + 1)); done
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo "<testsuites tests=\"$n\" failures=\"$f\" errors=\"0\">"
    echo "<testsuite name=\"Dropin\" tests=\"$n\" failures=\"$f\" errors=\"0\" skipped=\"0\">"
    for c in "${cases[@]}"; do
      name=${c%%|*}
      ok=$(cut -d'|' -f2 <<<"$c")
      msg=$(cut -d'|' -f3- <<<"$c" | tail -n 20 | sed 's/&/\&amp;/g; s/</\&lt;/g; s/>/\&gt;/g; s/"/\&quot;/g')
      if [[ $ok == 1 ]]; then
        echo "  <testcase name=\"$name\" classname=\"Dropin\"/>"
      else
        echo "  <testcase name=\"$name\" classname=\"Dropin\"><failure message=\"failed\">$msg</failure></testcase>"
      fi
    done
    echo "</testsuite></testsuites>"
  } >"${XML_OUTPUT_FILE:-$work/test.xml}"
  echo "dropin: $((n - f)) passed, $f failed"
  [[ $f == 0 ]]
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
  # Plain gcc, Debian's header (the default include path) and library.
  (cd "$work" && gcc -H -o prog "$testdata/prog.c" -lrpma 2>"$work/prog.H") || { cat "$work/prog.H"; return 1; }
  grep -q "^\. $deb_hdr\$" "$work/prog.H" || { echo "did not include $deb_hdr:"; grep librpma "$work/prog.H"; return 1; }
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
  if ! LD_PRELOAD=$preload LD_LIBRARY_PATH=$ours_lib RPMA_HARNESS_LOG=1 RPMA_HARNESS_BACKEND=fake \
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
  mkdir -p "$work/make" && cp "$testdata/prog.c" "$testdata/Makefile" "$work/make/"
  (cd "$work/make" && CFLAGS=-H PKG_CONFIG_PATH=$ours_lib/pkgconfig make -s 2>"$work/make.H") || { cat "$work/make.H"; return 1; }
  # Our header, not Debian's, on that include path.
  grep -q "^\. .*/include/librpma.h\$" "$work/make.H" && ! grep -q "^\. $deb_hdr\$" "$work/make.H" ||
    { echo "wrong librpma.h:"; grep librpma "$work/make.H"; return 1; }
  runs_on_the_fake "$work/make.out" "$work/make/prog" 192.168.0.1 7392
}
check MakeProjectLinksThroughPkgConfig make_project

cmake_project() {
  if ! command -v cmake >/dev/null; then echo "cmake is not installed"; return 1; fi
  mkdir -p "$work/cmake/src" && cp "$testdata/prog.c" "$testdata/CMakeLists.txt" "$work/cmake/src/"
  (cd "$work/cmake" && PKG_CONFIG_PATH=$ours_lib/pkgconfig cmake -S src -B build >cmake.log 2>&1 &&
    cmake --build build >>cmake.log 2>&1) || { tail -n 20 "$work/cmake/cmake.log"; return 1; }
  # pkg-config's -L went into the link as an rpath: ours without LD_LIBRARY_PATH.
  runs_on_the_fake "$work/cmake.out" "$work/cmake/build/prog" 192.168.0.1 7393
}
check CMakeProjectLinksThroughPkgConfig cmake_project

# --- every example pair, built against Debian's package, run on ours -------------------

# example_common.c and the launcher are the same for every pair (no example
# directory has headers of its own): compiled once, not once per pair.
mkdir -p "$work/pairs"
shared_built=0
gcc -std=c11 -D_GNU_SOURCE -I"$examples/common" -c "$examples/common/example_common.c" -o "$work/pairs/common.o" &&
  gcc -std=c11 -D_GNU_SOURCE -c "$examples/launcher/pair_launcher.c" -o "$work/pairs/launcher.o" &&
  shared_built=1

while read -r dir port nclients rest; do
  [[ -z "$dir" ]] && continue
  name=$(sed -E 's/^[0-9]+-//; s/(^|-)([a-z])/\U\2/g' <<<"$dir")
  pair() {
    local d=$work/pairs/$dir
    mkdir -p "$d"
    [[ $shared_built == 1 ]] || { echo "example_common.c or pair_launcher.c did not compile"; return 1; }
    # Plain gcc against Debian's librpma-dev, as a user's build would be;
    # server and client compile side by side.
    local server_status=0
    gcc -std=c11 -D_GNU_SOURCE -I"$examples/common" -I"$examples/$dir" -Dmain=example_server_main -c "$examples/$dir/server.c" -o "$d/server.o" &
    local server_pid=$!
    gcc -std=c11 -D_GNU_SOURCE -I"$examples/common" -I"$examples/$dir" -Dmain=example_client_main -c "$examples/$dir/client.c" -o "$d/client.o" ||
      { wait "$server_pid"; return 1; }
    wait "$server_pid" || server_status=$?
    [[ $server_status == 0 ]] || return 1
    gcc -o "$d/pair" "$d/server.o" "$d/client.o" "$work/pairs/common.o" "$work/pairs/launcher.o" \
      -Wl,--wrap=rpma_ep_listen -lrpma -libverbs -pthread || return 1
    # shellcheck disable=SC2086
    runs_on_the_fake "$d/out" "$d/pair" 192.168.0.1 "$port" "$nclients" $rest || return 1
    grep -q '^launcher: server and clients passed' "$d/out"
  }
  check "Example${name}PairBuiltAgainstDebianRunsOnTheFake" pair
done <"$pairs_txt"

write_xml
