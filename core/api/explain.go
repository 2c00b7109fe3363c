package api

import (
	"context"
	"time"
)

// ExplainRequest asks allotd why one pod's interfaces got their addresses (or got none): the
// last decision recorded for each, or, with DryRun, the decision an ADD would get now, taking
// and writing nothing (allotctl explain).
type ExplainRequest struct {
	// Pod names the pod (namespace and name; UID optional). Outside Kubernetes the pod may be
	// empty and Owner names the container instead.
	Pod PodRef `json:"pod,omitempty"`
	// Owner narrows the answer to one container (its ID) and interface; either may be empty.
	Owner Owner `json:"owner,omitempty"`
	// DryRun, if set, is the ADD to decide now without taking an address.
	DryRun *DryRun `json:"dryRun,omitempty"`
}

// DryRun is an ADD to decide without effect, and the pod as its manifest has it: a pod not
// created yet is in no informer cache, so its labels, annotations and controller come with
// the request.
type DryRun struct {
	Request     AllocateRequest   `json:"request"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	OwnerKind   string            `json:"ownerKind,omitempty"`
	OwnerName   string            `json:"ownerName,omitempty"`
}

// ExplainResponse holds one explanation per interface (one for a dry run), newest first.
type ExplainResponse struct {
	Explanations []Explanation `json:"explanations"`
}

// Explanation is how one ADD was decided: the policies of the chain in order, what each pool
// was to the decision, then the addresses taken, or the error.
type Explanation struct {
	Owner   Owner     `json:"owner"`
	Network string    `json:"network"`
	Pod     PodRef    `json:"pod,omitempty"`
	Time    time.Time `json:"time"`
	DryRun  bool      `json:"dryRun,omitempty"`
	// Service is what served the network: "node pools" (core/ipam) or "shared pools"
	// (core/sharedpool).
	Service  string        `json:"service,omitempty"`
	Policies []PolicyStep  `json:"policies,omitempty"`
	Pools    []PoolVerdict `json:"pools,omitempty"`
	// Addresses are those taken (or, in a dry run, that would be).
	Addresses []ChosenAddress `json:"addresses,omitempty"`
	// Error is why the ADD failed; nil when it succeeded.
	Error *Error `json:"error,omitempty"`
}

// PolicyStep is one policy's answer within the chain.
type PolicyStep struct {
	Policy string `json:"policy"`
	// Code is Decided, Skip or NoFit; empty when the policy failed (Error).
	Code   string `json:"code,omitempty"`
	Cause  string `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	Source string `json:"source,omitempty"`
	// IPv4 and IPv6 are the candidate pools it named, best first.
	IPv4 []string `json:"ipv4,omitempty"`
	IPv6 []string `json:"ipv6,omitempty"`
	// Error is how the policy failed (error, panic, timeout, invalid answer).
	Error string `json:"error,omitempty"`
	// Fallback marks the chain's fallback answering for the policy before it.
	Fallback bool `json:"fallback,omitempty"`
}

// Pool verdicts: what a pool was to one decision.
const (
	// VerdictTaken: the address came from this pool.
	VerdictTaken = "taken"
	// VerdictCandidate: the policy named it, but an earlier candidate served the request
	// (or, when the ADD failed before addresses were taken, it was never tried).
	VerdictCandidate = "candidate"
	// VerdictRejected: the policy left it out, for the reason given.
	VerdictRejected = "rejected"
	// VerdictNotChosen: the policy left it out without saying why (a policy of contract 1.0
	// or 1.1, or one that reports no per-pool detail).
	VerdictNotChosen = "not chosen"
	// VerdictExhausted: a candidate with no free address.
	VerdictExhausted = "exhausted"
	// VerdictDisabled: a candidate that hands out nothing now (IPPool spec.disable).
	VerdictDisabled = "disabled"
	// VerdictUnavailable: a candidate that could not serve for another reason (a claim lost to
	// another pod, the pool gone meanwhile).
	VerdictUnavailable = "unavailable"
)

// PoolVerdict is one pool (one family of it) in one decision.
type PoolVerdict struct {
	Pool    string `json:"pool"`
	Family  string `json:"family"`
	Verdict string `json:"verdict"`
	// By is who gave the verdict: a policy's name, or "allocator".
	By     string `json:"by,omitempty"`
	Cause  string `json:"cause,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Free and Total are the pool's addresses at decision time.
	Free  uint64 `json:"free"`
	Total uint64 `json:"total"`
}

// ChosenAddress is one address of the outcome with the block it came from.
type ChosenAddress struct {
	Address string `json:"address"`
	Pool    string `json:"pool"`
	Family  string `json:"family"`
	// Block is the CIDR of the pool the address lies in (a node's block in agent mode).
	Block   string `json:"block,omitempty"`
	Gateway string `json:"gateway,omitempty"`
}

// Explainer is served by the local API when the service implements it: allotd wraps its
// service in core/explain, which records each ADD's explanation.
type Explainer interface {
	Explain(ctx context.Context, req *ExplainRequest) (*ExplainResponse, error)
}
