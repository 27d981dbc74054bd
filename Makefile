# Ichor's front door. `make run` starts the whole local management plane;
# `make test` runs every test against real control-plane components; `make unit` is the fast inner loop.

GO            ?= go
BIN           := bin
CONTROLPLANE  := bash hack/build-controlplane.sh
TALOSCTL      := bash hack/build-talosctl.sh
SEAWEEDFS     := bash hack/build-seaweedfs.sh
CHROMIUM      := bash hack/install-chromium.sh
RUNC          := bash hack/install-runc.sh
HELM          := bash hack/build-helm.sh
# Per-test-binary timeout; the slowest package starts a whole control plane.
TEST_TIMEOUT  ?= 30m
# Flags of `make bench` (go run ./test/bench/cmd/ichor-bench -h), e.g. BENCH_FLAGS=-list-sizes=1000,5000
BENCH_FLAGS   ?=

.PHONY: all build controlplane docs manifests verify-manifests images push licenses verify-docs unit integration test test-ha test-ha-full bench verify verify-codegen verify-no-binaries codegen fmt vet run clean

all: build

build: ## Build ichor-apiserver, ichor-controller, ichor-auth, ichor-ui, the ichor CLI (also as kubectl-ichor) and the local runner into bin/.
	$(GO) build -o $(BIN)/ichor-apiserver ./cmd/ichor-apiserver
	$(GO) build -o $(BIN)/ichor-controller ./cmd/ichor-controller
	$(GO) build -o $(BIN)/ichor-auth ./cmd/ichor-auth
	$(GO) build -o $(BIN)/ichor-ui ./cmd/ichor-ui
	$(GO) build -o $(BIN)/ichor ./cmd/ichor
	ln -sf ichor $(BIN)/kubectl-ichor
	$(GO) build -o $(BIN)/ichor-local ./test/cmd/ichor-local

controlplane: ## Build (or reuse) kube-apiserver, kube-controller-manager, kubectl and etcd from source.
	@$(CONTROLPLANE) >/dev/null

# The packages whose tests need an external binary (the control plane, talosctl, SeaweedFS,
# Chromium), each starting a control plane of its own, and the image build (every command for two
# platforms, twice).
INTEGRATION_PKGS := ./test/integration/... ./test/talossim/... ./test/talosgen/... ./test/bench/... ./hack/images/...
# Every other package: the fast inner loop.
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e /test/integration/ -e /test/talossim -e /test/talosgen -e /test/bench -e /hack/images)
# How many test binaries run at once. The integration packages mostly wait on simulated nodes and
# timers, so more of them than cores keeps both cores busy.
TEST_PARALLEL ?= 8
# Runs its command with the external binaries built or found in the cache, named in the environment.
WITH_BINARIES = bin="$$($(CONTROLPLANE))" && tbin="$$($(TALOSCTL))" && sbin="$$($(SEAWEEDFS))" && chromium="$$($(CHROMIUM))" && \
	runc="$$($(RUNC))" && hbin="$$($(HELM))" && \
	ICHOR_CONTROLPLANE_BIN="$$bin" ICHOR_TALOSCTL_BIN="$$tbin" ICHOR_SEAWEEDFS_BIN="$$sbin" ICHOR_CHROMIUM="$$chromium" ICHOR_RUNC="$$runc" \
	ICHOR_HELM_BIN="$$hbin"

unit: ## The tests that need no external binary, with -race; unchanged packages' results come from Go's test cache.
	$(GO) test -race $(UNIT_PKGS)

integration: ## The tests against real control-plane components, simulated Talos nodes, S3, Chromium and the HA shape.
	$(WITH_BINARIES) bash hack/run-tests.sh $(GO) test -race -count=1 -p $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) $(INTEGRATION_PKGS)

test: ## Every test (unit and integration, the HA faults included) with -race, side by side, as CI runs them; on failure, repeat the failures' lines at the end.
	$(WITH_BINARIES) bash hack/run-tests.sh $(GO) test -race -count=1 -p $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) $(INTEGRATION_PKGS) $(UNIT_PKGS)

test-ha: ## The fault tests on the HA shape (two ichor-apiservers on a 3-member etcd, two controllers), each fault under a short load.
	$(WITH_BINARIES) ICHOR_TEST_LOG=make-test-ha bash hack/run-tests.sh $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -v ./test/integration/ha

test-ha-full: ## The HA fault tests with each fault under ten times the load.
	ICHOR_HA_FULL=1 $(MAKE) test-ha

bench: ## Measure ichor.dev against the same schema served as CRDs; table on stdout, JSON in .local/bench/.
	$(GO) build -o $(BIN)/ichor-apiserver ./cmd/ichor-apiserver
	bin="$$($(CONTROLPLANE))" && ICHOR_CONTROLPLANE_BIN="$$bin" $(GO) run ./test/bench/cmd/ichor-bench -ichor-apiserver $(BIN)/ichor-apiserver $(BENCH_FLAGS)

images: ## Build every component's OCI image (amd64, arm64, with SBOMs) into .local/images: an OCI layout and one archive each.
	$(GO) run ./hack/images

push: ## Build the images and push them, with their SBOMs, to REGISTRY (host[:port][/path]), with your Docker credentials.
	@test -n "$(REGISTRY)" || { echo "make push REGISTRY=host[:port][/path]" >&2; exit 2; }
	$(GO) run ./hack/images -push $(REGISTRY)

licenses: ## List the licence of every module Ichor's commands link; fails on one Apache-2.0 distribution does not allow.
	$(GO) run ./hack/licenses

verify: verify-no-binaries verify-codegen verify-docs verify-manifests fmt vet ## Check generated code and docs, formatting, vet, and that no binary is tracked.

verify-no-binaries:
	bash hack/verify-no-binaries.sh

verify-codegen:
	bash hack/verify-codegen.sh

docs: ## Regenerate the reference pages under docs/reference from the code's tables.
	$(GO) run ./hack/docgen

verify-docs:
	$(GO) run ./hack/docgen -check

manifests: ## Render artifacts/ from the Helm chart charts/ichor (helm template with its ci/ values files).
	$(GO) run ./hack/manifests

verify-manifests:
	$(GO) run ./hack/manifests -check

codegen: ## Regenerate deepcopy, conversions, defaults, protobuf, OpenAPI, clientset, listers, informers and the benchmark's CRDs.
	bash hack/update-codegen.sh

fmt:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

run: build ## Start the whole management plane locally (and simulated machines, an OpenID provider, an S3 backup target); writes .local/kubeconfig.
	@mkdir -p .local
	bin="$$($(CONTROLPLANE))" && sbin="$$($(SEAWEEDFS))" && ICHOR_CONTROLPLANE_BIN="$$bin" ICHOR_SEAWEEDFS_BIN="$$sbin" exec $(BIN)/ichor-local

clean:
	rm -rf $(BIN) .local
