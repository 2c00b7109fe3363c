package v1alpha1

// Finalizers the operator puts on objects it hands blocks out of, so an object some node still
// holds a block of is not deleted (the deletion waits, and the object's conditions say why).
const (
	FinalizerPoolInUse   = "allot.io/pool-in-use"
	FinalizerConfigInUse = "allot.io/config-in-use"
)

// Condition types.
const (
	// ConditionReady (IPPool, ClusterCIDRConfig): the object is valid and blocks can be
	// handed out of it.
	ConditionReady = "Ready"
	// ConditionExhausted (IPPool, ClusterCIDRConfig): a node asked for a block and none was free.
	ConditionExhausted = "Exhausted"
	// ConditionCIDRRemovalRefused (IPPool): CIDRs were removed from the spec while nodes still
	// hold blocks of them; the operator keeps treating them as part of the pool until the
	// blocks are released. The message lists them.
	ConditionCIDRRemovalRefused = "CIDRRemovalRefused"
	// ConditionDeletionRefused (IPPool, ClusterCIDRConfig): the object is being deleted while
	// nodes hold blocks of it; the finalizer stays until they are released.
	ConditionDeletionRefused = "DeletionRefused"
	// ConditionCIDROverlap (IPPool): a CIDR overlaps another pool's CIDR and is not used.
	ConditionCIDROverlap = "CIDROverlap"
	// ConditionPoolsFulfilled (AllotNode): every request of spec.ipam.pools.requested is
	// covered by allocated blocks.
	ConditionPoolsFulfilled = "PoolsFulfilled"
	// NodeConditionPodCIDRAssigned is the Node condition type the operator sets in
	// ClusterCIDRConfig mode: False while no ClusterCIDRConfig can serve the node.
	NodeConditionPodCIDRAssigned = "AllotPodCIDRAssigned"
	// NodeConditionNetworkUnavailable is Kubernetes' own Node condition (corev1.NodeNetworkUnavailable):
	// True keeps the node tainted node.kubernetes.io/network-unavailable (no pods scheduled), as
	// the route controller and CNI providers use it. In ClusterCIDRConfig mode the operator sets
	// it True while no config can serve the node and False once it has its pod CIDRs; it only
	// ever sets False over a True it wrote itself (its reasons), never over another component's.
	NodeConditionNetworkUnavailable = "NetworkUnavailable"
)

// Condition reasons.
const (
	ReasonAllocated             = "Allocated"
	ReasonPoolNotFound          = "PoolNotFound"
	ReasonPoolExhausted         = "PoolExhausted"
	ReasonPoolTerminating       = "PoolTerminating"
	ReasonPoolFamilyMissing     = "PoolFamilyMissing"
	ReasonInUse                 = "InUse"
	ReasonNotInUse              = "NotInUse"
	ReasonValid                 = "Valid"
	ReasonInvalid               = "Invalid"
	ReasonOverlap               = "Overlap"
	ReasonNoMatchingConfig      = "NoMatchingClusterCIDRConfig"
	ReasonAllConfigsFull        = "AllClusterCIDRConfigsFull"
	ReasonPodCIDRAssigned       = "PodCIDRAssigned"
	ReasonConflictingAllocation = "ConflictingAllocation"
	// ReasonOutsideClusterPodCIDR (ClusterCIDRConfig Ready=False): a CIDR lies outside the
	// operator's cluster pod CIDR (cluster.podCIDRs).
	ReasonOutsideClusterPodCIDR = "OutsideClusterPodCIDR"
	// ReasonStackMismatch (ClusterCIDRConfig Ready=False): the config's families differ from
	// the other configs' (all must be dual stack, or all single stack of one family).
	ReasonStackMismatch = "StackMismatch"
	// ReasonForeignPodCIDR (Node): the node's pod CIDRs were set by another allocator
	// (kube-controller-manager's --allocate-node-cidrs) and lie in no ClusterCIDRConfig.
	ReasonForeignPodCIDR = "PodCIDRFromAnotherAllocator"
)

// AnnotationClusterCIDRConfig is set by the operator on a Node it gave pod CIDRs to, naming
// the ClusterCIDRConfig they came from (configs may overlap, so the CIDR alone cannot say).
const AnnotationClusterCIDRConfig = "allot.io/cluster-cidr-config"

// Shared pools.
const (
	// FinalizerSharedPoolInUse keeps a SharedIPPool while AddressClaims of it exist.
	FinalizerSharedPoolInUse = "allot.io/shared-pool-in-use"
	// ConditionAddressConflict (SharedIPPool): the pool overlaps another pool (a different
	// subnet overlapping, or the same subnet sharing addresses) and hands nothing out until
	// the conflict is resolved. Of two conflicting pools the older (then by name) keeps
	// working, so every agent reaches the same verdict without talking to the others.
	ConditionAddressConflict = "AddressConflict"
	// ReasonAddressRemovalRefused: an update removed addresses pods hold.
	ReasonAddressRemovalRefused = "AddressRemovalRefused"

	// LabelClaimPool, LabelClaimNode, LabelClaimNamespace and LabelClaimPod are set on every
	// AddressClaim so agents, the garbage collector and allotctl can select claims by pool,
	// node or pod without reading them all.
	LabelClaimPool      = "allot.io/pool"
	LabelClaimNode      = "allot.io/node"
	LabelClaimNamespace = "allot.io/pod-namespace"
	LabelClaimPod       = "allot.io/pod"
)
