package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AllotNode is the per-node IPAM object (named like the Node, as CiliumNode is). The agent
// writes spec.ipam.pools.requested and removes blocks it released from
// spec.ipam.pools.allocated; the operator adds blocks to spec.ipam.pools.allocated. Both
// write with the object's resourceVersion, so neither overwrites the other.
//
// In ENI mode (cloud backend aws-eni or a cloud-backend plugin) the agent writes spec.eni
// (who the node is in the cloud, per-node overrides) and status.ipam.used/pending; the
// operator writes spec.ipam.pool (address -> ENI) and status.eni (the node's interfaces);
// both move entries of status.ipam.releaseIPs through the release handshake (core/eni),
// each only along its own transitions.
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
// +kubebuilder:printcolumn:name="INSTANCE",type=string,JSONPath=`.spec.eni.instanceID`,priority=1,description="EC2 instance (ENI mode)"
// +kubebuilder:printcolumn:name="ENIS",type=integer,JSONPath=`.status.eni.interfaceCount`,priority=1,description="interfaces whose addresses pods get (ENI mode)"
// +kubebuilder:printcolumn:name="ENI-IPS",type=integer,JSONPath=`.status.eni.available`,priority=1,description="addresses in spec.ipam.pool (ENI mode)"
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
	// ENI is set by the agent in ENI mode: the node's identity in the cloud and its
	// per-node overrides of the operator's ENI configuration.
	// +optional
	ENI *NodeENISpec `json:"eni,omitempty"`
}

// NodeENISpec is spec.eni (Cilium's spec.eni plus the spec.ipam watermarks), written by the
// agent. Unset fields fall back to the operator's configuration; the instance type and
// zone fall back to the Node's labels, the instance to the Node's spec.providerID.
type NodeENISpec struct {
	// InstanceID is the EC2 instance (i-...).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	InstanceID string `json:"instanceID,omitempty"`
	// InstanceType (e.g. m5.large) selects the built-in limits.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	InstanceType string `json:"instanceType,omitempty"`
	// Zone is the availability zone (e.g. us-east-1a); new ENIs go to subnets of it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Zone string `json:"zone,omitempty"`
	// PreAllocate: unused addresses the node keeps ready (spec.ipam.pre-allocate).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4096
	PreAllocate *int32 `json:"preAllocate,omitempty"`
	// MinAllocate: the least the node holds (spec.ipam.min-allocate).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4096
	MinAllocate *int32 `json:"minAllocate,omitempty"`
	// MaxAllocate: the most the node holds, 0 = no cap (spec.ipam.max-allocate).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4096
	MaxAllocate *int32 `json:"maxAllocate,omitempty"`
	// MaxAboveWatermark (spec.ipam.max-above-watermark).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4096
	MaxAboveWatermark *int32 `json:"maxAboveWatermark,omitempty"`
	// FirstInterfaceIndex: interfaces below this device index are not used
	// (spec.eni.first-interface-index).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	FirstInterfaceIndex *int32 `json:"firstInterfaceIndex,omitempty"`
	// SubnetIDs narrow the subnets of new ENIs (spec.eni.subnet-ids).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	SubnetIDs []string `json:"subnetIDs,omitempty"`
	// SubnetTags narrow the subnets of new ENIs (spec.eni.subnet-tags).
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	SubnetTags map[string]string `json:"subnetTags,omitempty"`
	// SecurityGroups of new ENIs (spec.eni.security-groups); empty: the backend's rule
	// (security-group tags of its configuration, else eth0's groups).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	SecurityGroups []string `json:"securityGroups,omitempty"`
	// SecurityGroupTags choose the groups of new ENIs by tags when SecurityGroups is empty
	// (spec.eni.security-group-tags): every group of the VPC carrying all of them.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	SecurityGroupTags map[string]string `json:"securityGroupTags,omitempty"`
	// PrefixDelegation overrides cluster.eni.prefixDelegation for this node (Cilium's
	// spec.eni.disable-prefix-delegation, inverted).
	// +optional
	PrefixDelegation *bool `json:"prefixDelegation,omitempty"`
	// IPv6PrefixDelegation overrides cluster.eni.ipv6PrefixDelegation for this node.
	// +optional
	IPv6PrefixDelegation *bool `json:"ipv6PrefixDelegation,omitempty"`
}

