package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AllotSubnet is every address an application team may use in one network, with its gateway
// and routes (Spiderpool's SpiderSubnet, https://spidernet-io.github.io/spiderpool/ "SpiderSubnet").
// The platform team creates it; application teams do not write pools. A workload whose pod
// template carries the annotation ipam.spidernet.io/subnet (or .../subnets) gets a
// SharedIPPool of its own cut from the subnet by the operator: sized by
// ipam.spidernet.io/ippool-ip-number, resized with the workload's replicas without moving the
// addresses it keeps, and reclaimed when the workload is deleted unless
// ipam.spidernet.io/ippool-reclaim is "false".
//
// Which addresses went to which pool is recorded in status.allocations. Every cut is a write of
// the status with the subnet's resourceVersion, so two operators (or two workloads reconciled
// at once) never cut overlapping ranges: the second write fails and is redone on the new
// status.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=asub,categories=allot
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name: at most 63 characters (it is the allot.io/subnet label value of the pools cut from the subnet)"
// +kubebuilder:printcolumn:name="V4 SUBNET",type=string,JSONPath=`.spec.ipv4.subnet`
// +kubebuilder:printcolumn:name="V4 ALLOCATED",type=integer,JSONPath=`.status.ipv4.allocatedIPs`
// +kubebuilder:printcolumn:name="V4 TOTAL",type=integer,JSONPath=`.status.ipv4.totalIPs`
// +kubebuilder:printcolumn:name="V6 SUBNET",type=string,JSONPath=`.spec.ipv6.subnet`
// +kubebuilder:printcolumn:name="V6 ALLOCATED",type=integer,JSONPath=`.status.ipv6.allocatedIPs`
// +kubebuilder:printcolumn:name="V6 TOTAL",type=integer,JSONPath=`.status.ipv6.totalIPs`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type AllotSubnet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AllotSubnetSpec   `json:"spec"`
	Status AllotSubnetStatus `json:"status,omitempty"`
}

// AllotSubnetSpec is the desired subnet.
//
// +kubebuilder:validation:XValidation:rule="has(self.ipv4) || has(self.ipv6)",message="at least one of spec.ipv4 and spec.ipv6 must be set"
// +kubebuilder:validation:XValidation:rule="has(self.ipv4) == has(oldSelf.ipv4) && has(self.ipv6) == has(oldSelf.ipv6)",message="the subnet's families are immutable (spec.ipv4 / spec.ipv6 cannot be added or removed); create a new subnet instead"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || cidr(self.ipv4.subnet).ip().family() == 4",message="spec.ipv4.subnet must be an IPv4 subnet",fieldPath=".ipv4.subnet"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6) || cidr(self.ipv6.subnet).ip().family() == 6",message="spec.ipv6.subnet must be an IPv6 subnet",fieldPath=".ipv6.subnet"
type AllotSubnetSpec struct {
	// IPv4 is the subnet's IPv4 side.
	// +optional
	IPv4 *SubnetFamily `json:"ipv4,omitempty"`
	// IPv6 is the subnet's IPv6 side.
	// +optional
	IPv6 *SubnetFamily `json:"ipv6,omitempty"`
}

// SubnetFamily is one family of a subnet: the pools cut from it get its subnet, gateway and
// routes, and addresses out of IPs minus ExcludeIPs.
//
// +kubebuilder:validation:XValidation:rule="self.subnet == oldSelf.subnet",message="subnet is immutable (pools were cut from it); create a new subnet instead",fieldPath=".subnet"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || cidr(self.subnet).containsIP(self.gateway)",message="gateway must lie inside subnet",fieldPath=".gateway"
type SubnetFamily struct {
	// Subnet is the network, e.g. 172.18.0.0/16. Immutable.
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self) == cidr(self).masked()",message="must be a subnet in CIDR form with no host bits, such as 172.18.0.0/16"
	Subnet string `json:"subnet"`
	// IPs are the addresses pools may be cut from: single addresses or inclusive ranges
	// ("172.18.0.10-172.18.0.200"), all inside Subnet.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=91
	IPs []string `json:"ips"`
	// ExcludeIPs are addresses (or ranges) of IPs that no pool gets.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=91
	ExcludeIPs []string `json:"excludeIPs,omitempty"`
	// Gateway is the default gateway of the pools cut from the subnet (omitted: none). It is
	// never handed to a pool.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Gateway string `json:"gateway,omitempty"`
	// Routes are the extra routes of the pools cut from the subnet.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Routes []RouteSpec `json:"routes,omitempty"`
}

