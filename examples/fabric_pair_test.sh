#!/bin/bash
# One example pair as separate processes on the fake NIC's cross-process
# fabric (RPMA_HARNESS_FABRIC): the server, then its clients, each its own
# process with its own fake NIC, meeting only through a fresh fabric
# directory. Passes when every process exits 0.
#
# usage: fabric_pair_test.sh SERVER CLIENT NCLIENTS s=SERVER,ARGS c=CLIENT,ARGS
#   ("%i" in a client argument is the client's index, 0-based)
set -u
server=$1 client=$2 clients=$3
IFS=, read -r -a server_args <<< "${4#s=}"
IFS=, read -r -a client_args <<< "${5#c=}"

# sun_path holds 108 bytes: a short directory, not $TEST_TMPDIR.
fabric=$(mktemp -d /tmp/fab.XXXXXX)
trap 'rm -rf "$fabric"' EXIT
export RPMA_HARNESS_FABRIC=$fabric
log=${TEST_TMPDIR:-$fabric}
port=7204

RPMA_HARNESS_PROCESS_NAME=server timeout 60 "$server" 127.0.0.1 $port \
  "${server_args[@]}" > "$log/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  grep -q "listening on" "$log/server.log" 2>/dev/null && break
  sleep 0.05
done

pids=()
for i in $(seq 0 $((clients - 1))); do
  args=()
  for a in "${client_args[@]}"; do args+=("${a//%i/$i}"); done
  RPMA_HARNESS_PROCESS_NAME=client$i timeout 60 "$client" 127.0.0.1 $port \
    "${args[@]}" > "$log/client$i.log" 2>&1 &
  pids+=($!)
done

failed=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then echo "client$i failed"; failed=1; fi
done
if ! wait $server_pid; then echo "server failed"; failed=1; fi
for f in "$log"/server.log "$log"/client*.log; do
  sed "s|^|$(basename "$f" .log): |" "$f"
done
exit $failed
