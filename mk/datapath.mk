# Datapath (masquerade) targets; included by the root Makefile.
#
#   make generate         rebuild bpf/snat_bpfel.{go,o} from bpf/snat.c (needs clang, llvm, libbpf-dev)
#   make test-datapath    unit tests + the namespace suite (root; otherwise skips with the reason, or fails under CI)
#   make bench-datapath   none vs iptables vs ebpf through pod -> node -> external namespaces (root, iperf3):
#                         medians and ebpf/iptables ratios of TCP, UDP 64B and conn/s, and the
#                         eBPF programs' cost per packet in place (part of `make bench`)
#
# Debian packages the datapath tests and benchmark need at run time; the
# generated eBPF object is committed, so clang is only needed for `generate`.
DATAPATH_APT_PACKAGES := iptables iperf3
DATAPATH_GEN_APT_PACKAGES := clang llvm libbpf-dev

DATAPATH_GO ?= go
DATAPATH_BENCH_FLAGS ?= -rounds 5 -duration 5s

.PHONY: generate generate-datapath test-datapath bench-datapath datapath-apt

# `generate` may gain prerequisites from other fragments; this one adds ours.
generate: generate-datapath

generate-datapath:
	@bash hack/install-deps.sh $(DATAPATH_GEN_APT_PACKAGES)
	cd bpf && $(DATAPATH_GO) generate ./...

test-datapath:
	cd sdk && $(DATAPATH_GO) test -count=1 ./datapath/...
	$(DATAPATH_GO) test -count=1 ./plugins/datapath/... ./test/datapath/...

bench-datapath:
	set -o pipefail; $(DATAPATH_GO) test -run XXX -bench . -benchtime 200000x ./plugins/datapath/ebpf/ | grep -E '^(Benchmark|cpu)'
	$(DATAPATH_GO) run ./test/datapath/cmd/dpbench $(DATAPATH_BENCH_FLAGS)

# Installs what the tests and benchmark need (CI runs as root).
datapath-apt:
	apt-get install -y --no-install-recommends $(DATAPATH_APT_PACKAGES)
