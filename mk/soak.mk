# Reliability: the chaos soak (test/soak) and the overload figures (test/overload); included
# by the root Makefile.
#
#   make soak       standalone and cluster soaks side by side, SOAK of chaos each (default 10m,
#                   e.g. SOAK=60s): allotd, agents and the operator leader SIGKILLed,
#                   kube-apiserver and etcd restarted, invariants checked all along; prints the
#                   figures (also in $(ALLOT_CACHE)/soak.txt). Needs `make kube-binaries`.
#   make overload   256 clients as allot-cni against allotd, a million requests, default and
#                   tight api limits; prints requests, errors by kind, latency, goroutines and
#                   heap before/after (also in $(ALLOT_CACHE)/overload.txt)
#
# make test soaks for SOAK_CI: its `go test ./...` (test-unit) runs test/soak with it.

SOAK ?= 10m
SOAK_CI ?= 60s
# A bound for the whole soak run (the tests bound themselves to SOAK plus a few minutes).
SOAK_TIMEOUT ?= 3h
OVERLOAD_REQUESTS ?= 1000000
OVERLOAD_CLIENTS ?= 256

.PHONY: soak overload

test-unit: export ALLOT_SOAK = $(SOAK_CI)

soak: kube-binaries
	@mkdir -p $(ALLOT_CACHE)
	set -o pipefail; ALLOT_KUBE_DIR=$$(bash hack/build-kube.sh) ALLOT_SOAK=$(SOAK) \
		$(GO) test -count=1 -v -timeout $(SOAK_TIMEOUT) -run '^TestSoak' ./test/soak/ | tee $(ALLOT_CACHE)/soak.txt

overload:
	@mkdir -p $(ALLOT_CACHE)
	set -o pipefail; ALLOT_OVERLOAD_REQUESTS=$(OVERLOAD_REQUESTS) ALLOT_OVERLOAD_CLIENTS=$(OVERLOAD_CLIENTS) \
		$(GO) test -run '^$$' -bench BenchmarkOverload -benchtime 1x -count 1 -timeout $(SOAK_TIMEOUT) ./test/overload/ \
		| tee $(ALLOT_CACHE)/overload.txt
