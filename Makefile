# Switchboard build, generation and test entry points. `make help` lists them.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

CONTROLLER_GEN ?= go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
# Helm is built from the Go module proxy, pinned by hack/tools/helm, into bin/helm once.
HELM ?= hack/helm.sh

# Envtest binaries (kube-apiserver, etcd, kubectl) are built from source into bin/k8s by
# hack/envtest-assets.sh; envtest and the kubectl specs find them here.
ENVTEST_ASSETS := $(CURDIR)/bin/k8s
export KUBEBUILDER_ASSETS := $(ENVTEST_ASSETS)

GO_TEST_FLAGS ?= -count=1
# The runtime packages are concurrent at heart and run under the race detector; the
# Kubernetes-facing packages (envtest suites — including runtime/auth/kubeauth's, which
# pulls in k8s.io/apiserver — and the binary's end-to-end tests) run without it, because
# race-instrumenting the whole Kubernetes dependency tree doubles a cold CI build. The
# registry they share with the runtime is covered under -race in routing; kubeauth keeps
# no state of its own beyond what k8s.io/apiserver's authenticator and authorizer hold.
# RACE_PKGS is expanded only when used, as `go list` takes a moment.
RACE_PKGS = $(filter-out %/runtime/auth/kubeauth,$(shell go list ./runtime/... ./hack/...))
PLAIN_PKGS := ./api/... ./controllers/... ./cmd/... ./runtime/auth/kubeauth/...

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Generation

.PHONY: generate
generate: ## Generate deepcopy code and the execution-request JSON Schema.
	$(CONTROLLER_GEN) object paths="./api/..."
	go run ./hack/genschema

.PHONY: manifests
manifests: ## Generate CRDs and RBAC into config/ and copy them into charts/switchboard (with its values table).
	$(CONTROLLER_GEN) crd rbac:roleName=switchboard-manager paths="./api/..." paths="./controllers/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	go run ./hack/chartgen

.PHONY: verify
verify: generate manifests ## Regenerate everything and fail if the tree changed.
	@if [ -n "$$(git status --porcelain -- api config spec charts)" ]; then \
		echo "generated files are out of date; run 'make generate manifests' and commit:"; \
		git status --porcelain -- api config spec charts; git diff --stat -- api config spec charts; exit 1; \
	fi

##@ Build

# What `switchboard --version` and the image labels report (runtime/version): the latest
# v* tag (v0.0.0-dev before the first), the commit, and the commit's time as the build
# date, so that two builds of one commit are identical. The image tag drops the v, as the
# chart's appVersion does.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo v0.0.0-dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILD_DATE ?= $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -r $(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := github.com/switchboard-dev/switchboard/runtime/version
LDFLAGS = -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).date=$(BUILD_DATE)
IMG ?= ghcr.io/switchboard-dev/switchboard:$(patsubst v%,%,$(VERSION))
# PLATFORMS are the images `make image` builds, e.g. linux/amd64,linux/arm64.
PLATFORMS ?= linux/amd64
# The image builder is a module of its own (go-containerregistry stays out of the binary's
# dependencies): `make vet lint test` cover it separately. Its test runs without -race: it
# is sequential, and the race detector makes compressing and hashing the ~70 MiB layer
# eight times slower (160 s instead of 20 s).
IMAGE_TOOL := hack/tools/image

.PHONY: build
build: ## Build the switchboard binary into bin/.
	go build -ldflags "$(LDFLAGS)" -o bin/switchboard ./cmd/switchboard

.PHONY: image
image: ## Build the image IMG without a container engine: OCI layout bin/image/oci, docker-archive bin/image/switchboard.tar.
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) go run -C $(IMAGE_TOOL) . -source $(CURDIR) -out $(CURDIR)/bin/image \
		-platforms $(PLATFORMS) -image $(IMG) -version $(VERSION) -commit $(COMMIT)

CONTAINER_TOOL ?= docker

.PHONY: docker-build
docker-build: ## Build the same image IMG from the Dockerfile with CONTAINER_TOOL.
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) \
		--build-arg BUILD_DATE=$(BUILD_DATE) --build-arg SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) -t $(IMG) .

