# trainyard developer entry points. `make help` lists them.
SHELL := /usr/bin/env bash
BIN := $(CURDIR)/bin/k8s
CONTROLLER_GEN := $(BIN)/controller-gen
export KUBEBUILDER_ASSETS := $(BIN)
export TRAINYARD_SLURM_ROOT ?= $(CURDIR)/bin/slurm-root
GO_TEST_FLAGS ?= -count=1
# Integration suites start real control planes and Slurm: one package at a
# time keeps peak memory and CPU within a 2-core machine.
INTEGRATION_FLAGS ?= -count=1 -p 1 -timeout 30m

.PHONY: help
help: ## Show this help.
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-18s %s\n",$$1,$$2}'

##@ Build

.PHONY: build
build: ## Build trainyard's binaries into bin/.
	go build -o bin/ ./cmd/...

.PHONY: tools
tools: ## Build the control-plane binaries, Kueue, JobSet, LeaderWorkerSet, kwok, controller-gen, helm and kustomize (cached).
	hack/build-tools.sh

# One build of the chroot at a time: a second build-root.sh takes a running build's temp
# dir for an interrupted build's and removes it. The lock is taken here, not in the script,
# because the chroot's cache key is the script's hash. Once the chroot is built it is free.
SLURM_CACHE := $(or $(TRAINYARD_CACHE),$(HOME)/.cache/trainyard)/slurm

.PHONY: slurm-root
slurm-root: ## Build the Debian trixie chroot with Slurm 24.11 (cached).
	@mkdir -p "$(SLURM_CACHE)"
	@flock -n "$(SLURM_CACHE)/build.lock" true || echo "[slurm-root] waiting for another process's build"
	flock "$(SLURM_CACHE)/build.lock" hack/slurm/build-root.sh

.PHONY: dev-up
dev-up: tools slurm-root ## Start the local sandbox (hub + Kueue, 2 kwok spokes, 2 Slurm clusters: bare and OCI containers); Ctrl-C stops it.
	go run ./cmd/trainyard dev up

##@ Code generation

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code and CRD manifests.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=trainyard-hub paths=./hub/... output:rbac:artifacts:config=config/rbac/hub
	$(MAKE) --no-print-directory charts

HUB_CHART := charts/trainyard-hub

.PHONY: charts
charts: ## Copy the generated CRDs and hub role into the hub chart (test/integration/charts fails when they differ).
	rm -f $(HUB_CHART)/crds/*.yaml
	cp config/crd/bases/*.yaml $(HUB_CHART)/crds/
	cp config/rbac/hub/role.yaml $(HUB_CHART)/files/hub-role.yaml

$(CONTROLLER_GEN):
	hack/build-tools.sh controller-gen

##@ Test

.PHONY: fmt
fmt: ## Check formatting.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## go vet.
	go vet ./...

.PHONY: unit
unit: ## Unit tests (no control planes).
	go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v /test/)

.PHONY: integration
integration: tools slurm-root ## Integration tests against real control planes, Kueue, JobSet and Slurm.
	go test $(INTEGRATION_FLAGS) ./test/...

.PHONY: conformance
conformance: tools slurm-root ## Kubeflow's shipped runtimes, applied unchanged, against a JobSet, an LWS and a Slurm target: prints the matrix.
	set -o pipefail; go test $(INTEGRATION_FLAGS) -v -run TestShippedRuntimesOnEveryTarget ./test/integration/conformance/ | grep -v '^=== RUN'

.PHONY: chaos
chaos: tools slurm-root ## SIGKILL chaos suite alone, verbose (part of make test): hub and agents as processes killed at random during a burst of 100 TrainJobs (TRAINYARD_CHAOS_SEED repeats one).
	go test $(INTEGRATION_FLAGS) -v ./test/integration/chaos/

.PHONY: test
test: fmt vet unit integration ## Everything CI runs: format, vet, unit and integration tests.

# BENCH picks the benchmarks of `make bench` by name (a go test -bench
# regexp), e.g. BENCH=SideBySide or BENCH=Scale.
BENCH ?= .

.PHONY: bench
bench: tools ## One table: 200 TrainJobs vs 200 raw jobs on Kubernetes spokes and on Slurm (ratios); fill under a backlog of 10 s jobs against raw submissions on Slurm and on a 16-GPU kwok spoke (BENCH=Fill prints `fill: slurm <ratio>` and `fill: kubernetes <ratio>`, start latency p50/p95 per backend, and cost rows: hub API requests per job by verb and resource from the hub API server's /metrics, CPU s/job of trainyard and of the hub control plane); hub p99s with 2,000 finished Dispatches cached; 1,000 jobs side by side with Kueue's MultiKueue (1 hub + 3 spokes, with hub API requests per job for both); 10,000 waiting TrainJobs with the hub as a process (RSS, fan-out, decisions/s). BENCH=regexp picks benches.
	nice go test -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 150m ./test/bench/
