#!/usr/bin/env bash
# Builds helm from its pinned Go module (no prebuilt download):
#
#   go install helm.sh/helm/v3/cmd/helm@HELM_VERSION
#
# Usage: hack/helm.sh [BINDIR]     (default BINDIR: <repo>/bin/tools)
#
# Like hack/e2e-bins.sh: a stamp (BINDIR/.helm-stamp) records the version and
# the Go version, and when it matches the script does nothing; the binary is
# built in a scratch directory and moved into place, and the stamp written
# last, so an interrupted run never leaves a stamp that lies. A cold build
# takes ~2.5 minutes on 2 cores (it shares most modules with the control
# plane's build).
set -euo pipefail

HELM_VERSION=v3.19.0
# The Kubernetes minor of helm's client-go (v0.34): helm's Makefile stamps
# it, and without it `helm template` assumes Kubernetes v1.20.
HELM_K8S_MINOR=34
# Bump when the recipe below changes in a way the stamp cannot see.
RECIPE=2

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BINDIR=${1:-"$ROOT/bin/tools"}

say() { printf 'helm: %s\n' "$*"; }
die() { printf 'helm: ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || {
	[ -x /usr/local/go/bin/go ] && PATH="/usr/local/go/bin:$PATH"
}
command -v go >/dev/null 2>&1 || die "no 'go' on PATH"

mkdir -p "$BINDIR"
BINDIR=$(cd "$BINDIR" && pwd)
STAMP="$BINDIR/.helm-stamp"
WANT="recipe=$RECIPE helm=$HELM_VERSION go=$(go env GOVERSION) $(go env GOOS)/$(go env GOARCH)"

if command -v flock >/dev/null 2>&1; then
	exec 9>"$BINDIR/.helm-lock"
	if ! flock -n 9; then
		say "another build holds $BINDIR/.helm-lock; waiting"
		flock 9
	fi
fi

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$BINDIR/helm" ]; then
	say "up to date in $BINDIR ($HELM_VERSION)"
	exit 0
fi

rm -f "$STAMP"
SCRATCH=$(mktemp -d "$BINDIR/.helm-build.XXXXXX")
# The same cleanup as hack/e2e-bins.sh: it never changes the exit status
# (a bare `kill` with no jobs exits 2 under set -e).
cleanup() {
	local status=$? pids
	pids=$(jobs -p)
	if [ -n "$pids" ]; then
		# shellcheck disable=SC2086
		kill $pids 2>/dev/null || true
		pkill -P "$(echo $pids | tr ' ' ',')" 2>/dev/null || true
		wait 2>/dev/null || true
	fi
	rm -rf "$SCRATCH"
	exit "$status"
}
trap cleanup EXIT
trap 'say "interrupted; nothing half-built was installed"; exit 130' INT TERM

t0=$SECONDS
say "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION ..."
# In the background and waited for, so that SIGTERM stops it at once.
(cd "$SCRATCH" && CGO_ENABLED=0 GOBIN="$SCRATCH" GOFLAGS=-trimpath exec go install \
	-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION
		-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR
		-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR" \
	"helm.sh/helm/v3/cmd/helm@$HELM_VERSION") &
if ! wait $!; then
	die "'go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION' failed after $((SECONDS - t0))s (output above)"
fi
"$SCRATCH/helm" version --short | grep -qF "$HELM_VERSION" ||
	die "helm version does not report $HELM_VERSION: $("$SCRATCH/helm" version --short 2>&1)"
mv -f "$SCRATCH/helm" "$BINDIR/helm"
printf '%s\n' "$WANT" >"$STAMP"
say "built in $((SECONDS - t0))s into $BINDIR"
