# Helm chart (deploy/helm/allot), plain manifests (deploy/manifests) and the AWS IAM policy
# (deploy/aws); included by the root Makefile. Tests: test/chart.
#
#   make helm            install the pinned helm (hack/install-helm.sh) into $(ALLOT_CACHE)
#   make chart-check     helm lint --strict with every example, every rendering decoded into
#                        typed objects, allotd's loader on the rendered configs, drift of the
#                        CRD copies, the manifests and the IAM policy; then helm install of every
#                        example into a real API server and the RBAC check with the real agent
#                        and operator (test/k8senv: needs `make kube-binaries`)
#   make chart-sync      copy deploy/crds into the chart (after `make generate-crds`)
#   make manifests       regenerate deploy/manifests/allot.yaml from the chart

CHART_DIR := deploy/helm/allot
CHART_TEST_FLAGS ?= -count=1 -timeout 20m

.PHONY: helm chart-check chart-sync manifests

helm:
	@bash hack/install-helm.sh >/dev/null

chart-check: helm
	ALLOT_HELM=$$(bash hack/install-helm.sh) $(GO) test $(CHART_TEST_FLAGS) ./test/chart/

chart-sync:
	rm -f $(CHART_DIR)/crds/allot.io_*.yaml
	cp deploy/crds/allot.io_*.yaml $(CHART_DIR)/crds/
	cp deploy/crds/admission_ippool_in_use.yaml $(CHART_DIR)/files/

manifests: helm
	ALLOT_HELM=$$(bash hack/install-helm.sh) ALLOT_UPDATE_MANIFESTS=1 $(GO) test -count=1 -run '^TestManifestsUpToDate$$' ./test/chart/
