#!/usr/bin/env bash
# make demo: builds what is missing (the e2e control plane binaries take ~10
# minutes the first time, with progress), then runs the failover demo.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
hack/e2e-bins.sh "$BIN/e2e"
exec go run ./hack/demo -bin "$BIN" "$@"
