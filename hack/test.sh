#!/usr/bin/env bash
# make test: vet, gofmt, race tests of everything, the real control
# plane included, and the full randomized simulation.
#
# The control plane's binaries take ~12 minutes to build the first time. So
# they build in the background while vet and the unit tests run; the
# packages that need the control plane run once the binaries are there.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
GO=${GO:-go}

# Packages that start a control plane, and hack (its image test builds the
# binaries and the image: CPU better spent once the control plane is built,
# while the e2e tests mostly wait on the controllers' clocks). test/e2e is
# the long one (~11 minutes), so it runs as two processes, each with its own
# control plane: the CLI's tests and the agent's. Everything binds 127.0.0.1
# on free ports, so they do not collide.
# internal/inventory (the Metal3 management cluster and watch) and
# cmd/fence-agent (validate against BareMetalHosts) start one each.
CP_PKGS=()
for d in cluster deploy drain hack internal/preflight internal/inventory cmd/fence-agent test; do
	[ -d "$d" ] && CP_PKGS+=("./$d/...")
done
E2E=github.com/bmcfence/bmcfence/test/e2e

bins_log="$BIN/e2e-bins.log"
helm_log="$BIN/helm-build.log"
mkdir -p "$BIN"
hack/e2e-bins.sh "$BIN/e2e" >"$bins_log" 2>&1 &
bins=$!
helmb=""
nhcb=""
trap 'kill $bins $helmb $nhcb 2>/dev/null || true' EXIT
echo "test: building the control plane in the background (progress: $bins_log)"

# vet and gofmt while the control plane builds. vet compiles every package
# (cmd/ included), so a separate "make build" would only compile it all
# again with other flags; the e2e tests build the binaries they run.
"${MAKE:-make}" --no-print-directory vet fmt-check
# The deep-copy, CRDs and typed clients must be what the pinned generators
# make of api/ today (hack/codegen.sh -check fails on any difference).
hack/codegen.sh -check

mapfile -t cp_list < <($GO list "${CP_PKGS[@]}")
mapfile -t unit < <($GO list ./... | grep -vxF -f <(printf '%s\n' "${cp_list[@]}"))
DEPLOY=github.com/bmcfence/bmcfence/deploy
mapfile -t cp_rest < <(printf '%s\n' "${cp_list[@]}" | grep -vxF -e "$E2E" -e "$DEPLOY")
echo "test: ${#unit[@]} packages without a control plane"
$GO test -race -count=1 -timeout 20m "${unit[@]}"
# The scale harness's own tests (build tag scale; TestScale itself is `make
# scale`): the agent-log timeline, the kept log, the memory budget, and the
# growth plot as headless Chromium draws it.
echo "test: test/scale's own tests (tag scale, without TestScale)"
$GO vet -tags scale ./test/scale/
$GO test -count=1 -tags scale -skip '^(TestScale|TestPlot)$' ./test/scale/

# The independent Go Redfish clients (gofish as users get it today; bmclib
# v2.3.5 on the gofish v0.20.0 it needs) against the mock: modules of their
# own, so the product's go.mod carries neither (test/redfishclients).
# hack/dashboard: the chart's Grafana dashboard is what its declared panels
# make, and every query parses with Prometheus's own PromQL parser (a module
# the product must not depend on) and names only series the agent exports;
# the chart's alerts, evaluated by Prometheus's rule manager over what the
# agent exports, fire when they should and only then.
# hack/dashboard runs without -race: it starts no goroutines of its own, and
# Prometheus's rule manager built with -race (823 packages) cost ~2 minutes
# warm and several cold, against ~11 s without.
for m in test/redfishclients test/redfishclients/bmclib hack/dashboard; do
	echo "test: module $m"
	race=-race
	[ "$m" = hack/dashboard ] && race=
	(cd "$m" && $GO vet ./... && $GO test $race -count=1 -timeout 5m ./...)
done

# NodeHealthCheck's manager (test/e2e/nhc_test.go runs the real one), from
# its wrapper module test/k8sbins/nhc: ~11 minutes cold, so it builds in
# the background too; the stamp makes later runs instant.
nhc_log="$BIN/nhc-build.log"
nice hack/nhc.sh "$BIN/tools/nhc" >"$nhc_log" 2>&1 &
nhcb=$!
echo "test: building NodeHealthCheck in the background (progress: $nhc_log)"

# helm (the chart's checks and its install test), from its pinned module:
# ~2.5 minutes cold, started only now so that it does not compete with the
# unit tests for the cores the control plane's build needs.
hack/helm.sh "$BIN/tools" >"$helm_log" 2>&1 &
helmb=$!
echo "test: building helm in the background (progress: $helm_log)"

if ! wait $bins; then
	echo "test: building the control plane failed:"
	tail -30 "$bins_log"
	exit 1
fi
if ! wait $nhcb; then
	echo "test: building NodeHealthCheck failed:"
	tail -30 "$nhc_log"
	exit 1
fi
trap - EXIT
tail -1 "$bins_log"

echo "test: ${#cp_list[@]} packages on a real control plane (test/e2e in two halves), in parallel"
logs=$(mktemp -d)
pids=()
# The chart's checks come last in this chain: hack/helm.sh waits on its lock
# for the build started above and reports its status.
(
	st=0
	$GO test -race -count=1 -timeout 30m -p 1 "${cp_rest[@]}" || st=1
	if hack/helm.sh "$BIN/tools"; then
		echo "test: helm lint and helm template of charts/bmcfence"
		"$BIN/tools/helm" lint --strict charts/bmcfence || st=1
		"$BIN/tools/helm" template bmcfence charts/bmcfence --namespace bmcfence-system >/dev/null || st=1
		$GO test -race -count=1 -timeout 30m "$DEPLOY" || st=1
	else
		echo "test: building helm failed:"
		tail -30 "$helm_log"
		st=1
	fi
	exit $st
) >"$logs/packages.log" 2>&1 &
pids+=($!)
$GO test -race -count=1 -timeout 30m -run '^TestCLI' "$E2E" >"$logs/e2e-cli.log" 2>&1 &
pids+=($!)
$GO test -race -count=1 -timeout 30m -skip '^TestCLI' "$E2E" >"$logs/e2e-agent.log" 2>&1 &
pids+=($!)
trap 'kill "${pids[@]}" $helmb 2>/dev/null || true; rm -rf "$logs"' EXIT

# The control-plane tests mostly wait on the controllers' clocks; the
# simulation, CPU-bound, fills one core meanwhile and leaves them the other.
# Since the simulation models the adapter's writes call by call and builds
# 31 mutants it needs about 13 minutes of CPU: 40m leaves room for a core
# shared with the control planes.
echo "test: the randomized simulation at full size, on one core, beside them"
failed=0
GOMAXPROCS=1 $GO test -count=1 -timeout 40m -run 'TestSimulation$' -v ./fence/fencesim/ >"$logs/sim.log" 2>&1 || failed=1
grep -E '^(simulation:|--- |ok|FAIL|\s+sim_test)' "$logs/sim.log" || true
[ $failed -eq 0 ] || cat "$logs/sim.log"

for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || failed=1
done
wait "$helmb" || failed=1
for f in packages e2e-cli e2e-agent; do
	echo "--- $f"
	cat "$logs/$f.log"
done
exit $failed
