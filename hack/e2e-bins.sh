#!/usr/bin/env bash
# Builds the binaries of the e2e control plane from pinned Go modules (no
# prebuilt downloads, no Docker):
#
#   etcd                      go.etcd.io/etcd/server/v3 (wrapper module test/k8sbins/etcd)
#   kube-apiserver,           k8s.io/kubernetes (wrapper module test/k8sbins/kubernetes,
#   kube-controller-manager,   staging replaces mapped to the published v0.x tags)
#   kube-scheduler, kubectl
#   kwok                      go install sigs.k8s.io/kwok/cmd/kwok@KWOK_VERSION
#
# Usage: hack/e2e-bins.sh [BINDIR]     (default BINDIR: <repo>/bin/e2e)
#
# A stamp file (BINDIR/.stamp) records the versions, the Go version and a hash
# of the wrapper modules; when it matches and every binary is present the script
# does nothing. The stamp is removed before and written after a build, and each
# binary is built into a scratch directory and moved into place, so an
# interrupted run never leaves a stamp that lies. A cold build takes ~10 minutes
# and ~2 GB of RAM on 2 cores (module cache ~1 GB, build cache ~4 GB).
set -euo pipefail

K8S_VERSION=v1.34.4
ETCD_VERSION=v3.6.4
KWOK_VERSION=v0.8.0
# Bump when the build recipe below changes in a way the stamp cannot see.
RECIPE=1

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BINDIR=${1:-"$ROOT/bin/e2e"}
WRAPPERS="$ROOT/test/k8sbins"
BINS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

say() { printf 'e2e-bins: %s\n' "$*"; }
die() { printf 'e2e-bins: ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || {
	[ -x /usr/local/go/bin/go ] && PATH="/usr/local/go/bin:$PATH"
}
command -v go >/dev/null 2>&1 || die "no 'go' on PATH (Go 1.26+ is needed)"
GOVERSION=$(go env GOVERSION)
case "$GOVERSION" in
go1.2[6-9]* | go1.[3-9][0-9]* | go[2-9]*) ;;
*) die "Go 1.26+ is needed (kwok $KWOK_VERSION requires it); found $GOVERSION" ;;
esac
for d in etcd kubernetes; do
	[ -f "$WRAPPERS/$d/go.mod" ] && [ -f "$WRAPPERS/$d/go.sum" ] ||
		die "missing wrapper module $WRAPPERS/$d (go.mod and go.sum must be committed)"
done

mkdir -p "$BINDIR"
BINDIR=$(cd "$BINDIR" && pwd)
STAMP="$BINDIR/.stamp"

stamp_text() {
	echo "recipe=$RECIPE"
	echo "kubernetes=$K8S_VERSION"
	echo "etcd=$ETCD_VERSION"
	echo "kwok=$KWOK_VERSION"
	echo "go=$GOVERSION $(go env GOOS)/$(go env GOARCH)"
	echo "wrappers=$(cat "$WRAPPERS"/etcd/go.mod "$WRAPPERS"/etcd/go.sum \
		"$WRAPPERS"/kubernetes/go.mod "$WRAPPERS"/kubernetes/go.sum | sha256sum | cut -d' ' -f1)"
}
WANT=$(stamp_text)

up_to_date() {
	[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] || return 1
	local b
	for b in "${BINS[@]}"; do [ -x "$BINDIR/$b" ] || return 1; done
}

# Serialise concurrent runs (two test packages, make -j) on the same BINDIR.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$BINDIR/.lock"
	if ! flock -n 9; then
		say "another build holds $BINDIR/.lock; waiting"
		flock 9
	fi
fi

if up_to_date; then
	say "up to date in $BINDIR (k8s $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION, $GOVERSION)"
	exit 0
fi

rm -f "$STAMP"
SCRATCH=$(mktemp -d "$BINDIR/.build.XXXXXX")
# cleanup runs on every exit. It must never change the exit status: under
# set -e a bare `kill` with no jobs left exits 2 and once turned every
# successful first build into a failure. It kills the whole process group
# of each background job (the go build inside the etcd/kwok subshell too).
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

