// Package policy is the contract between allot's core and pool policy plugins.
//
// A pool policy decides two things: which pool(s) a pod's address comes from, and which
// CIDR config a node's block comes from. Policies are pure functions of their input: the
// request carries everything a policy may look at (pod, namespace, node, CNI request and
// views of the pools), so a policy can run in-process, in a separate process or in a
// WebAssembly sandbox, and answers the same way in all three.
//
// Plugin authors implement PoolPolicy with these Go types; the transports convert them to
// protobuf (process plugins) or the WASM ABI at the edge.
package policy

import (
	"context"
	"net/netip"
	"strconv"
)

// ContractVersion is the semantic version of this contract. A host refuses a plugin whose
// major version differs, or whose minor version is newer than the host's.
//
// 1.1.0 added Cause to PodDecision and NodeDecision: a plugin of 1.0 never sets it, and the
// host reads its absence as CauseUnspecified.
//
// 1.2.0 added Rejected to PodDecision (per pool, why a policy left it out, for allotctl
// explain): a plugin of 1.0 or 1.1 never sets it, and the host reads that as "no per-pool
// detail".
const ContractVersion = "1.2.0"

// PoolPolicy is the interface every pool policy implements, whatever its transport.
//
// A policy that has no opinion on a request answers Code Skip so the next policy of the
// chain can decide; a policy that knows no pool can serve the request answers NoFit with a
// Reason. An error means the policy itself failed (crash, timeout, bad output), not that no
// pool fits; the host may then fall back to a configured fallback policy.
type PoolPolicy interface {
	// SelectPodPools returns the candidate pools for one interface of one pod, per family,
	// best first.
	SelectPodPools(ctx context.Context, req *PodRequest) (PodDecision, error)
	// SelectNodeCIDRConfig returns the CIDR configs a node's blocks may come from, best first.
	SelectNodeCIDRConfig(ctx context.Context, req *NodeRequest) (NodeDecision, error)
}

// Family is an IP address family.
type Family string

const (
	IPv4 Family = "ipv4"
	IPv6 Family = "ipv6"
)

// Code is the outcome of a decision.
type Code int

const (
	// Decided: the decision's candidates are the answer.
	Decided Code = iota
	// Skip: no opinion; the next policy in the chain decides.
	Skip
	// NoFit: no pool (or config) can serve this request; Reason says why.
	NoFit
)

func (c Code) String() string {
	switch c {
	case Decided:
		return "Decided"
	case Skip:
		return "Skip"
	case NoFit:
		return "NoFit"
	}
	return "Code(" + strconv.Itoa(int(c)) + ")"
}

// Cause is the machine-readable class of a decision's Reason, so that a host acts on why a
// request cannot be served (wait for a new config, ask for more CIDRs, report a user's error)
// without reading the words, which are for people and may change. It matters for NoFit (and
// may accompany Skip); a Decided answer leaves it CauseUnspecified.
type Cause int32

const (
	// CauseUnspecified: no class given (a Decided answer, or a plugin of contract 1.0).
	CauseUnspecified Cause = iota
	// CauseNoMatch: nothing the request names or selects exists or matches it (no such pool,
	// no selector or ClusterCIDRConfig matches the pod or node).
	CauseNoMatch
	// CauseFull: pools or configs match, but none has a free address or block.
	CauseFull
	// CauseInvalid: the request, or an object it names, is malformed (an annotation that does
	// not parse, a pool listed twice, a CNI config entry that is no valid name).
	CauseInvalid
	// CauseAmbiguous: several pools match where exactly one must be chosen.
	CauseAmbiguous
	// CauseUnavailable: the pools named exist but none may serve this request (disabled,
	// terminating, of the other family, affinities or Multus names not matching, every
	// address excluded or reserved).
	CauseUnavailable
)

// MaxCause is the highest Cause of this contract version; hosts refuse higher values.
const MaxCause = CauseUnavailable

func (c Cause) String() string {
	switch c {
	case CauseUnspecified:
		return "Unspecified"
	case CauseNoMatch:
		return "NoMatch"
	case CauseFull:
		return "Full"
	case CauseInvalid:
		return "Invalid"
	case CauseAmbiguous:
		return "Ambiguous"
	case CauseUnavailable:
		return "Unavailable"
	}
	return "Cause(" + strconv.Itoa(int(c)) + ")"
}

// Pod is what a policy may know about the pod being wired.
type Pod struct {
	Namespace   string
	Name        string
	UID         string
	Labels      map[string]string
	Annotations map[string]string
	// OwnerKind and OwnerName name the pod's controller (e.g. "StatefulSet", "web"),
	// empty for bare pods.
	OwnerKind string
	OwnerName string
}

// Namespace is the pod's namespace.
type Namespace struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// Node is the node a pod runs on, or the node asking for blocks.
type Node struct {
	Name   string
	Labels map[string]string
}

// CNIRequest is the part of the CNI invocation a policy may use.
type CNIRequest struct {
	// IfName is the interface inside the pod being configured (CNI_IFNAME), e.g. "eth0", "net1".
	IfName string
	// Network is the CNI network name from the network config ("name").
	Network string
	// MultusName is the Multus NetworkAttachmentDefinition (namespace/name) when Multus drives
	// this call, else empty.
	MultusName string
	// Pools are pools named explicitly in the CNI ipam config ("pools"), in order.
	Pools []string
	// DefaultIPv4Pools and DefaultIPv6Pools are the CNI config defaults
	// (Spiderpool's default_ipv4_ippool / default_ipv6_ippool).
	DefaultIPv4Pools []string
	DefaultIPv6Pools []string
}