// AllotSubnetStatus is the subnet as the operator sees it: what it holds, and which pool was
// given which addresses (the record the operator cuts new pools against).
type AllotSubnetStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// IPv4 is the IPv4 usage.
	// +optional
	IPv4 *SubnetFamilyStatus `json:"ipv4,omitempty"`
	// IPv6 is the IPv6 usage.
	// +optional
	IPv6 *SubnetFamilyStatus `json:"ipv6,omitempty"`
	// Allocations are the addresses given to each pool cut from the subnet. An entry outlives
	// its pool until the pool is gone from the API server (its last claim freed), so its
	// addresses are never given to another pool while a pod may hold them.
	// +optional
	// +listType=map
	// +listMapKey=pool
	Allocations []SubnetAllocation `json:"allocations,omitempty"`
	// Conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SubnetFamilyStatus is one family's address count.
type SubnetFamilyStatus struct {
	// TotalIPs is the number of addresses pools may be cut from (ips minus excludeIPs minus
	// the gateway and the subnet's network and broadcast addresses), saturating.
	TotalIPs int64 `json:"totalIPs"`
	// AllocatedIPs is the number of those given to pools.
	AllocatedIPs int64 `json:"allocatedIPs"`
}

// SubnetAllocation is the part of a subnet one pool holds.
type SubnetAllocation struct {
	// Pool is the SharedIPPool's name.
	Pool string `json:"pool"`
	// Family is ipv4 or ipv6.
	// +kubebuilder:validation:Enum=ipv4;ipv6
	Family string `json:"family"`
	// Application is the workload the pool was cut for: Kind/namespace/name.
	// +optional
	Application string `json:"application,omitempty"`
	// Interface is the pod interface the pool serves.
	// +optional
	Interface string `json:"interface,omitempty"`
	// IPs are the pool's addresses, as ranges.
	// +listType=atomic
	IPs []string `json:"ips"`
}

// AllotSubnetList is a list of AllotSubnets.
//
// +kubebuilder:object:root=true
type AllotSubnetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AllotSubnet `json:"items"`
}

// Auto pools (SpiderSubnet): the labels and annotations the operator puts on the SharedIPPools
// it cuts from an AllotSubnet for a workload.
const (
	// LabelSubnet names the AllotSubnet a SharedIPPool was cut from; the spiderpool-priority
	// policy matches the pod annotations ipam.spidernet.io/subnet(s) against it.
	LabelSubnet = "allot.io/subnet"
	// LabelAutoPool marks a pool the operator made for a workload ("true"): only those are
	// resized and reclaimed by it.
	LabelAutoPool = "allot.io/auto-pool"
	// AnnotationAutoPoolApp is the workload an auto pool belongs to: Kind/namespace/name.
	AnnotationAutoPoolApp = "allot.io/auto-pool-application"
	// AnnotationAutoPoolAppUID is that workload's UID when the pool was last fitted to it.
	AnnotationAutoPoolAppUID = "allot.io/auto-pool-application-uid"
	// AnnotationAutoPoolInterface is the pod interface an auto pool serves.
	AnnotationAutoPoolInterface = "allot.io/auto-pool-interface"
	// AnnotationAutoPoolReclaim is Spiderpool's ipam.spidernet.io/ippool-reclaim of the
	// workload, as last seen: "false" keeps the pool after the workload is deleted.
	AnnotationAutoPoolReclaim = "ipam.spidernet.io/ippool-reclaim"
)