// NodeIPAMSpec is spec.ipam.
type NodeIPAMSpec struct {
	// Pools are the node's per-pool requests and allocations.
	// +optional
	Pools NodePools `json:"pools,omitempty"`
	// Pool is the ENI mode's pool (Cilium's spec.ipam.pool): address -> the interface that
	// carries it. Written by the operator; the agent hands out these addresses.
	// +optional
	// +kubebuilder:validation:MaxProperties=4096
	Pool map[string]PoolAddress `json:"pool,omitempty"`
}

// PoolAddress is one address of spec.ipam.pool.
type PoolAddress struct {
	// Resource is the interface (ENI ID) holding the address.
	// +kubebuilder:validation:MaxLength=64
	Resource string `json:"resource"`
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
	// ENI is the operator's view of the node's interfaces (ENI mode).
	// +optional
	ENI *ENIStatus `json:"eni,omitempty"`
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
	// Used is, in ENI mode, the addresses of spec.ipam.pool pods hold, with their owner
	// (agent).
	// +optional
	// +kubebuilder:validation:MaxProperties=4096
	Used map[string]UsedAddress `json:"used,omitempty"`
	// Pending is, in ENI mode, the number of pods waiting for an address (agent).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Pending int32 `json:"pending,omitempty"`
	// ReleaseIPs is the release handshake (Cilium's status.ipam.release-ips): the operator
	// marks an excess address marked-for-release, the agent answers ready-for-release (it
	// no longer hands the address out) or do-not-release, the operator unassigns it and
	// writes released, the agent drops the entry once the address left spec.ipam.pool.
	// +optional
	// +kubebuilder:validation:MaxProperties=4096
	ReleaseIPs map[string]ReleaseState `json:"releaseIPs,omitempty"`
}

// UsedAddress is one address in use.
type UsedAddress struct {
	// Owner is the pod (namespace/name) or CNI owner holding it.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Owner string `json:"owner,omitempty"`
}

// ReleaseState is the state of one address in the release handshake.
// +kubebuilder:validation:Enum=marked-for-release;ready-for-release;do-not-release;released
type ReleaseState string

// ENIStatus is status.eni, written by the operator in ENI mode.
type ENIStatus struct {
	// Interfaces are the node's interfaces whose addresses pods get, by device index.
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=64
	Interfaces []ENIInterface `json:"interfaces,omitempty"`
	// InterfaceCount and Available summarise Interfaces (for kubectl get).
	// +optional
	InterfaceCount int32 `json:"interfaceCount,omitempty"`
	// +optional
	Available int32 `json:"available,omitempty"`
	// Message says why the node's need is not met, if it is not (e.g. the interface limit).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// ENIInterface is one ENI of the node.
type ENIInterface struct {
	// ID is the ENI ID.
	// +kubebuilder:validation:MaxLength=64
	ID string `json:"id"`
	// Index is the device index.
	// +kubebuilder:validation:Minimum=0
	Index int32 `json:"index"`
	// MAC is the interface's hardware address.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	MAC string `json:"mac,omitempty"`
	// Subnet is the subnet's ID, SubnetCIDR its range (pods get the addresses with this
	// prefix length; the gateway is the subnet's first address).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Subnet string `json:"subnet,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=43
	SubnetCIDR string `json:"subnetCIDR,omitempty"`
	// Addresses are the interface's secondary addresses.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=45
	Addresses []string `json:"addresses,omitempty"`
	// Prefixes are the prefixes delegated to the interface (prefix delegation: IPv4 /28s,
	// whose addresses spec.ipam.pool lists one by one, and the node's IPv6 /80, from which
	// pods get IPv6 addresses).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	Prefixes []string `json:"prefixes,omitempty"`
	// SecurityGroups attached to the interface.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	SecurityGroups []string `json:"securityGroups,omitempty"`
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
