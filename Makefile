# allot: build, run, test, benchmark.
#
#   make run      start allotd on the embedded default (conf/allotd.yaml); needs root
#   make test     everything CI runs: lint, unit, integration, end to end (installs its tools);
#                 a test that cannot run here fails instead of skipping; ends with a summary
#   make generate regenerate every generated file (protobuf, CRDs, eBPF); verify-generated checks
#   make bench    benchmark tables (allocator, store, daemon API, CNI path vs host-local, datapaths,
#                 go-plugin call vs gRPC echo)
#
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
export ALLOT_CACHE ?= $(HOME)/.cache/allot
STATICCHECK_VERSION ?= v0.8.2
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/allot-ipam/allot/core/daemon.Version=$(VERSION) -X main.version=$(VERSION)
GOTEST_FLAGS ?= -count=1 -timeout 30m

# make test's suites run through hack/testsummary: go test's usual output, the events saved in
# $(TEST_RESULTS), and at the end one table of every package, skip and failure.
TEST_RESULTS := $(BIN)/test-results
TESTSUMMARY := $(BIN)/testsummary
# GOTEST_JSON is `go test -json` through testsummary, saving the events under the target's name.
GOTEST_JSON = $(TESTSUMMARY) -save $(TEST_RESULTS)/$@.jsonl -- $(GO) test -json

.PHONY: all build run test test-short test-unit test-realnode test-sdk lint deps plugins testsummary bench bench-go bench-goplugin clean help

all: build

help:
	@sed -n 's/^#   //p' Makefile

# allot-cni is built static (CGO_ENABLED=0, as in the image): it is exec'd for every CNI call,
# and loading the dynamic linker and libc cost about 1 ms of each (make bench-cni).
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/allotd ./cmd/allotctl
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/allot-cni

run: build
	$(BIN)/allotd --config conf/allotd.yaml

# deps: Debian packages the tests use (only what is missing is installed).
deps:
	@bash hack/install-deps.sh $(DATAPATH_APT_PACKAGES) $(REALNODE_APT_PACKAGES)

# Under make test (and CI, which sets CI=true) a test that cannot run here (no root, a missing
# tool) fails with the reason instead of skipping (internal/testenv), and testsummary fails on
# any skip. -k runs every suite even after a failure, so the table covers them all; the fuzz
# targets (test-fuzz: make fuzz-smoke through testsummary) are one of them.
test: export ALLOT_NO_SKIP := 1
test: deps cni-tools kube-binaries helm lint verify-generated testsummary
	@rm -rf $(TEST_RESULTS)
	@status=0; $(MAKE) --no-print-directory -k test-unit test-sdk plugins test-fuzz test-realnode || status=1; \
		$(TESTSUMMARY) -report $(TEST_RESULTS)/*.jsonl || status=1; exit $$status

test-short:
	$(GO) test -short ./...

# The chart tests (test/chart) find helm through ALLOT_HELM (make helm installs it). The
# real-node suites run on their own (test-realnode): a kubelet and 50 pods on two cores
# should not share them with the rest of the tests.
REALNODE_PKGS := ./test/realnode/... ./test/install/...
test-unit: build testsummary
	@rm -f $(TEST_RESULTS)/$@.jsonl
	ALLOT_HELM=$$(bash hack/install-helm.sh) $(GOTEST_JSON) $(GOTEST_FLAGS) -race \
		$$($(GO) list ./... | grep -v -e /test/realnode -e /test/install)

# The real-node tests install the image make image built, one package at a time (one
# cluster per machine), without -race (they drive real processes; nothing to race here).
test-realnode: build image testsummary
	@rm -f $(TEST_RESULTS)/$@.jsonl
	ALLOT_HELM=$$(bash hack/install-helm.sh) ALLOT_IMAGE_TAR=$(IMAGE_TAR) ALLOT_KUBE_DIR=$$(bash hack/build-kube.sh) \
		$(GOTEST_JSON) -count=1 -timeout 40m -p 1 $(REALNODE_PKGS)

test-sdk: testsummary
	@rm -f $(TEST_RESULTS)/$@.jsonl
	cd sdk && $(GOTEST_JSON) $(GOTEST_FLAGS) -race ./...

testsummary:
	@$(GO) build -o $(TESTSUMMARY) ./hack/testsummary

# generate: every generated file. generate-proto: the Go code of every .proto (plugin
# contracts, local API) with the protoc plugins pinned in hack/gen-proto.sh; mk/k8s.mk adds
# deepcopy and CRDs (then copied into the chart), mk/datapath.mk the eBPF objects. Each
# installs what it needs (Debian packages, pinned Go tools). verify-generated (in make test)
# fails when generate changes a file.
.PHONY: generate-proto verify-generated
generate: generate-proto generate-crds
	@$(MAKE) --no-print-directory chart-sync >/dev/null
generate-proto:
	@bash hack/gen-proto.sh

verify-generated:
	@bash hack/verify-generated.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^vendor/')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@bash hack/check-sleeps.sh
	$(GO) vet ./...
	cd sdk && $(GO) vet ./...
	$(GO) test -count=1 ./internal/funclen/
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd sdk && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

plugins: testsummary
	@rm -f $(TEST_RESULTS)/$@.jsonl
	@if [ -f plugin-examples/Makefile ]; then $(MAKE) --no-print-directory -C plugin-examples all test GOTEST='$(GOTEST_JSON)'; fi

bench: build bench-go bench-cni bench-datapath bench-goplugin bench-scale

bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./core/allocator/ ./core/store/ ./core/daemon/ | tee $(ALLOT_CACHE)/bench-go.txt | grep -E '^(Benchmark|goos|cpu)' | column -t
	$(GO) test -run '^$$' -bench 'WASMPolicyDecision$$|GuestCodec' -benchmem -count=6 ./core/pluginhost/wasm/ | tee $(ALLOT_CACHE)/bench-wasm.txt | grep -E '^(Benchmark|goos|cpu)' | column -t
	$(GO) test -run '^$$' -bench 'APIAllocate/(durable|durable-nowait|nosync)/framed$$' -benchtime 2s -count=6 ./core/daemon/ | tee $(ALLOT_CACHE)/bench-durable.txt | grep -E '^(Benchmark|goos|cpu)' | column -t

# A go-plugin pool-policy call against a bare gRPC echo over the same transport, alternating in one run; policy/echo-* are the ratios.
bench-goplugin:
	$(GO) test -run '^$$' -bench 'ProcessPolicyVsEcho' -benchtime 2s -count 6 ./core/pluginhost/process/ | tee $(ALLOT_CACHE)/bench-goplugin.txt | grep -E '^Benchmark'

clean:
	rm -rf $(BIN)

-include mk/*.mk
