#!/usr/bin/env bash
# debian_build.sh: builds, at Bazel build time (genrules in BUILD), the
# programs :dropin_test runs -- each as a user would build it against
# Debian's librpma-dev, with plain gcc, make or cmake -- so that a test run
# only executes them.
#
# It always exits 0 and writes OUT: the program, or, when the build fails, a
# stand-in that says so and exits 1. LOG holds the build's whole output
# (gcc -H's include list too, which the test checks) and ends in a line
# "debian_build: ok" or "debian_build: FAILED (...)"; the test reports a
# failed build as that case's failure, with the log, as it did when it built
# them itself (and a host without librpma-dev still builds //...).
#
#   debian_build.sh prog   OUT LOG PROG_C
#   debian_build.sh make   OUT LOG PROG_C MAKEFILE PKGCONFIG_PC
#   debian_build.sh cmake  OUT LOG PROG_C CMAKELISTS PKGCONFIG_PC
#   debian_build.sh object OUT LOG SOURCE [gcc flags...]
#   debian_build.sh pair   OUT LOG EXAMPLE_DIR COMMON_O COMMON_LOG LAUNCHER_O LAUNCHER_LOG COMMON_DIR
set -uo pipefail

mode=$1 out=$2 log=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/debian_build.XXXXXX")
trap 'rm -rf "$work"' EXIT
: >"$log"

# The log is a cached build output too: it names no absolute path of this
# checkout or of this action's temporary directory (issue 29), so that it
# reads the same from any checkout and every run. gcc -H and CMake print
# absolute paths; they become <execroot>/... and <work>/....
execroot=$(pwd -P)
# In a sandbox, pc_dir (below) resolves the inputs' symlinks to the output
# base's own execroot, which is neither of the two above: any path up to a
# bazel-out/ is the execroot too.
relocate_log() {
  sed -i -e "s#$(realpath "$work")#<work>#g" -e "s#$work#<work>#g" \
    -e "s#$execroot#<execroot>#g" -e "s#$PWD#<execroot>#g" \
    -e "s#/[^ :]*/execroot/[^/ :]*/bazel-out/#<execroot>/bazel-out/#g" "$log"
}

fail() {
  echo "debian_build: FAILED ($*)" >>"$log"
  relocate_log
  # A stand-in: running it says why there is no program.
  printf '#!/bin/sh\necho "not built (debian_build.sh %s failed; see its log)" >&2\nexit 1\n' "$mode" >"$out"
  chmod +x "$out"
  exit 0
}
ok() {
  echo "debian_build: ok" >>"$log"
  relocate_log
  exit 0
}
# A .pc file's directory, absolute and with symlinks resolved: pkg-config
# derives the prefix from it (${pcfiledir}), and CMake records the library's
# directory as the program's RUNPATH, which must outlive this build's
# sandbox or temporary directory.
pc_dir() { dirname "$(realpath "$1")"; }

case "$mode" in
  prog)
    # Plain gcc, Debian's header (the default include path) and library.
    gcc -H -o "$work/prog" "$1" -lrpma >>"$log" 2>&1 || fail "gcc -lrpma"
    cp "$work/prog" "$out" && ok
    ;;
  make)
    cp "$1" "$work/prog.c" && cp "$2" "$work/Makefile"
    pc_path=$(pc_dir "$3")
    (cd "$work" && CFLAGS=-H PKG_CONFIG_PATH=$pc_path make -s) >>"$log" 2>&1 || fail make
    cp "$work/prog" "$out" && ok
    ;;
  cmake)
    mkdir -p "$work/src" && cp "$1" "$work/src/prog.c" && cp "$2" "$work/src/CMakeLists.txt"
    pc_path=$(pc_dir "$3")
    (cd "$work" && PKG_CONFIG_PATH=$pc_path cmake -S src -B build &&
      cmake --build build) >>"$log" 2>&1 || fail cmake
    # CMake records pkg-config's -L directory as the program's RUNPATH, an
    # absolute path into this action's output tree. A cached output must
    # not point into the checkout that built it (issue 29: a shared
    # --disk_cache handed one clone's RUNPATH to another, whose test then
    # ran, or failed to find, the first clone's library). So: check here
    # that CMake recorded exactly the drop-in's lib directory, say so in the
    # log, and make that entry relative to the program ($ORIGIN), which
    # leads to the same directory wherever the output tree is.
    libdir=$(realpath "$pc_path/../")
    runpath=$(patchelf --print-rpath "$work/build/prog" 2>>"$log") || fail "patchelf --print-rpath"
    echo "cmake RUNPATH: $runpath" >>"$log"
    [[ ":$runpath:" == *":$libdir:"* ]] || fail "CMake's RUNPATH ($runpath) does not name $libdir"
    # Both taken from bazel-out/ on: in a sandbox the output sits in the
    # sandbox's execroot while libdir resolved to the output base's own.
    out_dir=$(dirname "$(realpath -m "$out")")
    origin_rel=$(realpath -m --relative-to="/bazel-out/${out_dir#*/bazel-out/}" \
      "/bazel-out/${libdir#*/bazel-out/}")
    new_runpath=""
    IFS=: read -ra entries <<<"$runpath"
    for entry in "${entries[@]}"; do
      [[ $(realpath -m "$entry") == "$libdir" ]] && entry="\$ORIGIN/$origin_rel"
      new_runpath+="${new_runpath:+:}$entry"
    done
    patchelf --set-rpath "$new_runpath" "$work/build/prog" >>"$log" 2>&1 || fail "patchelf --set-rpath"
    echo "cmake RUNPATH made relative: $new_runpath" >>"$log"
    cp "$work/build/prog" "$out" && ok
    ;;
  object)
    src=$1
    shift
    gcc -std=c11 -D_GNU_SOURCE "$@" -c "$src" -o "$work/obj.o" >>"$log" 2>&1 || fail "gcc -c $src"
    cp "$work/obj.o" "$out" && ok
    ;;
  pair)
    dir=$1 common_o=$2 common_log=$3 launcher_o=$4 launcher_log=$5 common_dir=$6
    # example_common.c and the launcher are the same for every pair:
    # compiled once (their own genrules).
    for l in "$common_log" "$launcher_log"; do
      tail -n 1 "$l" | grep -q '^debian_build: ok$' ||
        { cat "$l" >>"$log"; fail "example_common.c or pair_launcher.c did not compile"; }
    done
    # Plain gcc against Debian's librpma-dev, as a user's build would be.
    for side in server client; do
      gcc -std=c11 -D_GNU_SOURCE -I"$common_dir" -I"$dir" -Dmain=example_${side}_main \
        -c "$dir/$side.c" -o "$work/$side.o" >>"$log" 2>&1 || fail "gcc -c $side.c"
    done
    gcc -o "$work/pair" "$work/server.o" "$work/client.o" "$common_o" "$launcher_o" \
      -Wl,--wrap=rpma_ep_listen -lrpma -libverbs -pthread >>"$log" 2>&1 || fail link
    cp "$work/pair" "$out" && ok
    ;;
  *)
    echo "debian_build.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
