package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPPool is a cluster-wide pool of pod addresses. In multi-pool mode the operator hands it to
// nodes in per-node blocks of spec.ipv4/ipv6.maskSize carved from the family's CIDRs (like
// Cilium's CiliumPodIPPool). The selection fields (default, disable, affinities) are read by
// the pool policies that choose a pod's pool (Spiderpool style).
//
// CIDRs may be added at any time. A CIDR some node still holds a block of cannot be removed,
// and a pool some node still holds a block of cannot be deleted: the admission policy in
// deploy/crds refuses the change (status.inUseCIDRs), and the operator's finalizer and
// conditions back that up.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ipp,categories=allot
// +kubebuilder:printcolumn:name="V4 CIDRS",type=string,JSONPath=`.spec.ipv4.cidrs`
// +kubebuilder:printcolumn:name="V4 USED",type=integer,JSONPath=`.status.ipv4.allocatedBlocks`,description="IPv4 blocks handed to nodes"
// +kubebuilder:printcolumn:name="V4 TOTAL",type=integer,JSONPath=`.status.ipv4.totalBlocks`,description="IPv4 blocks the pool can hand out"
// +kubebuilder:printcolumn:name="V6 CIDRS",type=string,JSONPath=`.spec.ipv6.cidrs`
// +kubebuilder:printcolumn:name="V6 USED",type=integer,JSONPath=`.status.ipv6.allocatedBlocks`,description="IPv6 blocks handed to nodes"
// +kubebuilder:printcolumn:name="V6 TOTAL",type=integer,JSONPath=`.status.ipv6.totalBlocks`,description="IPv6 blocks the pool can hand out"
// +kubebuilder:printcolumn:name="IPS IN USE",type=integer,JSONPath=`.status.usedAddresses`,description="addresses pods use, as the agents report",priority=1
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type IPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IPPoolSpec   `json:"spec"`
	Status IPPoolStatus `json:"status,omitempty"`
}

// IPPoolSpec is the desired pool.
//
// +kubebuilder:validation:XValidation:rule="has(self.ipv4) || has(self.ipv6)",message="at least one of spec.ipv4 and spec.ipv6 must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || self.ipv4.cidrs.all(c, isCIDR(c) && cidr(c).ip().family() == 4)",message="spec.ipv4.cidrs: every entry must be an IPv4 CIDR such as 10.0.0.0/16",fieldPath=".ipv4.cidrs"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6) || self.ipv6.cidrs.all(c, isCIDR(c) && cidr(c).ip().family() == 6)",message="spec.ipv6.cidrs: every entry must be an IPv6 CIDR such as fd00::/104",fieldPath=".ipv6.cidrs"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || self.ipv4.cidrs.all(c, !isCIDR(c) || cidr(c) == cidr(c).masked())",message="spec.ipv4.cidrs: an entry has host bits set; write the network address (10.0.0.0/16, not 10.0.0.1/16)",fieldPath=".ipv4.cidrs"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6) || self.ipv6.cidrs.all(c, !isCIDR(c) || cidr(c) == cidr(c).masked())",message="spec.ipv6.cidrs: an entry has host bits set; write the network address (fd00::/104, not fd00::1/104)",fieldPath=".ipv6.cidrs"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || self.ipv4.maskSize <= 32",message="spec.ipv4.maskSize must be at most 32",fieldPath=".ipv4.maskSize"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || self.ipv4.cidrs.all(c, !isCIDR(c) || cidr(c).prefixLength() <= self.ipv4.maskSize)",message="spec.ipv4.maskSize must be at least the prefix length of every CIDR in spec.ipv4.cidrs",fieldPath=".ipv4.maskSize"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6) || self.ipv6.cidrs.all(c, !isCIDR(c) || cidr(c).prefixLength() <= self.ipv6.maskSize)",message="spec.ipv6.maskSize must be at least the prefix length of every CIDR in spec.ipv6.cidrs",fieldPath=".ipv6.maskSize"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || self.ipv4.cidrs.all(a, !isCIDR(a) || self.ipv4.cidrs.exists_one(b, isCIDR(b) && (cidr(a).containsCIDR(cidr(b)) || cidr(b).containsCIDR(cidr(a)))))",message="spec.ipv4.cidrs: entries must not overlap",fieldPath=".ipv4.cidrs"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6) || self.ipv6.cidrs.all(a, !isCIDR(a) || self.ipv6.cidrs.exists_one(b, isCIDR(b) && (cidr(a).containsCIDR(cidr(b)) || cidr(b).containsCIDR(cidr(a)))))",message="spec.ipv6.cidrs: entries must not overlap",fieldPath=".ipv6.cidrs"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.ipv4) || !has(self.ipv4) || self.ipv4.maskSize == oldSelf.ipv4.maskSize",message="spec.ipv4.maskSize is immutable (nodes hold blocks of the old size); create a new pool instead",fieldPath=".ipv4.maskSize"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.ipv6) || !has(self.ipv6) || self.ipv6.maskSize == oldSelf.ipv6.maskSize",message="spec.ipv6.maskSize is immutable (nodes hold blocks of the old size); create a new pool instead",fieldPath=".ipv6.maskSize"
// +kubebuilder:validation:XValidation:rule="!has(self.default) || !self.default",message="spec.default has no effect on an IPPool: in multi-pool mode pods reach a pool by name (the policy chain, e.g. ipam.cilium.io/ip-pool); Spiderpool's selection fields work on a SharedIPPool",fieldPath=".default"
// +kubebuilder:validation:XValidation:rule="!has(self.nodeName) || size(self.nodeName) == 0",message="spec.nodeName has no effect on an IPPool: in multi-pool mode pods reach a pool by name (the policy chain, e.g. ipam.cilium.io/ip-pool); Spiderpool's selection fields work on a SharedIPPool",fieldPath=".nodeName"
// +kubebuilder:validation:XValidation:rule="!has(self.nodeAffinity)",message="spec.nodeAffinity has no effect on an IPPool: in multi-pool mode pods reach a pool by name (the policy chain, e.g. ipam.cilium.io/ip-pool); Spiderpool's selection fields work on a SharedIPPool",fieldPath=".nodeAffinity"
// +kubebuilder:validation:XValidation:rule="!has(self.namespaceName) || size(self.namespaceName) == 0",message="spec.namespaceName has no effect on an IPPool: in multi-pool mode pods reach a pool by name (the policy chain, e.g. ipam.cilium.io/ip-pool); Spiderpool's selection fields work on a SharedIPPool",fieldPath=".namespaceName"
// +kubebuilder:validation:XValidation:rule="!has(self.multusName) || size(self.multusName) == 0",message="spec.multusName has no effect on an IPPool: in multi-pool mode pods reach a pool by name (the policy chain, e.g. ipam.cilium.io/ip-pool); Spiderpool's selection fields work on a SharedIPPool",fieldPath=".multusName"
type IPPoolSpec struct {
	// IPv4 holds the pool's IPv4 CIDRs and per-node block size.
	// +optional
	IPv4 *PoolFamily `json:"ipv4,omitempty"`
	// IPv6 holds the pool's IPv6 CIDRs and per-node block size.
	// +optional
	IPv6 *PoolFamily `json:"ipv6,omitempty"`

	// PoolSelection holds the fields the pool policies read (default, disable, affinities).
	PoolSelection `json:",inline"`
}