export CGO_ENABLED=0
START_ALL=$SECONDS

# build NAME DIR PKG [go build flags...]: builds PKG inside module DIR and
# installs it as BINDIR/NAME.
build() {
	local name=$1 dir=$2 pkg=$3
	shift 3
	local t0=$SECONDS
	say "$name: building $pkg ..."
	# In the background and waited for: bash runs a trap only once the
	# foreground command ends, so a SIGTERM (make test's cleanup, CI's)
	# would otherwise wait minutes for a link to finish; `wait` returns at
	# once and the trap stops the build.
	(cd "$dir" && exec go build -trimpath "$@" -o "$SCRATCH/$name" "$pkg") &
	if ! wait $!; then
		die "$name: 'go build $pkg' in $dir failed after $((SECONDS - t0))s (output above)"
	fi
	mv -f "$SCRATCH/$name" "$BINDIR/$name"
	say "$name: done in $((SECONDS - t0))s"
}

say "building into $BINDIR with $GOVERSION (a cold build takes ~10 min on 2 cores)"

# etcd and kwok build beside Kubernetes: kube-apiserver's compile and link
# are the long pole and leave a core mostly idle.
(
	# Stopped by cleanup (SIGTERM), this subshell stops its own build and
	# waits for it before it exits: cleanup's pkill -P misses a build whose
	# parent died first, and such an orphan went on writing into the scratch
	# directory cleanup had just removed.
	trap 'kill $(jobs -p) 2>/dev/null || true; wait; exit 143' TERM
	# etcd: the main package is go.etcd.io/etcd/server/v3 (binary name "server").
	build etcd "$WRAPPERS/etcd" go.etcd.io/etcd/server/v3 \
		-ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION"

	# kwok: its own go.mod has no replaces, so a plain pinned go install works.
	t0=$SECONDS
	say "kwok: go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION ..."
	mkdir -p "$SCRATCH/kwok-bin"
	(cd "$SCRATCH" && GOBIN="$SCRATCH/kwok-bin" GOFLAGS=-trimpath exec go install \
		-ldflags "-s -w" \
		"sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION") &
	if ! wait $!; then
		die "kwok: go install failed after $((SECONDS - t0))s (output above)"
	fi
	mv -f "$SCRATCH/kwok-bin/kwok" "$BINDIR/kwok"
	say "kwok: done in $((SECONDS - t0))s"
) &
side=$!

# Kubernetes: without these -X flags /version reports v0.0.0-master.
K8S_MINOR=${K8S_VERSION#v1.}
K8S_MINOR=${K8S_MINOR%%.*}
K8S_DATE=$(cd "$WRAPPERS/kubernetes" && go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)
K8S_DATE=${K8S_DATE:-1970-01-01T00:00:00Z}
K8S_LDFLAGS="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	K8S_LDFLAGS+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$K8S_MINOR"
	K8S_LDFLAGS+=" -X $p.gitTreeState=clean -X $p.gitCommit= -X $p.buildDate=$K8S_DATE"
done
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
	build "$c" "$WRAPPERS/kubernetes" "k8s.io/kubernetes/cmd/$c" -ldflags "$K8S_LDFLAGS"
done
wait "$side" || die "etcd or kwok failed to build (output above)"

# Sanity: every binary runs and reports the pinned version. Its whole
# output is read first: `--version | grep -q` under pipefail failed a good
# build when grep stopped reading at the first line and etcd, still
# writing, died of SIGPIPE.
v=$("$BINDIR/kube-apiserver" --version 2>&1) && [[ $v == *"$K8S_VERSION"* ]] ||
	die "kube-apiserver --version does not report $K8S_VERSION: $v"
v=$("$BINDIR/etcd" --version 2>&1) && [[ $v == *"${ETCD_VERSION#v}"* ]] ||
	die "etcd --version does not report $ETCD_VERSION: $v"

printf '%s\n' "$WANT" >"$STAMP"
say "all ${#BINS[@]} binaries built in $((SECONDS - START_ALL))s into $BINDIR"
