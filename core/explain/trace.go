// Package explain records how allotd decided one ADD, for allotctl explain: the policies of
// the chain in order with their answers, what each pool was to the decision (taken, a
// candidate, exhausted, rejected by a policy and why), and the address and block chosen.
//
// A request carries a *Trace in its context (With); the policy chain (core/policychain),
// the node's manager (core/ipam) and the shared-pool allocator (core/sharedpool) fill it when
// one is there (From returns nil otherwise, and every method of a nil *Trace does nothing).
// Recording keeps the values the decision already made (the policy's answers, the pool
// views) and formats nothing: words are built only when someone asks (Trace.Explanation).
// Service wraps the daemon's api.Service: it traces every ADD, keeps the last trace per pod
// interface in a bounded Recorder, and serves the local API's explain call.
package explain

import (
	"context"
	"net/netip"
	"sync"

	"github.com/allot-ipam/allot/sdk/policy"
)

type ctxKey struct{}

// With returns ctx carrying t.
func With(ctx context.Context, t *Trace) context.Context { return context.WithValue(ctx, ctxKey{}, t) }

// From returns the trace ctx carries, or nil.
func From(ctx context.Context) *Trace {
	t, _ := ctx.Value(ctxKey{}).(*Trace)
	return t
}

// Detach returns ctx without its trace, for a call that is no step of the decision (a
// hypothetical question asked of the policy).
func Detach(ctx context.Context) context.Context {
	if From(ctx) == nil {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, (*Trace)(nil))
}

// Trace is what one ADD's decision went through. Safe for concurrent use; the zero value is
// ready, and a nil *Trace records nothing.
type Trace struct {
	mu       sync.Mutex
	service  string
	dryRun   *policy.Pod
	pools    []policy.PoolView
	steps    []step
	verdicts []verdict
	chosen   []chosen
}

// Step is one policy's answer (or failure) in a decision.
type Step struct {
	Name string
	// Policy and Request let the explanation ask the policy again, with
	// policy.WithDetail, for the per-pool reasons it leaves out of ordinary decisions:
	// policies are pure functions of their request, so the answer is the one given then.
	Policy   policy.PoolPolicy
	Request  *policy.PodRequest
	Decision policy.PodDecision
	Err      error
	// Fallback marks the chain's fallback answering for the policy recorded before it.
	Fallback bool
	detailed bool
}

type step = Step

// verdict is what the allocator found of a candidate (the policy's verdicts are in steps).
type verdict struct {
	pool    string
	fam     policy.Family
	verdict string
	reason  string
}

type chosen struct {
	pool  string
	addr  netip.Prefix
	block netip.Prefix
	gw    netip.Addr
}

// Service names what serves the request ("node pools", "shared pools").
func (t *Trace) Service(name string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.service = name
	t.mu.Unlock()
}

// DryRunPod returns the pod of a dry run, as its manifest has it (labels, annotations,
// controller), or nil: a pod not created yet is in no informer cache, so whoever completes
// the policy's input takes it from here (core/agent's PodContext).
func (t *Trace) DryRunPod() *policy.Pod {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dryRun
}

// Pools records the pools the policy saw, with their free counts.
func (t *Trace) Pools(views []policy.PoolView) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.pools = views
	t.mu.Unlock()
}

// Policy records one policy's answer (or failure) in the chain.
func (t *Trace) Policy(s Step) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.steps = append(t.steps, s)
	t.mu.Unlock()
}

// Outcome records the answer of a network's policy that is not a chain (a chain records its
// own steps): the explanation then shows this one step.
func (t *Trace) Outcome(s Step) {
	if t == nil {
		return
	}
	t.mu.Lock()
	if len(t.steps) == 0 {
		t.steps = append(t.steps, s)
	}
	t.mu.Unlock()
}

// Pool records what the allocator found of candidate pool (one of api's Verdict values).
func (t *Trace) Pool(pool string, fam policy.Family, verdict, reason string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.verdicts = append(t.verdicts, verdictOf(pool, fam, verdict, reason))
	t.mu.Unlock()
}

func verdictOf(pool string, fam policy.Family, v, reason string) verdict {
	return verdict{pool: pool, fam: fam, verdict: v, reason: reason}
}

// Chose records an address taken (or, in a dry run, that would be) from pool, with the
// block (the pool's CIDR) it lies in and its gateway.
func (t *Trace) Chose(pool string, addr, block netip.Prefix, gw netip.Addr) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.chosen = append(t.chosen, chosen{pool: pool, addr: addr, block: block, gw: gw})
	t.mu.Unlock()
}

// Reset forgets what a previous attempt recorded (an ADD that waited for a block and
// decides again), keeping the service and dry-run pod.
func (t *Trace) Reset() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.pools, t.steps, t.verdicts, t.chosen = nil, nil, nil, nil
	t.mu.Unlock()
}

// Named returns p, recording its answers in a request's trace under name: for a network's
// policy that is a single policy rather than a chain (which records its own steps).
func Named(name string, p policy.PoolPolicy) policy.PoolPolicy { return named{name: name, p: p} }

type named struct {
	name string
	p    policy.PoolPolicy
}

func (n named) SelectPodPools(ctx context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	d, err := n.p.SelectPodPools(ctx, req)
	From(ctx).Policy(Step{Name: n.name, Policy: n.p, Request: req, Decision: d, Err: err})
	return d, err
}

func (n named) SelectNodeCIDRConfig(ctx context.Context, req *policy.NodeRequest) (policy.NodeDecision, error) {
	return n.p.SelectNodeCIDRConfig(ctx, req)
}
