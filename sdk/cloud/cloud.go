package cloud

import (
	"context"
	"errors"
	"net/netip"

	"github.com/allot-ipam/allot/sdk/policy"
)

// ContractVersion is the semantic version of this contract. A host refuses a backend whose
// major version differs, or whose minor version is newer than the host's.
const ContractVersion = "1.2.0"

// CloudBackend is the interface every cloud backend implements, whatever its transport.
type CloudBackend interface {
	// Inventory reports the node's interfaces with their addresses, the subnets the node may
	// use and the node's limits. It must not change anything.
	Inventory(ctx context.Context, node NodeRef) (NodeInventory, error)
	// Allocate assigns up to req.Count new addresses of req.Family to one existing interface
	// of the node. It may assign fewer than asked (the interface or subnet filled up) but
	// never more; it returns ErrLimitReached or ErrSubnetFull when it assigned none.
	Allocate(ctx context.Context, req AllocateRequest) (AllocateResult, error)
	// CreateInterface creates and attaches a new interface to the node, optionally with
	// addresses already assigned. Backends without interfaces answer ErrUnsupported.
	CreateInterface(ctx context.Context, req CreateInterfaceRequest) (Interface, error)
	// Release unassigns addresses from one interface of the node. Releasing an address the
	// interface no longer holds is not an error (Release is idempotent).
	Release(ctx context.Context, req ReleaseRequest) error
}

// Family is an IP address family: the pool-policy contract's type, so that a family means
// one thing (and is one Go type) in every contract and in the core.
type Family = policy.Family

const (
	IPv4 = policy.IPv4
	IPv6 = policy.IPv6
)

// Sentinel errors a backend wraps so the operator can react to the cause.
var (
	// ErrNodeNotFound: the backend does not know the node (e.g. instance not running).
	ErrNodeNotFound = errors.New("cloud: node not found")
	// ErrLimitReached: the node or interface cannot carry more interfaces or addresses.
	ErrLimitReached = errors.New("cloud: limit reached")
	// ErrSubnetFull: the subnet has no free address left.
	ErrSubnetFull = errors.New("cloud: subnet full")
	// ErrThrottled: the cloud API refused the call for rate reasons; retry later.
	ErrThrottled = errors.New("cloud: throttled")
	// ErrUnsupported: the backend cannot perform this operation at all.
	ErrUnsupported = errors.New("cloud: unsupported")
	// ErrNoFreePrefix (contract 1.2): the subnet has no free block of the delegated prefix
	// size left (AWS: InsufficientCidrBlocks), though single addresses may still be free.
	ErrNoFreePrefix = errors.New("cloud: no free prefix in subnet")
)

// NodeRef identifies a node to the cloud.
type NodeRef struct {
	// Name is the Kubernetes node name.
	Name string
	// ProviderID is the node's spec.providerID (AWS: aws:///us-east-1a/i-0123...), empty if
	// the backend does not need it.
	ProviderID string
	// InstanceType (node.kubernetes.io/instance-type) lets a backend look up built-in limits
	// without an API call.
	InstanceType string
	// Zone is the node's availability zone (topology.kubernetes.io/zone).
	Zone string
}

// NodeInventory is what a node holds in the cloud right now.
type NodeInventory struct {
	// Interfaces sorted by Index.
	Interfaces []Interface
	// Subnets the node may draw addresses or new interfaces from, sorted by ID.
	Subnets []Subnet
	Limits  Limits
}

// Interface is one network interface of a node (an ENI on AWS).
type Interface struct {
	// ID is the backend's identifier (AWS: eni-...).
	ID string
	// Index is the device index on the node (AWS: attachment DeviceIndex, 0 = primary).
	Index int
	// Subnet is the ID of the subnet the interface lives in.
	Subnet string
	// MAC is the interface's hardware address, used by the agent to find the device; may be empty.
	MAC string
	// Primary marks the node's primary interface (the operator never hands out its
	// primary address).
	Primary bool
	// Addresses are the addresses assigned to the interface, sorted, the interface's own
	// primary address excluded.
	Addresses []netip.Addr
	// SecurityGroups attached to the interface, sorted.
	SecurityGroups []string
	// Tags set on the interface.
	Tags map[string]string
	// Prefixes (contract 1.2) are the prefixes delegated to the interface (AWS: IPv4 /28,
	// IPv6 /80), sorted; their addresses are not listed in Addresses.
	Prefixes []netip.Prefix
}

// Subnet is one subnet a node can draw from.
type Subnet struct {
	ID   string
	CIDR netip.Prefix
	// Free is the number of addresses still free in the subnet.
	Free uint64
	// VPC and Zone scope the subnet; empty for backends without them.
	VPC  string
	Zone string
	Tags map[string]string
}

// Limits bound what a node can hold.
type Limits struct {
	// MaxInterfaces is the number of interfaces the node may have, 0 = unknown/unlimited.
	MaxInterfaces int
	// AddressesPerInterface is how many IPv4 addresses each interface may carry, counting
	// the interface's primary address (AWS semantics), 0 = unknown/unlimited.
	AddressesPerInterface int
	// IPv6AddressesPerInterface is the same for IPv6, 0 = unknown/unlimited.
	IPv6AddressesPerInterface int
	// PrefixDelegation (contract 1.2) says the node can carry delegated prefixes, each in
	// one address slot (AWS: Nitro instances). A backend of contract 1.1 never sets it, so
	// the operator never asks it for prefixes.
	PrefixDelegation bool
}

// AllocateRequest asks for new addresses on an existing interface.
type AllocateRequest struct {
	Node NodeRef
	// Interface is the ID of the interface to put the addresses on.
	Interface string
	Family    Family
	// Count is how many addresses to assign, at least 1.
	Count int
	// Prefixes (contract 1.2): Count counts delegated prefixes of Family (AWS: /28 for
	// IPv4, /80 for IPv6) instead of addresses. Only asked of nodes whose Limits say
	// PrefixDelegation.
	Prefixes bool
}

// AllocateResult reports what Allocate assigned.
type AllocateResult struct {
	Interface string
	// Addresses newly assigned, sorted; together with Prefixes at most Count, at least 1.
	Addresses []netip.Addr
	// Prefixes (contract 1.2) newly delegated, sorted.
	Prefixes []netip.Prefix
}

// CreateInterfaceRequest asks for a new interface on a node.
type CreateInterfaceRequest struct {
	Node NodeRef
	// Index is the device index to attach at (the operator picks the first free index at or
	// above its first-interface-index).
	Index int
	// Subnet is the ID of the subnet to create the interface in.
	Subnet string
	// SecurityGroups to attach; empty means SecurityGroupTags, else the backend's default
	// (AWS: those of the primary interface).
	SecurityGroups []string
	// SecurityGroupTags (contract 1.1) select the groups to attach when SecurityGroups is
	// empty: every group of the node's network carrying all of these tags (Cilium's
	// security-group-tags, per node). A backend of contract 1.0 ignores them.
	SecurityGroupTags map[string]string
	Description       string
	Tags              map[string]string
	// DeleteOnTermination deletes the interface with the instance.
	DeleteOnTermination bool
	// Family and Count of addresses to assign on creation, besides the interface's own
	// primary address; Count may be 0.
	Family Family
	Count  int
}

// ReleaseRequest gives addresses back to the cloud.
type ReleaseRequest struct {
	Node      NodeRef
	Interface string
	Addresses []netip.Addr
	// Prefixes (contract 1.2) to take back whole; a backend of contract 1.1 ignores them.
	Prefixes []netip.Prefix
}
