#!/usr/bin/env bash
# make test: race tests of everything, the real control plane included, and
# the full randomized simulation.
#
# The control plane's binaries take ~10 minutes to build the first time, on
# one core mostly (linking, big packages). So they build in the background
# while the unit tests use the other core; the packages that need the control
# plane run once the binaries are there.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
GO=${GO:-go}

# Packages that start a control plane.
CP_PKGS=()
for d in cluster drain internal/preflight test; do
	[ -d "$d" ] && CP_PKGS+=("./$d/...")
done

bins_log="$BIN/e2e-bins.log"
mkdir -p "$BIN"
hack/e2e-bins.sh "$BIN/e2e" >"$bins_log" 2>&1 &
bins=$!
trap 'kill $bins 2>/dev/null || true' EXIT
echo "test: building the control plane in the background (progress: $bins_log)"

mapfile -t cp_list < <($GO list "${CP_PKGS[@]}")
mapfile -t unit < <($GO list ./... | grep -vxF -f <(printf '%s\n' "${cp_list[@]}"))
echo "test: ${#unit[@]} packages without a control plane"
$GO test -race -count=1 -timeout 20m "${unit[@]}"

if ! wait $bins; then
	echo "test: building the control plane failed:"
	tail -30 "$bins_log"
	exit 1
fi
trap - EXIT
tail -1 "$bins_log"
echo "test: ${#cp_list[@]} packages on a real control plane"
$GO test -race -count=1 -timeout 30m "${cp_list[@]}"

echo "test: the randomized simulation at full size"
set -o pipefail
$GO test -count=1 -run 'TestSimulation$' -v ./fence/fencesim/ | grep -E '^(simulation:|--- |ok|FAIL|\s+sim_test)'
