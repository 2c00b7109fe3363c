# allot: build, run, test, benchmark.
#
#   make run      start allotd on the embedded default (conf/allotd.yaml); needs root
#   make test     everything CI runs: lint, unit, integration, end to end (installs its tools)
#   make bench    benchmark tables (allocator, store, daemon API, CNI path vs host-local)
#
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
export ALLOT_CACHE ?= $(HOME)/.cache/allot
STATICCHECK_VERSION ?= v0.8.2
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/allot-ipam/allot/core/daemon.Version=$(VERSION) -X main.version=$(VERSION)
GOTEST_FLAGS ?= -count=1 -timeout 30m

.PHONY: all build run test test-short test-unit test-sdk lint deps plugins bench bench-go clean help

all: build

help:
	@sed -n 's/^#   //p' Makefile

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/allotd ./cmd/allot-cni ./cmd/allotctl

run: build
	$(BIN)/allotd --config conf/allotd.yaml

# deps: Debian packages the tests use (only what is missing is installed).
deps:
	@bash hack/install-deps.sh $(DATAPATH_APT_PACKAGES) $(REALNODE_APT_PACKAGES)

test: deps cni-tools kube-binaries helm lint test-unit test-sdk plugins

test-short:
	$(GO) test -short ./...

# The chart tests (test/chart) find helm through ALLOT_HELM (make helm installs it); the
# real-node tests (test/install) install the image make image built.
test-unit: build image
	ALLOT_HELM=$$(bash hack/install-helm.sh) ALLOT_IMAGE_TAR=$(IMAGE_TAR) $(GO) test $(GOTEST_FLAGS) -race ./...

test-sdk:
	cd sdk && $(GO) test $(GOTEST_FLAGS) -race ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^vendor/')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd sdk && $(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd sdk && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

plugins:
	@if [ -f plugin-examples/Makefile ]; then $(MAKE) --no-print-directory -C plugin-examples all test; fi

bench: build bench-go bench-cni

bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./core/allocator/ ./core/store/ ./core/daemon/ | tee $(ALLOT_CACHE)/bench-go.txt | grep -E '^(Benchmark|goos|cpu)' | column -t

clean:
	rm -rf $(BIN)

-include mk/*.mk
