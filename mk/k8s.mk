# Kubernetes mode: CRDs, kube binaries for the API-server tests, operator benchmark.
#
#   make generate-crds    regenerate deepcopy and deploy/crds from core/k8s/apis (controller-gen)
#   make kube-binaries    build (or reuse) kube-apiserver and etcd into $(ALLOT_CACHE)
#   make bench-operator   1,000 AllotNodes (multi-pool) and 1,000 Nodes (ClusterCIDRConfig) on a real API server
#   make bench-shared     1,000 pods on 10 simulated nodes from one shared pool (1,000 and 2,000 addresses)
#   make bench-scale      5,000 simulated nodes (real agents as goroutines) and the operator on one API server

CONTROLLER_GEN_VERSION ?= v0.21.0
CONTROLLER_GEN := $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

.PHONY: generate-crds kube-binaries bench-operator bench-shared bench-scale

generate-crds:
	$(CONTROLLER_GEN) object crd paths=./core/k8s/apis/... output:crd:dir=./deploy/crds

# The harness (test/k8senv) finds the binaries via ALLOT_KUBE_DIR, else the default cache dir.
kube-binaries:
	@bash hack/build-kube.sh

bench-operator: kube-binaries
	ALLOT_KUBE_DIR=$$(bash hack/build-kube.sh) $(GO) test -run '^$$' -bench 'BenchmarkConverge' -benchtime=1x -count=1 -timeout 20m ./core/operator/ | tee $(ALLOT_CACHE)/bench-operator.txt

# Shared pools: prints a table (time until every pod has an address, API requests
# per pod, conflicts retried, duplicates).
bench-shared: kube-binaries
	ALLOT_KUBE_DIR=$$(bash hack/build-kube.sh) $(GO) test -run '^$$' -bench 'BenchmarkSharedPool' -benchtime=1x -count=1 -timeout 20m ./core/sharedpool/ \
		| grep -v '^        [IWE][0-9]' | tee $(ALLOT_CACHE)/bench-shared.txt

# Scale (test/scale): prints a table (time until every node holds its blocks, against the goal
# of 60 s; API requests per node per minute in steady state; memory of the operator and per
# agent). ALLOT_SCALE_NODES (default 5000) and ALLOT_SCALE_WINDOW (default 1m) change the run.
bench-scale: kube-binaries
	ALLOT_KUBE_DIR=$$(bash hack/build-kube.sh) $(GO) test -run '^$$' -bench 'BenchmarkScale' -benchtime=1x -count=1 -timeout 40m ./test/scale/ \
		| tee $(ALLOT_CACHE)/bench-scale.txt