// PoolFamily is one address family of a pool.
//
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !isIP(self.gateway) || self.cidrs.exists(c, isCIDR(c) && cidr(c).containsIP(self.gateway))",message="gateway must lie inside one of cidrs",fieldPath=".gateway"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !isIP(self.gateway) || !self.cidrs.exists(c, isCIDR(c) && cidr(c).ip() == ip(self.gateway))",message="gateway must not be the network address of a CIDR",fieldPath=".gateway"
// +kubebuilder:validation:XValidation:rule="has(self.gateway) == has(oldSelf.gateway) && (!has(self.gateway) || self.gateway == oldSelf.gateway)",message="gateway is immutable (the node block holding it reserves it); create a new pool instead",fieldPath=".gateway"
type PoolFamily struct {
	// CIDRs the pool hands blocks out of. CIDRs may be added at run time; a CIDR some node
	// holds a block of cannot be removed.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=43
	CIDRs []string `json:"cidrs"`
	// MaskSize is the prefix length of every per-node block (immutable).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	MaskSize int32 `json:"maskSize"`
	// Gateway, when set, is the router of the family's network (Spiderpool's pool
	// `gateway`): pods get it as their gateway and default route instead of their block's
	// first usable address, and their address with the prefix length of the pool CIDR that
	// holds it (the gateway is on-link). It must lie inside one of CIDRs and be neither its
	// network nor its broadcast address; it is never handed to a pod. Immutable once set
	// (the block holding it reserves it).
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Gateway string `json:"gateway,omitempty"`
	// Routes are extra routes pods of this family get (Spiderpool's pool `routes`); a route
	// without gw goes via the pod's gateway (Gateway, else the block's).
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Routes []RouteSpec `json:"routes,omitempty"`
}

// IPPoolStatus is the pool as the operator sees it.
type IPPoolStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// IPv4 is the IPv4 block usage.
	// +optional
	IPv4 *PoolFamilyStatus `json:"ipv4,omitempty"`
	// IPv6 is the IPv6 block usage.
	// +optional
	IPv6 *PoolFamilyStatus `json:"ipv6,omitempty"`
	// UsedAddresses is the number of addresses pods use, summed over the nodes' reports
	// (AllotNode status.ipam.pools).
	// +optional
	UsedAddresses int64 `json:"usedAddresses,omitempty"`
	// InUseCIDRs are the pool's CIDRs (both families) some node holds a block of. The
	// admission policy refuses an update that removes one of them from the spec.
	// +optional
	// +listType=set
	InUseCIDRs []string `json:"inUseCIDRs,omitempty"`
	// Conditions: Ready, Exhausted, CIDRRemovalRefused, DeletionRefused, CIDROverlap.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PoolFamilyStatus is the block usage of one family.
type PoolFamilyStatus struct {
	// TotalBlocks is the number of blocks the family's CIDRs hold (saturating).
	TotalBlocks int64 `json:"totalBlocks"`
	// AllocatedBlocks is the number of blocks handed to nodes.
	AllocatedBlocks int64 `json:"allocatedBlocks"`
}

// IPPoolList is a list of IPPools.
//
// +kubebuilder:object:root=true
type IPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPPool `json:"items"`
}
