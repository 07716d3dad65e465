# bmcfence — build, test, demo.
#
#   make demo    the main job on an embedded default: a local control plane,
#                mock BMCs and the agent; a node fails and you watch failover
#   make test    everything CI runs: vet, gofmt, race tests (incl. the real
#                control plane e2e), the 100000-scenario simulation
#   make build   bin/kubectl-fence (+ bin/bmcfence-cli), bin/redfish-mock, bin/fence-agent,
#                bin/bmc-watchdog
#   make bench   Go benchmarks and the comparison with the Debian fence agents
#   make image   bin/bmcfence-image.tar: the OCI image (no Docker needed) and
#                bin/bmcfence-image.cdx.json, its CycloneDX SBOM
#   make helm    bin/tools/helm, built from its pinned Go module
#   make chart   helm lint and helm template of charts/bmcfence
#   make codegen deep-copy, CRDs and typed clients from api/ (pinned
#                generators in hack/codegen); make test checks they are current
#   make dashboard  the chart's Grafana dashboard from its declared panels
#                (hack/dashboard); make test checks it is current
#   make scale   the scale harness (test/scale): 1000 nodes on the real
#                control plane; SCALE_ARGS='-nodes=300 -steady=2m' to shrink
#   make mutants every safety rule disabled in turn: sim-mutants (each
#                caught by the simulation: "mutants: K of M killed"), then
#                unit-mutants (each makes its own tests fail: "unit
#                mutants: K of M killed")
#   make failures the failure matrix (test/failures): one line per way a
#                node dies, on the real control plane (~40 min on 2 cores);
#                FAILURES_ARGS='-classes=powerloss,zone -runs=2' to choose

SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The commit's time, not the clock's: the same commit builds the same
# binaries, and so the same image digest (SOURCE_DATE_EPOCH overrides).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
DATE    ?= $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
PKG     := github.com/bmcfence/bmcfence/internal/version
LDFLAGS := -s -w -X $(PKG).Version=$(VERSION) -X $(PKG).Commit=$(COMMIT) -X $(PKG).Date=$(DATE)

COMMANDS := kubectl-fence redfish-mock fence-agent bmc-watchdog

.PHONY: all build test vet fmt-check unit sim mutants sim-mutants unit-mutants e2e-bins bench demo clean image helm chart codegen nhc scale dashboard failures

all: build

# bin/kubectl-fence is built with -tags bmcfast: the bmc commands only,
# nothing of Kubernetes, so `kubectl fence bmc status` starts in a few
# milliseconds; for every other command it runs bin/bmcfence-cli, the whole
# CLI from the same package. Install the two together.
build:
	@mkdir -p $(BIN)
	@for c in $(COMMANDS); do \
		if [ -d cmd/$$c ]; then \
			tags=; \
			if [ $$c = kubectl-fence ]; then tags=bmcfast; fi; \
			echo "build: bin/$$c"; \
			CGO_ENABLED=0 $(GO) build -trimpath -tags "$$tags" -ldflags '$(LDFLAGS)' -o $(BIN)/$$c ./cmd/$$c || exit 1; \
		fi; \
	done
	@echo "build: bin/bmcfence-cli"
	@CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/bmcfence-cli ./cmd/kubectl-fence
	@# kubectl (1.26+) completes `kubectl fence <TAB>` through this script,
	@# found on PATH beside kubectl-fence.
	@install -m 0755 cmd/kubectl-fence/kubectl_complete-fence $(BIN)/kubectl_complete-fence

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The e2e control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) built from pinned Go modules into bin/e2e.
# ~10 minutes the first time; a version stamp makes later runs instant.
e2e-bins:
	@hack/e2e-bins.sh $(BIN)/e2e

unit:
	$(GO) test -race -count=1 -timeout 30m ./...

# The randomized simulation at full size (the race run above does a sample).
sim:
	@set -o pipefail; $(GO) test -count=1 -run 'TestSimulation$$' -v ./fence/fencesim/ | grep -E '^(simulation:|--- |ok|FAIL|\s+sim_test)'

