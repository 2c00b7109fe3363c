// Package chart tests what deploy/ ships: the Helm chart deploy/helm/allot (lint, rendering of
// every example into typed objects, allotd's own validation of the configuration files it
// renders, installation into a real API server, and the RBAC rules exercised by the real agent
// and operator), the plain manifests in deploy/manifests, and the IAM policy in deploy/aws.
//
// Helm comes from hack/install-helm.sh (or $ALLOT_HELM); the API server from test/k8senv.
package chart
