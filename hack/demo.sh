#!/usr/bin/env bash
# make demo (foundation stage): a walk through kubectl-fence against the
# Redfish mock. Starts the mock with three systems over HTTPS, reads one,
# shows a lying BMC being refused, and powers one off with a settled,
# read-back Off. Everything stops when the script ends.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
work=$(mktemp -d)
trap 'kill "$mock_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

export REDFISH_MOCK_PASSWORD=demo-Pa55word BMC_PASSWORD=demo-Pa55word
"$BIN/redfish-mock" --listen 127.0.0.1:0 --systems 3 --username admin --write-ca "$work/ca.pem" >"$work/mock.out" 2>"$work/mock.err" &
mock_pid=$!
for _ in $(seq 50); do grep -q serving "$work/mock.out" 2>/dev/null && break; sleep 0.1; done
addr=$(grep -o 'https://[0-9.:]*' "$work/mock.out")
bmc=(--address "$addr" --username admin --password-env BMC_PASSWORD --ca-file "$work/ca.pem")

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@" || echo "(exit code $?)"; }

step "A Redfish BMC (our mock) with three systems on $addr"
run "$BIN/kubectl-fence" bmc status "${bmc[@]}" --system 1

step "A lying BMC: it accepts ForceOff and keeps the machine on. kubectl fence refuses to call that off."
curl -sk -X PATCH -d '{"ignoreCommands":true}' "$addr/mock/systems/2/faults" >/dev/null
run "$BIN/kubectl-fence" bmc off "${bmc[@]}" --system 2 --yes --power-timeout 8s

step "An honest BMC: ForceOff, then Off read back three times over six seconds"
run "$BIN/kubectl-fence" bmc off "${bmc[@]}" --system 3 --yes -o json
