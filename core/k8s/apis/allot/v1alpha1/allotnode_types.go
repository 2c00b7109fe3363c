package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AllotNode is the per-node IPAM object (named like the Node, as CiliumNode is). The agent
// writes spec.ipam.pools.requested and removes blocks it released from
// spec.ipam.pools.allocated; the operator adds blocks to spec.ipam.pools.allocated. Both
// write with the object's resourceVersion, so neither overwrites the other.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=an,categories=allot
// +kubebuilder:printcolumn:name="POOLS",type=string,JSONPath=`.status.poolNames`,description="pools the node holds blocks of"
// +kubebuilder:printcolumn:name="BLOCKS",type=integer,JSONPath=`.status.allocatedBlocks`,description="blocks allocated to the node"
// +kubebuilder:printcolumn:name="ALLOCATED",type=string,JSONPath=`.spec.ipam.pools.allocated`,priority=1
// +kubebuilder:printcolumn:name="FULFILLED",type=string,JSONPath=`.status.conditions[?(@.type=="PoolsFulfilled")].status`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type AllotNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AllotNodeSpec   `json:"spec,omitempty"`
	Status AllotNodeStatus `json:"status,omitempty"`
}

// AllotNodeSpec holds the node's IPAM requests and allocations.
type AllotNodeSpec struct {
	// IPAM is the node's multi-pool IPAM state.
	// +optional
	IPAM NodeIPAMSpec `json:"ipam,omitempty"`
}

// NodeIPAMSpec is spec.ipam.
type NodeIPAMSpec struct {
	// Pools are the node's per-pool requests and allocations.
	// +optional
	Pools NodePools `json:"pools,omitempty"`
}

// NodePools is spec.ipam.pools.
type NodePools struct {
	// Requested is written by the agent: per pool, how many addresses per family the node
	// needs in total (neededIPs = roundUp(inUse + pending + preAlloc, preAlloc)).
	// +optional
	// +listType=map
	// +listMapKey=pool
	// +kubebuilder:validation:MaxItems=64
	Requested []PoolRequest `json:"requested,omitempty"`
	// Allocated is written by the operator (adds blocks) and the agent (removes blocks it
	// released and no longer uses).
	// +optional
	// +listType=map
	// +listMapKey=pool
	// +kubebuilder:validation:MaxItems=64
	Allocated []PoolAllocation `json:"allocated,omitempty"`
}

// PoolRequest is one pool's request.
type PoolRequest struct {
	// Pool names the IPPool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// Needed is the number of addresses per family the node needs from the pool.
	// +optional
	Needed AddressCounts `json:"needed,omitempty"`
}

// AddressCounts is a number of addresses per family.
type AddressCounts struct {
	// +optional
	// +kubebuilder:validation:Minimum=0
	IPv4 int64 `json:"ipv4,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	IPv6 int64 `json:"ipv6,omitempty"`
}

// PoolAllocation is the blocks the node holds from one pool.
type PoolAllocation struct {
	// Pool names the IPPool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// CIDRs are the node's blocks, both families.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c) && cidr(c) == cidr(c).masked())",message="every block must be a CIDR with no host bits set"
	CIDRs []string `json:"cidrs,omitempty"`
}

// AllotNodeStatus is the node's usage (agent) and the operator's view (conditions, summary).
type AllotNodeStatus struct {
	// IPAM is the agent's per-pool usage.
	// +optional
	IPAM NodeIPAMStatus `json:"ipam,omitempty"`
	// PoolNames lists the pools the node holds blocks of, comma-separated (operator; for
	// kubectl get).
	// +optional
	PoolNames string `json:"poolNames,omitempty"`
	// AllocatedBlocks is the number of blocks the node holds (operator).
	// +optional
	AllocatedBlocks int32 `json:"allocatedBlocks,omitempty"`
	// Conditions: PoolsFulfilled (operator).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeIPAMStatus is status.ipam.
type NodeIPAMStatus struct {
	// Pools is the usage per pool.
	// +optional
	// +listType=map
	// +listMapKey=pool
	Pools []PoolUsage `json:"pools,omitempty"`
}

// PoolUsage is the node's usage of one pool.
type PoolUsage struct {
	// Pool names the IPPool.
	Pool string `json:"pool"`
	// +optional
	IPv4 *FamilyUsage `json:"ipv4,omitempty"`
	// +optional
	IPv6 *FamilyUsage `json:"ipv6,omitempty"`
}

// FamilyUsage is the addresses of one family on the node.
type FamilyUsage struct {
	// Used is the number of addresses pods hold.
	Used int64 `json:"used"`
	// Available is the number of addresses in the node's blocks.
	Available int64 `json:"available"`
}

// AllotNodeList is a list of AllotNodes.
//
// +kubebuilder:object:root=true
type AllotNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AllotNode `json:"items"`
}
