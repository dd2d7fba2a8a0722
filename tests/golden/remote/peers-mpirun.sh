#!/bin/bash
# Run by dtrun on node-0 before mpirun starts there: can this node ssh to every node
# mpirun starts ranks on, with the options mpirun's own ssh gets? BatchMode, because
# a launcher has no terminal either: a key that asks for a passphrase or a host key that asks
# for a yes fails here as it would fail there. One line per node: "dtrun-peer RANK ok", or
# "dtrun-peer RANK failed EXIT_CODE <the last line ssh printed>".
set -u
if ! command -v ssh >/dev/null 2>&1; then
  echo "dtrun-peer-no-ssh"
  exit 0
fi
ssh_options=(-p 2222 -i /keys/id_ed25519 -o UserKnownHostsFile=/keys/known_hosts)  # may be empty: bash < 4.4 and set -u
peer() {
  local said code=0
  said=$(timeout 30 ssh -n -o BatchMode=yes -o ConnectTimeout=10 ${ssh_options[@]+"${ssh_options[@]}"} "$2" true 2>&1) || code=$?
  if [ "$code" -eq 0 ]; then
    echo "dtrun-peer $1 ok"
  else
    echo "dtrun-peer $1 failed $code $(printf '%s\n' "$said" | tr -d '\r' | grep -v '^[[:space:]]*$' | tail -n 1)"
  fi
}
# 32 at a time, so that a large cluster is not checked one node after another
peer 1 127.0.0.3 &
peer 2 127.0.0.4 &
wait
