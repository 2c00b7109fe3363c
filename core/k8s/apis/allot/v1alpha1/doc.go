// Package v1alpha1 holds allot's Kubernetes API types, group allot.io, version v1alpha1:
// IPPool (pools handed to nodes in per-node blocks, plus Spiderpool-style selection fields),
// AllotNode (per-node requests and allocations, like CiliumNode's spec.ipam.pools) and
// ClusterCIDRConfig (per-node pod CIDRs chosen by node labels).
//
// All kinds are cluster-scoped. The CRD manifests in deploy/crds are generated from these
// types by controller-gen (make generate-crds), together with zz_generated.deepcopy.go.
//
// +kubebuilder:object:generate=true
// +groupName=allot.io
package v1alpha1