.PHONY: demo
demo: ## First run: standalone switchboard + demo provider, executions on five wire formats and one call through each front door, with curl.
	hack/demo.sh

.PHONY: run
run: ## Run switchboard against the current kubeconfig.
	go run ./cmd/switchboard

.PHONY: helm
helm: ## Build the pinned helm into bin/ (once; cached).
	$(HELM)

# CHART_DIR receives the rendered chart: default.yaml and production.yaml, CRDs included.
CHART_DIR ?= bin/chart

.PHONY: chart-template
chart-template: ## Render charts/switchboard with its default and production values into CHART_DIR.
	@mkdir -p $(CHART_DIR)
	$(HELM) template switchboard charts/switchboard -n switchboard-system --include-crds > $(CHART_DIR)/default.yaml
	$(HELM) template switchboard charts/switchboard -n switchboard-system --include-crds \
		-f charts/switchboard/ci/production-values.yaml > $(CHART_DIR)/production.yaml

.PHONY: sdk-deps
sdk-deps: test/sdk/node_modules/.package-lock.json ## Install the official Node SDKs the front-door tests drive (npm ci from test/sdk's lockfile; once).

test/sdk/node_modules/.package-lock.json: test/sdk/package.json test/sdk/package-lock.json
	npm ci --prefix test/sdk --no-audit --no-fund

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver, etcd and kubectl for envtest (once; cached in bin/k8s).
	hack/envtest-assets.sh $(ENVTEST_ASSETS)

##@ Test

.PHONY: vet
vet: ## Run go vet.
	go vet ./...
	go vet -C $(IMAGE_TOOL) ./...

.PHONY: lint
lint: ## Run golangci-lint (.golangci.yml) and dupl across the adapters; the pinned linter is built into bin/ once.
	hack/lint.sh config verify
	hack/lint.sh run $(LINT_FLAGS) ./...
	hack/dupl.sh runtime/providers
	cd $(IMAGE_TOOL) && $(CURDIR)/bin/golangci-lint run $(LINT_FLAGS) ./...

# FUZZ_TIME bounds each fuzz target `make fuzz` runs (its seed corpus also runs in every
# plain `go test`). It is a number of inputs (about 10-20 s each here) rather than a
# duration: with a duration, Go 1.26's fuzzing coordinator can fail a target that found
# nothing ("context deadline exceeded" just past the time, no input written), a race
# fixed in Go 1.27 (go.dev/issue/75804). A count sets no deadline to race.
FUZZ_TIME ?= 80000x

.PHONY: test
test: verify vet lint envtest-assets helm sdk-deps ## Run every test (unit, envtest, end to end, bounded fuzzing) after make verify and lint.
	go test -race $(GO_TEST_FLAGS) $(RACE_PKGS)
	go test $(GO_TEST_FLAGS) $(PLAIN_PKGS)
	go test $(GO_TEST_FLAGS) -run 'Allocations$$|^TestIdleStreamStack$$' ./runtime/httpapi ./runtime/protocol ./runtime/compat/openai
	go test -C $(IMAGE_TOOL) $(GO_TEST_FLAGS) ./...
	$(MAKE) --no-print-directory fuzz

.PHONY: fuzz
fuzz: ## Fuzz the submission path (POST /v1/executions), the hand-written JSON decoding and encoding of events, the tokens-file parser and the front doors' request decoders, FUZZ_TIME each.
	go test -run '^$$' -fuzz '^FuzzSubmit$$' -fuzztime $(FUZZ_TIME) ./runtime/httpapi
	go test -run '^$$' -fuzz '^FuzzDecodePlain$$' -fuzztime $(FUZZ_TIME) ./runtime/protocol
	go test -run '^$$' -fuzz '^FuzzAppendDelta$$' -fuzztime $(FUZZ_TIME) ./runtime/protocol
	go test -run '^$$' -fuzz '^FuzzParseTokens$$' -fuzztime $(FUZZ_TIME) ./runtime/auth
	go test -run '^$$' -fuzz '^FuzzChatCompletionsRequest$$' -fuzztime $(FUZZ_TIME) ./runtime/compat/openai
	go test -run '^$$' -fuzz '^FuzzResponsesRequest$$' -fuzztime $(FUZZ_TIME) ./runtime/compat/openai
	go test -run '^$$' -fuzz '^FuzzMessagesRequest$$' -fuzztime $(FUZZ_TIME) ./runtime/compat/anthropic