// LabelSelector has Kubernetes label selector semantics: all MatchLabels and all
// MatchExpressions must hold. An empty selector matches everything.
type LabelSelector struct {
	MatchLabels      map[string]string
	MatchExpressions []Requirement
}

// Requirement is one label selector expression.
type Requirement struct {
	Key string
	// Operator is one of In, NotIn, Exists, DoesNotExist.
	Operator string
	Values   []string
}

// PoolView is a read-only view of one pool, as the host sees it at decision time.
type PoolView struct {
	Name   string
	Family Family
	CIDRs  []netip.Prefix
	// Subnet is the subnet the pool belongs to (Spiderpool SpiderSubnet), if any.
	Subnet string
	// Total is the number of addresses the pool can ever hand out (saturating), Free those
	// not in use now.
	Total uint64
	Free  uint64
	// Default marks a cluster default pool.
	Default     bool
	Disabled    bool
	Terminating bool
	// Excluded addresses are never handed out by the pool; Reserved are addresses the
	// cluster reserves (SpiderReservedIP) that no pool hands out. AllExcluded and AllReserved
	// say every address of the pool is covered by them.
	Excluded    []string
	Reserved    []string
	AllExcluded bool
	AllReserved bool
	// Affinities: empty means "any".
	NodeName          []string
	NodeAffinity      *LabelSelector
	NamespaceName     []string
	NamespaceAffinity *LabelSelector
	PodAffinity       *LabelSelector
	MultusName        []string
}

// PodRequest is the input of SelectPodPools.
type PodRequest struct {
	Pod       Pod
	Namespace Namespace
	Node      Node
	CNI       CNIRequest
	// Pools are all pools the host knows, sorted by name.
	Pools []PoolView
}

// Candidate is one pool a policy proposes.
type Candidate struct {
	Pool string
}

// PodDecision is the answer of SelectPodPools.
type PodDecision struct {
	Code Code
	// Reason explains NoFit (and, optionally, a decision) in words an operator understands,
	// e.g. `pod annotation ipam.spidernet.io/ippool names pool "blue", which is disabled`.
	Reason string
	// Cause classifies Reason for the host; hosts never parse Reason.
	Cause Cause
	// IPv4 and IPv6 are the candidate pools per family, best first; the host takes an address
	// from the first one that has a free address. An empty list means that family is not wanted.
	IPv4 []Candidate
	IPv6 []Candidate
	// Source names the rule that produced the candidates (for logs and events), e.g.
	// "pod annotation ipam.cilium.io/ip-pool".
	Source string
	// Rejected optionally lists pools the policy left out and why (since contract 1.2), so
	// that allotctl explain can say why a pod did not get an address of a pool. Hosts show it
	// to people and never act on it; leaving it empty means "no per-pool detail". Policies
	// may fill it only when asked (DetailWanted), which a host asks only of in-process
	// policies (a context does not cross a transport). Process plugins carry it (field
	// rejected of the wire's PodDecision), and so do WebAssembly guests of sdk/wasm/guest.
	Rejected []Rejection
}

// Rejection is one pool a policy left out of a PodDecision, and why.
type Rejection struct {
	Pool string
	// Family narrows the rejection to one family of the pool; empty means both.
	Family Family
	// Cause classifies Reason (CauseNoMatch: a selector or name does not match; CauseFull:
	// no free address; CauseUnavailable: disabled, terminating, affinity, wrong family).
	Cause  Cause
	Reason string
}

// CIDRSpec is one family of a CIDR config.
type CIDRSpec struct {
	CIDR netip.Prefix
	// PerNodeMaskSize is the prefix length of each node's block.
	PerNodeMaskSize int
}

// CIDRConfigView is a read-only view of one node CIDR config (ClusterCIDRConfig).
type CIDRConfigView struct {
	Name         string
	NodeSelector LabelSelector
	IPv4         *CIDRSpec
	IPv6         *CIDRSpec
	// FreeBlocks is how many per-node blocks are still free (for dual stack, the minimum over
	// the families).
	FreeBlocks uint64
}

// NodeRequest is the input of SelectNodeCIDRConfig.
type NodeRequest struct {
	Node Node
	// Configs are all configs the host knows, sorted by name.
	Configs []CIDRConfigView
}

// NodeDecision is the answer of SelectNodeCIDRConfig.
type NodeDecision struct {
	Code   Code
	Reason string
	// Cause classifies Reason for the host (CauseFull: configs match the node but none has a
	// free block; CauseNoMatch: none matches it); hosts never parse Reason.
	Cause Cause
	// Configs are the names of matching configs, best first; the host takes a block from the
	// first one with a free block.
	Configs []string
}

// PodOnly can be embedded by policies that only choose pod pools: it answers Skip for nodes.
type PodOnly struct{}

// SelectNodeCIDRConfig implements PoolPolicy.
func (PodOnly) SelectNodeCIDRConfig(context.Context, *NodeRequest) (NodeDecision, error) {
	return NodeDecision{Code: Skip}, nil
}

// NodeOnly can be embedded by policies that only choose node CIDR configs.
type NodeOnly struct{}

// SelectPodPools implements PoolPolicy.
func (NodeOnly) SelectPodPools(context.Context, *PodRequest) (PodDecision, error) {
	return PodDecision{Code: Skip}, nil
}