# The mutation test without the 100000 scenarios before it: a build per
# safety check (fence.Checks) with that check disabled, run until the
# simulation finds its first violation. One line per mutant, then
# "mutants: K of M killed".
sim-mutants:
	@set -o pipefail; $(GO) test -count=1 -timeout 60m -run 'TestSimulation$$' -v ./fence/fencesim/ -args -mutants-only | grep -E '^(\s+mutant |mutants:|--- FAIL|FAIL)'

# The unit mutants (internal/mutant): each rule outside the simulation's
# reach (redaction, merged-policy validation, request authorization,
# mixed-version refusal, the metrics token cache) switched off in turn; the
# tests of its packages must fail. Prints "unit mutants: K of M killed".
unit-mutants:
	@$(GO) run ./hack/unitmutants

mutants: sim-mutants unit-mutants

# hack/test.sh runs vet and fmt-check itself, after it has started
# the control plane's build in the background.
test:
	@BIN=$(BIN) GO=$(GO) MAKE=$(MAKE) hack/test.sh

# The scale harness: never part of `make test` (build tag scale). Prints one
# "scale:" line per scenario and fails when a target does not hold. Needs
# the control plane in bin/e2e (`make e2e-bins`).
SCALE_ARGS ?= -nodes=1000 -groups=10 -steady=10m
scale:
	@set -o pipefail; nice $(GO) test -tags scale -count=1 -timeout 180m -run TestScale -v ./test/scale/ -args $(SCALE_ARGS) | grep -E '^(scale:|--- |ok|FAIL|\s+[A-Za-z0-9_]+\.go:[0-9]+:)'

# The failure matrix: never part of `make test` (build tag failures). Prints
# one "failure:" line per class (test/failures says how each is modelled).
# Needs the control plane in bin/e2e (`make e2e-bins`).
FAILURES_ARGS ?=
failures:
	@set -o pipefail; nice $(GO) test -tags failures -count=1 -timeout 100m -run TestFailures -v ./test/failures/ -args $(FAILURES_ARGS) | grep -E '^(failures?:|--- |ok|FAIL|\s+failures_test)'

# P1: whole-process `kubectl-fence bmc status` against the Debian fence
# agents' status on the same BMC, beside the floors (a process, Go's and
# Python's start, kubectl-fence --version) in rotating rounds; it fails only
# on what the code controls (time above the runtime's start, requests to
# the BMC), never on how slowly the machine starts a process.
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./fence/ ./bmc/redfishmock/ ./bmc/dial/
	$(GO) run ./hack/benchcompare -bin $(BIN) -rounds 30

demo: build
	@hack/demo.sh

# The image: fence-agent, kubectl-fence and bmcfence-cli on an empty base, user 65532, no
# shell, OCI labels and an SBOM; written by go-containerregistry (pinned in
# hack/mkimage/go.mod), so no Docker engine is needed.
IMAGE_REPO ?= ghcr.io/bmcfence/bmcfence
image: build
	cd hack/mkimage && CGO_ENABLED=0 $(GO) run . -bin $(BIN) -out $(BIN)/bmcfence-image.tar \
		-repo $(IMAGE_REPO) -version $(VERSION) -revision $(shell git rev-parse HEAD 2>/dev/null || echo unknown) -created $(DATE)

# helm, from its pinned Go module (hack/helm.sh), cached in bin/tools.
helm:
	@hack/helm.sh $(BIN)/tools

# The chart's static checks (make test runs them too).
chart: helm
	$(BIN)/tools/helm lint --strict charts/bmcfence
	$(BIN)/tools/helm template bmcfence charts/bmcfence --namespace bmcfence-system >/dev/null

codegen:
	@hack/codegen.sh

dashboard:
	cd hack/dashboard && $(GO) run .

# NodeHealthCheck v0.12.0's manager for the e2e (bin/tools/nhc), from its
# wrapper module test/k8sbins/nhc; ~11 minutes cold.
nhc:
	@hack/nhc.sh $(BIN)/tools/nhc

clean:
	rm -rf $(BIN)
