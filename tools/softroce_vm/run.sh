#!/usr/bin/env bash
# run.sh: runs gtest binaries inside a qemu VM whose Debian kernel provides a
# real software RDMA NIC (the Linux soft-RoCE driver, rdma_rxe), and brings
# their gtest XML and exit codes back to the host.
#
#   tools/softroce_vm/run.sh [--timeout SECONDS] [--binary-timeout SECONDS]
#                            [--out DIR] [--env K=V]... [--keep]
#                            [--pairs FILE [--pair-timeout SECONDS]]
#                            [BINARY...]
#
# Inside the VM, rxe0 sits on dummy0 (192.168.77.1/24) and every binary runs
# with RPMA_HARNESS_BACKEND=rdma-core, RPMA_HARNESS_VM_ADDR=192.168.77.1 and
# --gtest_output=xml:/results/<name>.xml. --pairs runs server/client pairs as
# separate processes (one line each: NAME PORT NCLIENTS SERVER CLIENT
# [SERVER_ARG...] -- [CLIENT_ARG...]). Exit status 0 only if every binary ran
# and exited 0 and every pair passed. See README.md beside this file.
#
# Why a VM: the host has no RDMA device and cannot load kernel modules, but a
# qemu guest (TCG, no KVM needed) can load Debian's own rdma_rxe module.
set -Eeuo pipefail
# A command that fails under `set -e` says which one, instead of ending the
# run silently (CI once got an empty log: build_initramfs's libgcc). -E: in the
# functions too; not from inside a command substitution, whose failure the
# main shell then reports (or handles) itself.
trap 'rc_=$?; if [ "$BASH_SUBSHELL" -eq 0 ]; then printf "softroce_vm: FAIL: line %s: %s exited %s\n" "$LINENO" "$BASH_COMMAND" "$rc_" >&2; fi' ERR

readonly VM_ADDR=192.168.77.1
readonly VM_PREFIX=24
readonly CACHE_DIR="${SOFTROCE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rpma-harness/softroce_vm}"
# The metapackage whose dependency names the current Debian 12 kernel image;
# SOFTROCE_VM_KERNEL_PKG=linux-image-6.1.0-NN-amd64 pins one instead.
readonly KERNEL_META=linux-image-amd64
# Modules we ask for; modprobe --show-depends adds their dependencies (ib_core,
# ib_uverbs, udp_tunnel, rdma_cm, ...) in load order. crc32_generic: rxe
# computes the ICRC with the kernel's "crc32" shash, which the kernel would
# otherwise request_module() at `rdma link add` time (no modprobe in the
# guest: the link add fails with ENOENT). dummy: the netdev rxe binds to;
# rdma_rxe: the soft-RoCE device; rdma_ucm: /dev/infiniband/rdma_cm.
readonly WANTED_MODULES=(crc32_generic dummy rdma_rxe rdma_ucm)
readonly MULTIARCH_LIB=/usr/lib/x86_64-linux-gnu

