# mk/cni.mk: allot-cni's end-to-end tests and the CNI benchmark; included by the root Makefile.
#
#   make e2e         end-to-end tests with the real binaries, cnitool and the bridge plugin
#                    in network namespaces (root; otherwise skips with the reason, or fails under CI)
#   make bench-cni   1,000 ADDs then 1,000 DELs, 8 workers: allot-cni vs host-local and the floor
#                    (a trivial static binary exec'd the same way), 3 rounds in turn, a table of
#                    medians with the ratios;
#                    CNIBENCH_FLAGS=-nosync runs allotd without fsync to show fsync's share
#   make cni-tools   install the pinned CNI tools (hack/install-cni-tools.sh)

# Pinned CNI tool versions (cnitool comes from the cni repo, the plugins from plugins).
CNITOOL_VERSION     ?= v1.3.0
CNI_PLUGINS_VERSION ?= v1.9.1
CNI_TOOL_VERSIONS   := cnitool=$(CNITOOL_VERSION) plugins=$(CNI_PLUGINS_VERSION)

ALLOT_CACHE       ?= $(HOME)/.cache/allot
ALLOT_CNI_BIN_DIR ?= $(ALLOT_CACHE)/cni-$(CNI_PLUGINS_VERSION)
ALLOT_CNITOOL     ?= $(ALLOT_CACHE)/cni-tools/cnitool

CNIBENCH_N       ?= 1000
CNIBENCH_WORKERS ?= 8
# Rounds alternate allot-cni, host-local and the floor; the table shows medians.
CNIBENCH_ROUNDS  ?= 3
CNIBENCH_FLAGS   ?=
E2E_FLAGS        ?= -count=1 -timeout 15m
GO               ?= go

.PHONY: cni-tools e2e bench-cni

cni-tools:
	@ALLOT_CACHE="$(ALLOT_CACHE)" CNITOOL_VERSION=$(CNITOOL_VERSION) CNI_PLUGINS_VERSION=$(CNI_PLUGINS_VERSION) \
		hack/install-cni-tools.sh >/dev/null

e2e: cni-tools
	ALLOT_CNI_BIN_DIR="$(ALLOT_CNI_BIN_DIR)" ALLOT_CNITOOL="$(ALLOT_CNITOOL)" \
		$(GO) test $(E2E_FLAGS) -v ./test/e2e/

# With the root Makefile's build, the benchmark uses bin/allotd and bin/allot-cni as built
# (with LDFLAGS); alone, cnibench builds them itself.
bench-cni: cni-tools $(if $(BIN),build)
	$(GO) run ./test/cnibench -n $(CNIBENCH_N) -workers $(CNIBENCH_WORKERS) -rounds $(CNIBENCH_ROUNDS) \
		-host-local "$(ALLOT_CNI_BIN_DIR)/host-local" \
		$(if $(BIN),-allotd "$(BIN)/allotd" -allot-cni "$(BIN)/allot-cni") $(CNIBENCH_FLAGS)