.PHONY: bench
bench: envtest-assets ## Run the benchmarks.
	go test -run '^$$' -bench . -benchmem ./...

##@ Benchmarks

# End-to-end benchmarks of the built binary (hack/bench/README.md). Each builds switchboard,
# the demo provider and the baseline relay from this tree into a temporary folder, unless
# BENCH_FLAGS names binaries: BENCH_FLAGS='-switchboard /tmp/base/switchboard' measures a
# switchboard built from another commit with the same client. They are not part of
# `make test`.
BENCH_FLAGS ?=
# BENCH_REDIS_URL is the Redis of bench-throughput's redis EventStore and of bench-overhead's
# redis run. Nothing is flushed; the runtime's keys expire after the benchmark's -retention
# (10m), the bench Budget's counters after their month.
BENCH_REDIS_URL ?= redis://127.0.0.1:6379/15
# BENCH_POSTGRES_URL is the PostgreSQL of bench-throughput's postgres EventStore. Its database
# must be named sb_bench…: the bench drops and creates it around the round, and skips the round
# (saying so) when no server answers.
BENCH_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/sb_bench
# BENCH_BUDGET=false leaves bench-overhead's native+budget side out (a binary without
# Budgets, given in BENCH_FLAGS); BENCH_OVERHEAD_REDIS=false skips its redis run.
BENCH_BUDGET ?= true
BENCH_OVERHEAD_REDIS ?= true
# bench_redis_hostport is BENCH_REDIS_URL's host:port, for the check that Redis listens.
bench_redis_hostport = $(firstword $(subst /, ,$(lastword $(subst @, ,$(patsubst rediss://%,%,$(patsubst redis://%,%,$(BENCH_REDIS_URL)))))))

.PHONY: bench-overhead
bench-overhead: ## Latency a call through the runtime (native path, with a Budget, OpenAI front door) and through the baseline relay adds to a direct provider call; CPU and RSS. Memory store, then Redis.
	go run ./hack/bench overhead -budget=$(BENCH_BUDGET) -event-store memory $(BENCH_FLAGS)
	@if [ "$(BENCH_OVERHEAD_REDIS)" = false ]; then \
		echo "bench-overhead: redis run skipped (BENCH_OVERHEAD_REDIS=false)"; \
	elif ! timeout 2 bash -c 'exec 3<>/dev/tcp/$(subst :,/,$(bench_redis_hostport))' 2>/dev/null; then \
		echo "bench-overhead: nothing listens at $(bench_redis_hostport) (BENCH_REDIS_URL): memory store only, no redis run"; \
	else \
		echo; echo "bench-overhead: the same run on the redis EventStore at $(BENCH_REDIS_URL)"; \
		go run ./hack/bench overhead -budget=$(BENCH_BUDGET) -event-store redis -redis-url $(BENCH_REDIS_URL) $(BENCH_FLAGS); \
	fi

.PHONY: bench-fanout
bench-fanout: ## One execution's events streamed to 1, 100 and 1000 subscribers: lag and memory per subscriber.
	go run ./hack/bench fanout $(BENCH_FLAGS)

.PHONY: bench-throughput
bench-throughput: ## Executions per second accepted and completed, CPU per execution of the runtime and the store's server: the baseline relay, then the memory, redis and postgres EventStores.
	go run ./hack/bench throughput -redis-url $(BENCH_REDIS_URL) -postgres-url $(BENCH_POSTGRES_URL) $(BENCH_FLAGS)

.PHONY: bench-e2e
bench-e2e: ## Run bench-overhead, bench-fanout and bench-throughput, one after the other.
	$(MAKE) --no-print-directory bench-overhead
	$(MAKE) --no-print-directory bench-fanout
	$(MAKE) --no-print-directory bench-throughput