log() { printf 'softroce_vm: %s\n' "$*" >&2; }
die() {
  printf 'softroce_vm: FAIL: %s\n' "$*" >&2
  exit 1
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

# --- arguments ---------------------------------------------------------------

timeout_s=480
# A hung binary is killed after this long so the ones after it still run.
binary_timeout_s=240
out_dir=""
keep=0
extra_env=()
binaries=()
pairs_file=""
# Each process of a pair (server, every client) is killed after this long.
pair_timeout_s=60
while (($#)); do
  case "$1" in
    --timeout)
      [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || die "--timeout needs a number of seconds"
      timeout_s=$2
      shift 2
      ;;
    --binary-timeout)
      [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || die "--binary-timeout needs a number of seconds"
      binary_timeout_s=$2
      shift 2
      ;;
    --out)
      [[ $# -ge 2 ]] || die "--out needs a directory"
      out_dir=$2
      shift 2
      ;;
    --env)
      [[ $# -ge 2 && "$2" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env needs K=V"
      extra_env+=("$2")
      shift 2
      ;;
    --pairs)
      [[ $# -ge 2 && -f "$2" ]] || die "--pairs needs a file"
      pairs_file=$2
      shift 2
      ;;
    --pair-timeout)
      [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || die "--pair-timeout needs a number of seconds"
      pair_timeout_s=$2
      shift 2
      ;;
    --keep)
      keep=1
      shift
      ;;
    -h | --help) usage 0 ;;
    --)
      shift
      binaries+=("$@")
      break
      ;;
    -*) die "unknown option $1 (see --help)" ;;
    *)
      binaries+=("$1")
      shift
      ;;
  esac
done
((${#binaries[@]})) || [[ -n "$pairs_file" ]] || usage 2

# --pairs: NAME PORT NCLIENTS SERVER CLIENT [SERVER_ARG...] -- [CLIENT_ARG...]
pair_names=()
pair_bins=()
if [[ -n "$pairs_file" ]]; then
  while read -r p_name p_port p_n p_server p_client p_rest; do
    [[ -z "$p_name" || "$p_name" == \#* ]] && continue
    [[ "$p_name" =~ ^[A-Za-z0-9_.+-]+$ ]] || die "pair name '$p_name' has unusual characters"
    [[ "$p_port" =~ ^[0-9]+$ && "$p_n" =~ ^[0-9]+$ ]] || die "pair $p_name: PORT and NCLIENTS must be numbers"
    for b in "$p_server" "$p_client"; do
      [[ -f "$b" && -x "$b" ]] || die "pair $p_name: binary missing or not executable: $b"
      pair_bins+=("$(readlink -f "$b")")
    done
    [[ "$p_rest" != *\'* && "$p_rest" != *\"* ]] || die "pair $p_name: no quotes in arguments"
    pair_names+=("$p_name")
  done <"$pairs_file"
  ((${#pair_names[@]})) || die "$pairs_file names no pair"
fi

declare -A seen_names=()
for bin in ${binaries[@]+"${binaries[@]}"}; do
  [[ -f "$bin" && -x "$bin" ]] || die "binary missing or not executable: $bin"
  name=$(basename "$bin")
  # The name is a file name in the guest and a marker word on the results
  # channel, so keep it to characters that need no quoting.
  [[ "$name" =~ ^[A-Za-z0-9_.+-]+$ ]] || die "binary name '$name' has unusual characters"
  [[ -z "${seen_names[$name]:-}" ]] || die "two binaries are named $name"
  seen_names[$name]=1
done

start_time=$(now)
[[ -n "$out_dir" ]] || out_dir=$(mktemp -d "${TMPDIR:-/tmp}/softroce_vm.$(date +%Y%m%d-%H%M%S).XXXX")
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

# --- host packages -----------------------------------------------------------

# Runs a command as root: apt needs it. Without root and sudo we can only say
# what is missing.
as_root() {
  if ((EUID == 0)); then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    die "need root to run: $*"
  fi
}

ensure_packages() {
  local missing=()
  [[ "$(dpkg --print-architecture)" == amd64 ]] || die "only amd64 hosts are supported (the guest kernel is Debian's amd64 one)"
  command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
  # The guest's shell and tools: must be the static busybox, since the
  # initramfs carries no libraries for it.
  if [[ ! -x /bin/busybox ]] || ldd /bin/busybox >/dev/null 2>&1; then
    missing+=(busybox-static)
  fi
  compgen -G "$MULTIARCH_LIB/libibverbs/librxe-rdmav*.so" >/dev/null || missing+=(ibverbs-providers)
  [[ -f /etc/libibverbs.d/rxe.driver ]] || missing+=(ibverbs-providers)
  { command -v rdma && command -v ip; } >/dev/null || missing+=(iproute2)
  command -v xz >/dev/null || missing+=(xz-utils)
  command -v cpio >/dev/null || missing+=(cpio)
  command -v gzip >/dev/null || missing+=(gzip)
  # depmod/modprobe compute the module load order from the kernel package.
  { command -v depmod && command -v modprobe; } >/dev/null || missing+=(kmod)
  ((${#missing[@]})) || return 0
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  log "installing missing packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! as_root apt-get install -y --no-install-recommends "${missing[@]}"; then
    # A fresh machine may not have package lists yet.
    as_root apt-get update
    as_root apt-get install -y --no-install-recommends "${missing[@]}" ||
      die "could not install ${missing[*]}"
  fi
}

# --- kernel ------------------------------------------------------------------

# Prints the kernel image package to use, e.g. linux-image-6.1.0-57-amd64.
kernel_package() {
  if [[ -n "${SOFTROCE_VM_KERNEL_PKG:-}" ]]; then
    echo "$SOFTROCE_VM_KERNEL_PKG"
    return
  fi
  local pkg
  # `|| true`: a failing apt-cache (its lists being replaced, say) must not
  # end the run; an empty answer falls through to the update and the cached
  # kernel. awk reads to the end (see build_initramfs's libgcc).
  pkg=$(apt-cache depends "$KERNEL_META" 2>/dev/null | awk '/Depends: linux-image-/ && !found { print $2; found = 1 }' || true)
  if [[ -z "$pkg" ]]; then
    as_root apt-get update >&2 || true
    pkg=$(apt-cache depends "$KERNEL_META" 2>/dev/null | awk '/Depends: linux-image-/ && !found { print $2; found = 1 }' || true)
  fi
  if [[ -z "$pkg" ]]; then
    # Offline with no package lists: a kernel prepared earlier still works.
    local ready
    ready=$(find "$CACHE_DIR" -maxdepth 2 -path "$CACHE_DIR/linux-image-*/.ready" 2>/dev/null | sort -V | tail -n 1)
    [[ -n "$ready" ]] || die "no kernel package found: apt-cache knows no $KERNEL_META and $CACHE_DIR has no prepared kernel"
    pkg=$(basename "$(dirname "$ready")")
    log "apt-cache knows no $KERNEL_META; using cached $pkg"
  fi
  echo "$pkg"
}

# Downloads and unpacks `$1` into $CACHE_DIR/$1 once: the .deb and the
# unpacked tree, with the modules.dep that depmod makes for it.
prepare_kernel() {
  local pkg=$1 dir="$CACHE_DIR/$1"
  [[ -f "$dir/.ready" ]] && return 0
  local tmp="$dir.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  log "downloading $pkg (once; cached in $dir)"
  # As root, apt's download sandbox user cannot write into our cache dir.
  (cd "$tmp" && apt-get download -o APT::Sandbox::User=root "$pkg" >&2) ||
    (as_root apt-get update >&2 && cd "$tmp" && apt-get download -o APT::Sandbox::User=root "$pkg" >&2) ||
    die "no kernel package found: apt-get download $pkg failed"
  dpkg -x "$tmp"/*.deb "$tmp/root"
  local release
  release=$(ls -1 "$tmp/root/lib/modules")
  [[ -n "$release" && -f "$tmp/root/boot/vmlinuz-$release" ]] || die "$pkg has no vmlinuz or modules"
  # The package ships no modules.dep (its postinst runs depmod), so make it.
  depmod -b "$tmp/root" "$release"
  echo "$release" >"$tmp/release"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  touch "$dir/.ready"
  log "prepared $pkg ($release)"
  # Each unpacked kernel is ~470 MB: drop the ones Debian has moved on from.
  local old
  for old in "$CACHE_DIR"/linux-image-*; do
    [[ "$old" == "$dir" || ! -d "$old" ]] && continue
    log "removing superseded $(basename "$old") from the cache"
    rm -rf "$old"
  done
}

# Copies WANTED_MODULES and their dependencies from kernel tree `$1` into
# `$2`, uncompressed, with `$2/order` listing them in load order.
copy_modules() {
  local kdir=$1 dest=$2 release mod_paths=() m line
  release=$(cat "$kdir/release")
  mkdir -p "$dest"
  for m in "${WANTED_MODULES[@]}"; do
    # -C /dev/null: the host's modprobe.d options are not the guest's.
    line=$(modprobe -C /dev/null -d "$kdir/root" -S "$release" --show-depends "$m" 2>&1) ||
      die "module $m not found in $release: $line"
    while read -r line; do
      [[ "$line" == insmod\ * ]] || continue # "builtin X" needs no file
      line=${line#insmod }
      mod_paths+=("${line%% *}")
    done < <(modprobe -C /dev/null -d "$kdir/root" -S "$release" --show-depends "$m")
  done
  local path base
  : >"$dest/order"
  for path in "${mod_paths[@]}"; do
    base=$(basename "$path")
    base=${base%.xz}
    base=${base%.zst}
    grep -qxF "$base" "$dest/order" && continue
    # Busybox insmod may lack xz/zstd support; hand the guest plain .ko files.
    case "$path" in
      *.xz) xz -dc "$path" >"$dest/$base" ;;
      *.zst) zstd -dc "$path" >"$dest/$base" ;;
      *) cp "$path" "$dest/$base" ;;
    esac
    echo "$base" >>"$dest/order"
  done
}

# --- initramfs ---------------------------------------------------------------

# Copies ELF file `$1` to `$2` inside the guest root `$root` with every
# library ldd resolves for it, each at its host path (the loader's path is
# baked into the binary, and Debian's loader searches the multiarch dirs).
copy_elf() {
  local src=$1 dest=$2 line lib
  install -D -m 0755 "$src" "$root$dest"
  local ldd_out
  ldd_out=$(ldd "$src" 2>&1) || true # a static binary makes ldd exit 1
  if grep -q 'not found' <<<"$ldd_out"; then
    die "$src: missing shared libraries: $(grep 'not found' <<<"$ldd_out" | tr -s ' \t' ' ')"
  fi
  while read -r line; do
    case "$line" in
      *'=> /'*) lib=${line#*=> } ;;
      /*) lib=$line ;; # the loader: "/lib64/ld-linux-x86-64.so.2 (0x...)"
      *) continue ;;   # linux-vdso, "statically linked"
    esac
    lib=${lib%% (*}
    # A Bazel binary finds its own libraries through an $ORIGIN rpath, which
    # ldd prints as ".../bin/tests/../_solib_k8/lib.so"; fold the ".." so
    # install can make the directories.
    lib=$(realpath -m -s "$lib")
    [[ -e "$root$lib" ]] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done <<<"$ldd_out"
}

# Writes the guest's /init. It reads its lists from /etc/softroce and reports
# on /dev/ttyS1, a serial port that carries only our marker lines (the kernel
# and the tests write to ttyS0, the console), so results never interleave
# with kernel messages.
write_init() {
  cat >"$root/init" <<'INIT'
#!/bin/sh
# /init of the soft-RoCE VM, written by tools/softroce_vm/run.sh.
export PATH=/usr/bin:/usr/sbin HOME=/tmp TMPDIR=/tmp
mount -t devtmpfs devtmpfs /dev
# The initramfs has no /dev/console node, so the kernel gave us no stdio.
exec </dev/null >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys

REPORT=/dev/ttyS1
say() { echo "softroce_vm(guest): $*"; }
# Each report opens and closes the port: close waits until the UART has sent
# everything, so nothing is lost when we power off.
report() { echo "$*" >"$REPORT"; }
fail() {
  say "FAIL: $*"
  report "=====SETUP-FAIL $*====="
  dmesg | tail -n 40
  poweroff -f
}

[ -c "$REPORT" ] || { say "FAIL: no $REPORT"; poweroff -f; }
stty -F "$REPORT" raw -echo 2>/dev/null
report "=====GUEST-UP $(uname -r)====="

for m in $(cat /modules/order); do
  insmod "/modules/$m" || fail "module $m failed to load (insmod exit $?)"
done

ip link set lo up || fail "ip link set lo up"
# Ephemeral ports (a client id's implicit bind: cma.c cma_alloc_any_port
# takes them from this range) above every port a test listens on, so a
# client of one process cannot hold the port another binds explicitly
# (random_differential_test's shards listen on 40000-59999; CI saw
# "Address already in use" once with Linux's default 32768-60999).
echo "61000 65535" >/proc/sys/net/ipv4/ip_local_port_range ||
  fail "setting ip_local_port_range"
# dummy.ko makes dummy0 itself (its numdummies defaults to 1).
[ -e /sys/class/net/dummy0 ] || ip link add dummy0 type dummy || fail "ip link add dummy0 type dummy"
ip addr add "$(cat /etc/softroce/addr)" dev dummy0 || fail "ip addr add on dummy0"
ip link set dummy0 up || fail "ip link set dummy0 up"
rdma link add rxe0 type rxe netdev dummy0 || fail "rdma link add rxe0 type rxe netdev dummy0"
[ -e /sys/class/infiniband/rxe0 ] || fail "no rxe0: /sys/class/infiniband/rxe0 is missing after rdma link add"
# devtmpfs makes the device nodes as the devices register; give it a moment.
for i in 1 2 3 4 5 6 7 8 9 10; do
  [ -c /dev/infiniband/uverbs0 ] && [ -c /dev/infiniband/rdma_cm ] && break
  sleep 0.5
done
[ -c /dev/infiniband/uverbs0 ] || fail "no /dev/infiniband/uverbs0"
[ -c /dev/infiniband/rdma_cm ] || fail "no /dev/infiniband/rdma_cm"
rdma link show
report "=====RXE-UP====="

mkdir -p /results
BINARY_TIMEOUT=$(cat /etc/softroce/binary_timeout)
. /etc/softroce/env
for name in $(cat /etc/softroce/tests); do
  say "running $name"
  report "=====START $name====="
  started=$(date +%s)
  timeout -s TERM "$BINARY_TIMEOUT" "/tests/$name" --gtest_output="xml:/results/$name.xml"
  rc=$?
  if [ "$rc" = 143 ] && [ $(($(date +%s) - started)) -ge "$BINARY_TIMEOUT" ]; then
    say "$name killed after ${BINARY_TIMEOUT}s (--binary-timeout)"
    report "=====TIMEOUT $name $BINARY_TIMEOUT====="
  fi
  say "$name exited $rc"
  report "=====EXIT $name $rc====="
  if [ -f "/results/$name.xml" ]; then
    report "=====BEGIN $name.xml====="
    base64 "/results/$name.xml" >"$REPORT"
    report "=====END $name.xml====="
  fi
done

# Example pairs: the server in the background, then its clients once it has
# printed "listening on", each process under its own timeout; the results are
# the server's exit code and the worst client's.
PAIR_TIMEOUT=$(cat /etc/softroce/pair_timeout)
exec 3</etc/softroce/pairs
while read -r name port n server client rest <&3; do
  sargs=${rest%%--*}
  cargs=""
  case "$rest" in *--*) cargs=${rest#*--} ;; esac
  say "pair $name: $server, $n x $client (port $port)"
  report "=====PAIR-START $name====="
  timeout -s TERM "$PAIR_TIMEOUT" "$server" "$RPMA_HARNESS_VM_ADDR" "$port" $sargs \
    </dev/null >"/tmp/$name.server.log" 2>&1 &
  spid=$!
  i=0
  while [ $i -lt 200 ] && ! grep -q "listening on" "/tmp/$name.server.log" && kill -0 $spid 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
  done
  cpids=""
  k=0
  while [ $k -lt "$n" ]; do
    a=$(echo "$cargs" | sed "s/%i/$k/g")
    timeout -s TERM "$PAIR_TIMEOUT" "$client" "$RPMA_HARNESS_VM_ADDR" "$port" $a \
      </dev/null >"/tmp/$name.client$k.log" 2>&1 &
    cpids="$cpids $!"
    k=$((k + 1))
  done
  crc=0
  for p in $cpids; do
    wait $p
    r=$?
    [ $r -ne 0 ] && crc=$r
  done
  wait $spid
  src=$?
  for f in /tmp/$name.*.log; do sed "s|^|[$name $(basename "$f" .log | sed 's/.*\.//')] |" "$f"; done
  say "pair $name: server exited $src, clients $crc"
  report "=====PAIR $name $src $crc====="
done
report "=====DONE====="
# Let the console drain the tests' last lines before the power goes.
sleep 1
poweroff -f
INIT
  chmod 0755 "$root/init"
}

build_initramfs() {
  local kdir=$1 initramfs=$2
  root="$work/root"
  mkdir -p "$root"/usr/{bin,sbin,lib64} "$root$MULTIARCH_LIB" \
    "$root"/{proc,sys,dev,tmp,results,tests,modules,etc/softroce,etc/libibverbs.d}
  # Debian 12's merged /usr, so that ldd's /lib/... and /lib64/... paths are
  # the same files as /usr/lib/... (the provider lives under /usr/lib).
  ln -s usr/bin "$root/bin"
  ln -s usr/sbin "$root/sbin"
  ln -s usr/lib "$root/lib"
  ln -s usr/lib64 "$root/lib64"

  copy_modules "$kdir" "$root/modules"
  # iproute2's ip and rdma (busybox's ip cannot add every link type).
  copy_elf "$(command -v ip)" /usr/bin/ip
  copy_elf "$(command -v rdma)" /usr/bin/rdma
  # libibverbs finds providers through /etc/libibverbs.d/*.driver and loads
  # lib<name>-rdmav*.so from its compiled-in directory.
  local provider
  for provider in "$MULTIARCH_LIB"/libibverbs/librxe-rdmav*.so; do
    copy_elf "$provider" "$provider"
  done
  cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
  # glibc dlopens libgcc_s for unwinding (pthread_exit, C++ exceptions).
  local libgcc
  # awk reads to the end: an early `exit` let ldconfig's next write meet a
  # closed pipe (SIGPIPE), and pipefail then ended the whole run silently,
  # about one run in 25 on a host whose cache lists ~700 libraries.
  libgcc=$(ldconfig -p | awk '/libgcc_s\.so\.1 \(libc6,x86-64\)/ && !found { print $NF; found = 1 }')
  [[ -n "$libgcc" ]] || die "libgcc_s.so.1 not found on the host"
  [[ -e "$root$libgcc" ]] || install -D -m 0755 "$(readlink -f "$libgcc")" "$root$libgcc"

  cp /bin/busybox "$root/usr/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [[ -e "$root/usr/bin/$applet" ]] || ln -s busybox "$root/usr/bin/$applet"
  done

  local bin
  : >"$root/etc/softroce/tests"
  : >"$root/etc/softroce/pairs"
  for bin in ${pair_bins[@]+"${pair_bins[@]}"}; do
    [[ -e "$root$bin" ]] || copy_elf "$bin" "$bin"
  done
  if [[ -n "$pairs_file" ]]; then
    # Same lines, binaries at their real host paths (where copy_elf put them).
    local p_name p_port p_n p_server p_client p_rest
    while read -r p_name p_port p_n p_server p_client p_rest; do
      [[ -z "$p_name" || "$p_name" == \#* ]] && continue
      echo "$p_name $p_port $p_n $(readlink -f "$p_server") $(readlink -f "$p_client") $p_rest" >>"$root/etc/softroce/pairs"
    done <"$pairs_file"
  fi
  echo "$pair_timeout_s" >"$root/etc/softroce/pair_timeout"
  for bin in ${binaries[@]+"${binaries[@]}"}; do
    # The binary keeps its real host path in the guest, so that an $ORIGIN
    # rpath (Bazel's _solib_* libraries) points at the same files there;
    # /tests/<name> is how /init finds it.
    local real
    real=$(readlink -f "$bin")
    copy_elf "$real" "$real"
    ln -s "$real" "$root/tests/$(basename "$bin")"
    basename "$bin" >>"$root/etc/softroce/tests"
  done
  echo "$VM_ADDR/$VM_PREFIX" >"$root/etc/softroce/addr"
  echo "$binary_timeout_s" >"$root/etc/softroce/binary_timeout"
  # Sourced by /init; --env values come last so they can override ours.
  {
    echo "export RPMA_HARNESS_BACKEND=rdma-core"
    echo "export RPMA_HARNESS_VM_ADDR=$VM_ADDR"
    local kv
    for kv in "${extra_env[@]}"; do
      local v=${kv#*=}
      printf "export %s='%s'\n" "${kv%%=*}" "${v//\'/\'\\\'\'}"
    done
  } >"$root/etc/softroce/env"
  write_init

  (cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$initramfs"
}

# --- results -----------------------------------------------------------------

# Splits the results channel into <name>.xml files and prints one line per
# binary; returns non-zero unless every binary ran and exited 0.
collect_results() {
  local results=$1 ok=0 name rc xml counts clean="$work/results.clean"
  tr -d '\r' <"$results" >"$clean"
  if grep -q '^=====SETUP-FAIL' "$clean"; then
    log "guest set-up failed: $(sed -n 's/^=====SETUP-FAIL \(.*\)=====$/\1/p' "$clean" | head -n 1)"
    ok=1
  fi
  while read -r name; do
    xml="$out_dir/$name.xml"
    awk -v b="=====BEGIN $name.xml=====" '
      $0 == b { on = 1; next }
      on && /^=====END / { exit }
      on { print }' "$clean" | base64 -d >"$xml" 2>/dev/null || true
    [[ -s "$xml" ]] || rm -f "$xml"
    rc=$(sed -n "s/^=====EXIT $name \\([0-9]*\\)=====\$/\\1/p" "$clean" | head -n 1)
    counts=""
    if [[ -f "$xml" ]]; then
      counts=$(grep -m1 -o '<testsuites [^>]*' "$xml" |
        grep -o -E '\b(tests|failures|disabled|errors|skipped)="[0-9]+"' | tr -d '"' | tr '\n' ' ')
    fi
    if [[ -z "$rc" ]]; then
      if grep -qx "=====START $name=====" "$clean"; then
        echo "softroce_vm: DID NOT FINISH $name (started, no exit code)"
      else
        echo "softroce_vm: NOT RUN $name"
      fi
      ok=1
    elif grep -q "^=====TIMEOUT $name " "$clean"; then
      echo "softroce_vm: TIMEOUT $name (killed after ${binary_timeout_s}s; see the console for the last test started)"
      ok=1
    elif [[ "$rc" == 0 ]]; then
      echo "softroce_vm: PASS $name (exit 0; ${counts:-no xml})"
    else
      echo "softroce_vm: FAIL $name (exit $rc; ${counts:-no xml})"
      ok=1
    fi
  done < <(for b in ${binaries[@]+"${binaries[@]}"}; do basename "$b"; done)
  # Pairs, and their own gtest-style XML (one case per pair) for the counters.
  if ((${#pair_names[@]})); then
    local line src crc cases="" fails=0
    for name in "${pair_names[@]}"; do
      line=$(grep -m1 "^=====PAIR $name " "$clean" || true)
      if [[ -z "$line" ]]; then
        if grep -qx "=====PAIR-START $name=====" "$clean"; then
          echo "softroce_vm: DID NOT FINISH pair $name"
        else
          echo "softroce_vm: NOT RUN pair $name"
        fi
        cases+="  <testcase name=\"$name\" classname=\"ExamplePairs\"><failure message=\"did not run to the end\"/></testcase>"$'\n'
        fails=$((fails + 1))
        ok=1
        continue
      fi
      read -r _ _ src crc <<<"${line%=====}"
      if [[ "$src" == 0 && "$crc" == 0 ]]; then
        echo "softroce_vm: PASS pair $name (server and clients exit 0)"
        cases+="  <testcase name=\"$name\" classname=\"ExamplePairs\"/>"$'\n'
      else
        echo "softroce_vm: FAIL pair $name (server exit $src, clients $crc; see the console)"
        cases+="  <testcase name=\"$name\" classname=\"ExamplePairs\"><failure message=\"server exit $src, clients $crc\"/></testcase>"$'\n'
        fails=$((fails + 1))
        ok=1
      fi
    done
    {
      echo '<?xml version="1.0" encoding="UTF-8"?>'
      echo "<testsuites tests=\"${#pair_names[@]}\" failures=\"$fails\" errors=\"0\">"
      echo "<testsuite name=\"ExamplePairs\" tests=\"${#pair_names[@]}\" failures=\"$fails\" errors=\"0\" skipped=\"0\">"
      printf '%s' "$cases"
      echo "</testsuite></testsuites>"
    } >"$out_dir/example_pairs.xml"
  fi
  return "$ok"
}

# --- main --------------------------------------------------------------------

ensure_packages
mkdir -p "$CACHE_DIR"
pkg=$(kernel_package)
# One preparer at a time: two runs may share the cache.
exec 9>"$CACHE_DIR/.lock"
flock 9
prepare_kernel "$pkg"
flock -u 9
kdir="$CACHE_DIR/$pkg"
release=$(cat "$kdir/release")

work=$(mktemp -d "${TMPDIR:-/tmp}/softroce_vm.work.XXXXXX")
qemu_pid=""
cleanup() {
  if [[ -n "$qemu_pid" ]] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill "$qemu_pid" 2>/dev/null || true
  fi
  if ((keep)); then log "kept work dir $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

build_initramfs "$kdir" "$work/initramfs.cpio.gz"
log "kernel $release; initramfs $(du -h "$work/initramfs.cpio.gz" | cut -f1); booting (timeout ${timeout_s}s)"

console="$out_dir/console.log"
results="$out_dir/results.log"
: >"$console"
: >"$results"
# TCG, not KVM: KVM is not usable on our machines, and TCG with -cpu max boots
# this kernel in seconds. ttyS0 is the console (kernel + test output), ttyS1
# the results channel. -no-reboot + panic=-1: a guest panic ends qemu at once.
timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 \
  -accel tcg -cpu max -m 2048 -smp 2 \
  -nographic -monitor none -no-reboot -nic none \
  -serial "file:$console" -serial "file:$results" \
  -kernel "$kdir/root/boot/vmlinuz-$release" \
  -initrd "$work/initramfs.cpio.gz" \
  -append "console=ttyS0 quiet panic=-1" \
  </dev/null >"$work/qemu.out" 2>&1 &
qemu_pid=$!
# Show the console live; tail exits soon after qemu does.
tail -s 0.2 -n +1 -f --pid="$qemu_pid" "$console" &
tail_pid=$!
qemu_status=0
wait "$qemu_pid" || qemu_status=$?
qemu_pid=""
wait "$tail_pid" || true

status=0
if ((qemu_status == 124 || qemu_status == 137)); then
  log "TIMEOUT: the VM did not power off within ${timeout_s}s; killed qemu"
  status=1
elif ((qemu_status != 0)); then
  log "qemu exited $qemu_status: $(tail -n 5 "$work/qemu.out")"
  status=1
fi
collect_results "$results" || status=1
log "console: $console; results: $out_dir"
log "total wall time: $(elapsed "$start_time") s"
if ((status)); then
  die "not every binary ran and exited 0 (or a pair failed)"
fi
