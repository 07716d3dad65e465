#!/usr/bin/env bash
# Builds the NodeHealthCheck operator's manager (medik8s
# node-healthcheck-operator v0.12.0) from its wrapper module
# test/k8sbins/nhc, for the e2e test of the external remediation contract
# (test/e2e/nhc_test.go), and copies its NodeHealthCheck CRD beside it:
#
#   BINDIR/nhc-manager
#   BINDIR/remediation.medik8s.io_nodehealthchecks.yaml
#
# Usage: hack/nhc.sh [BINDIR]     (default BINDIR: <repo>/bin/tools/nhc)
#
# Like hack/helm.sh: a stamp (BINDIR/.stamp) of the wrapper's go.mod/go.sum
# and the Go version; when it matches, nothing is done. The binary is built
# in a scratch file and moved into place, and the stamp written last, so an
# interrupted run never leaves a stamp that lies. A cold build takes ~11
# minutes on 2 cores (110 MB binary): run it with nice.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BINDIR=${1:-"$ROOT/bin/tools/nhc"}
WRAPPER="$ROOT/test/k8sbins/nhc"
MODULE=github.com/medik8s/node-healthcheck-operator

say() { printf 'nhc: %s\n' "$*"; }
die() { printf 'nhc: ERROR: %s\n' "$*" >&2; exit 1; }

mkdir -p "$BINDIR"
BINDIR=$(cd "$BINDIR" && pwd)
STAMP="$BINDIR/.stamp"
WANT="$(cat "$WRAPPER/go.mod" "$WRAPPER/go.sum" | sha256sum | cut -c1-16) go=$(go env GOVERSION) $(go env GOOS)/$(go env GOARCH)"

if command -v flock >/dev/null 2>&1; then
	exec 9>"$BINDIR/.lock"
	if ! flock -n 9; then
		say "another build holds $BINDIR/.lock; waiting"
		flock 9
	fi
fi

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$BINDIR/nhc-manager" ] && [ -f "$BINDIR/remediation.medik8s.io_nodehealthchecks.yaml" ]; then
	say "up to date in $BINDIR"
	exit 0
fi
rm -f "$STAMP"
say "building $MODULE (wrapper test/k8sbins/nhc) into $BINDIR"
cd "$WRAPPER"
CGO_ENABLED=0 go build -trimpath -o "$BINDIR/.nhc-manager.tmp" "$MODULE/cmd" || die "go build failed"
mv "$BINDIR/.nhc-manager.tmp" "$BINDIR/nhc-manager"
src=$(go list -m -f '{{.Dir}}' "$MODULE") || die "cannot locate $MODULE in the module cache"
install -m 0644 "$src/config/crd/bases/remediation.medik8s.io_nodehealthchecks.yaml" "$BINDIR/"
echo "$WANT" >"$STAMP"
say "built $BINDIR/nhc-manager"
