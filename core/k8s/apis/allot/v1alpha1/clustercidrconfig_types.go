package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterCIDRConfig gives nodes whose labels match spec.nodeSelector their pod CIDRs
// (Node.spec.podCIDRs) from spec.ipv4/ipv6.cidr in blocks of perNodeMaskSize (Google
// Distributed Cloud's ClusterCIDRConfig). When several configs match a node the node-labels
// policy picks the best by five tie-break rules, and the next best when the best is full.
// Configs may overlap; a block handed out of one is used in all. The spec is immutable.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ccc,categories=allot
// +kubebuilder:printcolumn:name="V4 CIDR",type=string,JSONPath=`.spec.ipv4.cidr`
// +kubebuilder:printcolumn:name="V4 MASK",type=integer,JSONPath=`.spec.ipv4.perNodeMaskSize`
// +kubebuilder:printcolumn:name="V6 CIDR",type=string,JSONPath=`.spec.ipv6.cidr`
// +kubebuilder:printcolumn:name="V6 MASK",type=integer,JSONPath=`.spec.ipv6.perNodeMaskSize`
// +kubebuilder:printcolumn:name="ALLOCATED",type=integer,JSONPath=`.status.allocatedBlocks`,description="nodes served by this config"
// +kubebuilder:printcolumn:name="TOTAL",type=integer,JSONPath=`.status.totalBlocks`,description="per-node blocks the config holds"
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterCIDRConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterCIDRConfigSpec   `json:"spec"`
	Status ClusterCIDRConfigStatus `json:"status,omitempty"`
}

// ClusterCIDRConfigSpec is the config.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: create a new ClusterCIDRConfig instead"
// +kubebuilder:validation:XValidation:rule="has(self.ipv4) || has(self.ipv6)",message="at least one of spec.ipv4 and spec.ipv6 must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || (isCIDR(self.ipv4.cidr) && cidr(self.ipv4.cidr).ip().family() == 4)",message="spec.ipv4.cidr must be an IPv4 CIDR such as 10.0.0.0/16",fieldPath=".ipv4.cidr"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6) || (isCIDR(self.ipv6.cidr) && cidr(self.ipv6.cidr).ip().family() == 6)",message="spec.ipv6.cidr must be an IPv6 CIDR such as fd00::/104",fieldPath=".ipv6.cidr"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || !isCIDR(self.ipv4.cidr) || cidr(self.ipv4.cidr) == cidr(self.ipv4.cidr).masked()",message="spec.ipv4.cidr has host bits set; write the network address",fieldPath=".ipv4.cidr"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6) || !isCIDR(self.ipv6.cidr) || cidr(self.ipv6.cidr) == cidr(self.ipv6.cidr).masked()",message="spec.ipv6.cidr has host bits set; write the network address",fieldPath=".ipv6.cidr"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || (self.ipv4.perNodeMaskSize <= 32 && (!isCIDR(self.ipv4.cidr) || cidr(self.ipv4.cidr).prefixLength() <= self.ipv4.perNodeMaskSize))",message="spec.ipv4.perNodeMaskSize must be between the CIDR's prefix length and 32",fieldPath=".ipv4.perNodeMaskSize"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6) || !isCIDR(self.ipv6.cidr) || cidr(self.ipv6.cidr).prefixLength() <= self.ipv6.perNodeMaskSize",message="spec.ipv6.perNodeMaskSize must be between the CIDR's prefix length and 128",fieldPath=".ipv6.perNodeMaskSize"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || !has(self.ipv6) || 32 - self.ipv4.perNodeMaskSize == 128 - self.ipv6.perNodeMaskSize",message="dual stack needs the same number of addresses per node in both families: 32 - spec.ipv4.perNodeMaskSize must equal 128 - spec.ipv6.perNodeMaskSize (e.g. 24 and 120)",fieldPath=".ipv6.perNodeMaskSize"
type ClusterCIDRConfigSpec struct {
	// NodeSelector selects the nodes this config serves; empty or absent selects all nodes.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// IPv4 is the IPv4 CIDR and per-node block size.
	// +optional
	IPv4 *CIDRBlockSpec `json:"ipv4,omitempty"`
	// IPv6 is the IPv6 CIDR and per-node block size.
	// +optional
	IPv6 *CIDRBlockSpec `json:"ipv6,omitempty"`
}

// CIDRBlockSpec is one family of a ClusterCIDRConfig.
type CIDRBlockSpec struct {
	// CIDR the nodes' blocks are carved from. With the operator's cluster pod CIDR set
	// (cluster.podCIDRs, Google Distributed Cloud's clusterNetwork.pods.cidrBlocks) and a CIDR
	// of this family in it, the CIDR must lie inside one of them.
	// +kubebuilder:validation:MaxLength=43
	CIDR string `json:"cidr"`
	// PerNodeMaskSize is the prefix length of each node's block.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	PerNodeMaskSize int32 `json:"perNodeMaskSize"`
	// Reserved are addresses of the CIDR no node's block may overlap ("a" or "a-b",
	// inclusive; or a CIDR), for addresses used outside the cluster (routers, a load
	// balancer's range). A block overlapping any of them is never handed out; the operator
	// counts totalBlocks without them. Each entry must lie inside the CIDR.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=90
	Reserved []string `json:"reserved,omitempty"`
}

// ClusterCIDRConfigStatus is the config as the operator sees it.
type ClusterCIDRConfigStatus struct {
	// AllocatedBlocks is the number of nodes holding a block of this config.
	// +optional
	AllocatedBlocks int64 `json:"allocatedBlocks,omitempty"`
	// TotalBlocks is the number of per-node blocks the config holds (the smaller family's
	// count for dual stack; saturating).
	// +optional
	TotalBlocks int64 `json:"totalBlocks,omitempty"`
	// Conditions: Ready (False with reason Invalid, OutsideClusterPodCIDR or StackMismatch:
	// the config serves no node, the message names the field), Exhausted, DeletionRefused.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterCIDRConfigList is a list of ClusterCIDRConfigs.
//
// +kubebuilder:object:root=true
type ClusterCIDRConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterCIDRConfig `json:"items"`
}
