# mk/realnode.mk: allot's image and a real one-node cluster to install it on.
#
#   make image          bin/allot-image.tar: an OCI layout (ctr images import; crane push)
#   make cluster        a one-node cluster (kubelet, containerd, runc) with allot installed by its chart
#   make cluster-down   stop it and remove every trace
#   make bench-pods     pod create -> Running for 100 pods: allot vs bridge + host-local, one run

IMAGE_REPO ?= ghcr.io/allot-ipam/allot
IMAGE_TAG  ?= $(VERSION)
IMAGE_ARCH ?= amd64
IMAGE_TAR  ?= $(BIN)/allot-image.tar
# Debian packages the real-node cluster needs on the host (containerd 1.6, runc).
REALNODE_APT_PACKAGES := containerd runc
CLUSTER_DIR ?= /var/lib/allot-cluster

.PHONY: image cluster cluster-down bench-pods

# Reproducible: SOURCE_DATE_EPOCH is the commit's date, so one commit gives one digest.
image:
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) \
		$(GO) run ./hack/build-image -o $(IMAGE_TAR) -ref $(IMAGE_REPO):$(IMAGE_TAG) -arch $(IMAGE_ARCH) \
		-version $(VERSION) -cni-plugins-version $(CNI_PLUGINS_VERSION)

cluster: deps cni-tools kube-binaries helm image
	ALLOT_KUBE_DIR=$$(bash hack/build-kube.sh) $(GO) run ./hack/cluster up -dir $(CLUSTER_DIR) -image $(IMAGE_TAR) -helm $$(bash hack/install-helm.sh)

cluster-down:
	ALLOT_KUBE_DIR=$$(bash hack/build-kube.sh) $(GO) run ./hack/cluster down -dir $(CLUSTER_DIR)

bench-pods: deps cni-tools kube-binaries helm image
	ALLOT_HELM=$$(bash hack/install-helm.sh) ALLOT_IMAGE_TAR=$(IMAGE_TAR) ALLOT_KUBE_DIR=$$(bash hack/build-kube.sh) \
		$(GO) test -run '^$$' -bench BenchmarkPodStart -benchtime 1x -count 1 -timeout 40m ./test/install/ \
		| tee $(ALLOT_CACHE)/bench-pods.txt
