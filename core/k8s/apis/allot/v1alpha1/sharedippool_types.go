package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SharedIPPool is a pool whose addresses are handed out one by one to pods on any node
// (Spiderpool's SpiderIPPool): underlay networks, VLANs and fixed addresses, where a node
// cannot own a block. Who holds which address is recorded cluster-wide, one AddressClaim per
// address, so no lock is needed and no address is handed out twice.
//
// Each family has its own subnet, address ranges, exclusions, gateway and routes. The subnet
// and the set of families are immutable. Pools in different subnets must not overlap, and
// pools in one subnet must not share an address; the operator's admission webhook refuses
// such a change, and an address some pod holds cannot be removed from the pool.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=sipp,categories=allot
// +kubebuilder:printcolumn:name="V4 SUBNET",type=string,JSONPath=`.spec.ipv4.subnet`
// +kubebuilder:printcolumn:name="V4 USED",type=integer,JSONPath=`.status.ipv4.allocatedIPs`
// +kubebuilder:printcolumn:name="V4 TOTAL",type=integer,JSONPath=`.status.ipv4.totalIPs`
// +kubebuilder:printcolumn:name="V6 SUBNET",type=string,JSONPath=`.spec.ipv6.subnet`
// +kubebuilder:printcolumn:name="V6 USED",type=integer,JSONPath=`.status.ipv6.allocatedIPs`
// +kubebuilder:printcolumn:name="V6 TOTAL",type=integer,JSONPath=`.status.ipv6.totalIPs`
// +kubebuilder:printcolumn:name="DEFAULT",type=boolean,JSONPath=`.spec.default`
// +kubebuilder:printcolumn:name="DISABLE",type=boolean,JSONPath=`.spec.disable`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type SharedIPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SharedIPPoolSpec   `json:"spec"`
	Status SharedIPPoolStatus `json:"status,omitempty"`
}

// SharedIPPoolSpec is the desired shared pool.
//
// +kubebuilder:validation:XValidation:rule="has(self.ipv4) || has(self.ipv6)",message="at least one of spec.ipv4 and spec.ipv6 must be set"
// +kubebuilder:validation:XValidation:rule="has(self.ipv4) == has(oldSelf.ipv4) && has(self.ipv6) == has(oldSelf.ipv6)",message="the pool's families are immutable (spec.ipv4 / spec.ipv6 cannot be added or removed); create a new pool instead"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || cidr(self.ipv4.subnet).ip().family() == 4",message="spec.ipv4.subnet must be an IPv4 subnet",fieldPath=".ipv4.subnet"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6) || cidr(self.ipv6.subnet).ip().family() == 6",message="spec.ipv6.subnet must be an IPv6 subnet",fieldPath=".ipv6.subnet"
type SharedIPPoolSpec struct {
	// IPv4 is the pool's IPv4 side.
	// +optional
	IPv4 *SharedPoolFamily `json:"ipv4,omitempty"`
	// IPv6 is the pool's IPv6 side.
	// +optional
	IPv6 *SharedPoolFamily `json:"ipv6,omitempty"`

	// PoolSelection holds the fields the pool policy (spiderpool-priority) reads.
	PoolSelection `json:",inline"`
}

// PoolSelection are the Spiderpool selection fields of a pool: which pods, namespaces, nodes
// and Multus networks may use it, and whether it is a cluster default.
type PoolSelection struct {
	// Default marks a cluster default pool (used when nothing names a pool).
	// +optional
	Default bool `json:"default,omitempty"`
	// Disable stops the pool handing out new addresses; those in use stay.
	// +optional
	Disable bool `json:"disable,omitempty"`
	// NodeName limits the pool to these nodes (empty: any node).
	// +optional
	// +listType=set
	NodeName []string `json:"nodeName,omitempty"`
	// NodeAffinity limits the pool to nodes whose labels match.
	// +optional
	NodeAffinity *metav1.LabelSelector `json:"nodeAffinity,omitempty"`
	// NamespaceName limits the pool to pods of these namespaces (empty: any).
	// +optional
	// +listType=set
	NamespaceName []string `json:"namespaceName,omitempty"`
	// NamespaceAffinity limits the pool to pods of namespaces whose labels match.
	// +optional
	NamespaceAffinity *metav1.LabelSelector `json:"namespaceAffinity,omitempty"`
	// PodAffinity limits the pool to pods whose labels match.
	// +optional
	PodAffinity *metav1.LabelSelector `json:"podAffinity,omitempty"`
	// MultusName limits the pool to these Multus networks (namespace/name).
	// +optional
	// +listType=set
	MultusName []string `json:"multusName,omitempty"`
}

// SharedPoolFamily is one family of a shared pool.
//
// +kubebuilder:validation:XValidation:rule="self.subnet == oldSelf.subnet",message="subnet is immutable (addresses are held out of it); create a new pool instead",fieldPath=".subnet"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || cidr(self.subnet).containsIP(self.gateway)",message="gateway must lie inside subnet",fieldPath=".gateway"
type SharedPoolFamily struct {
	// Subnet is the network the addresses live in, e.g. 172.18.0.0/16; pods get their
	// address with this prefix length. Immutable.
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self) == cidr(self).masked()",message="must be a subnet in CIDR form with no host bits, such as 172.18.0.0/16"
	Subnet string `json:"subnet"`
	// IPs are the addresses the pool hands out: single addresses ("172.18.0.10") or
	// inclusive ranges ("172.18.0.10-172.18.0.200"), all inside Subnet.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=91
	IPs []string `json:"ips"`
	// ExcludeIPs are addresses (or ranges) of IPs that are never handed out.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=91
	ExcludeIPs []string `json:"excludeIPs,omitempty"`
	// Gateway is the default gateway pods of this pool get (omitted: none).
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Gateway string `json:"gateway,omitempty"`
	// Routes are extra routes pods of this pool get.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Routes []RouteSpec `json:"routes,omitempty"`
}

// RouteSpec is one route in a pod's CNI result.
type RouteSpec struct {
	// Dst is the destination in CIDR form.
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.96.0.0/12"
	Dst string `json:"dst"`
	// Gw is the next hop (omitted: the pool's gateway).
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Gw string `json:"gw,omitempty"`
}

// SharedIPPoolStatus is the pool as the operator sees it.
type SharedIPPoolStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// IPv4 is the IPv4 usage.
	// +optional
	IPv4 *SharedFamilyStatus `json:"ipv4,omitempty"`
	// IPv6 is the IPv6 usage.
	// +optional
	IPv6 *SharedFamilyStatus `json:"ipv6,omitempty"`
	// Conditions: Ready, Exhausted, AddressConflict, DeletionRefused.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SharedFamilyStatus is the address usage of one family.
type SharedFamilyStatus struct {
	// TotalIPs is the number of addresses the pool can hand out (ips minus excludeIPs minus
	// reserved addresses), saturating.
	TotalIPs int64 `json:"totalIPs"`
	// AllocatedIPs is the number of addresses held by pods (AddressClaims).
	AllocatedIPs int64 `json:"allocatedIPs"`
}

// SharedIPPoolList is a list of SharedIPPools.
//
// +kubebuilder:object:root=true
type SharedIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SharedIPPool `json:"items"`
}
