package explain

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/sdk/policy"
)

func views(names ...string) []policy.PoolView {
	out := make([]policy.PoolView, len(names))
	for i, n := range names {
		out[i] = policy.PoolView{Name: n, Family: policy.IPv4, Free: 10, Total: 10}
	}
	return out
}

func verdicts(e api.Explanation) map[string]api.PoolVerdict {
	m := map[string]api.PoolVerdict{}
	for _, v := range e.Pools {
		m[v.Pool] = v
	}
	return m
}

// Every pool gets one verdict: the allocator's first (taken beats an earlier exhausted),
// then the deciding policy's candidates, then a rejection some policy reported (of contract
// 1.2), else "not chosen".
func TestPoolVerdicts(t *testing.T) {
	tr := &Trace{}
	tr.Pools(views("a", "b", "c", "d", "e"))
	tr.Policy(Step{Name: "annotations", Decision: policy.PodDecision{Code: policy.Skip, Rejected: []policy.Rejection{
		{Pool: "d", Cause: policy.CauseUnavailable, Reason: "disabled"}}}})
	tr.Policy(Step{Name: "broken", Err: errors.New("boom")})
	tr.Policy(Step{Name: "static", Decision: policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: "a"}, {Pool: "b"}, {Pool: "c"}}}, Fallback: true})
	tr.Pool("a", policy.IPv4, api.VerdictExhausted, "all 10 in use")
	tr.Pool("b", policy.IPv4, api.VerdictExhausted, "all 10 in use")
	tr.Chose("b", netip.MustParsePrefix("10.0.0.9/24"), netip.MustParsePrefix("10.0.0.0/24"), netip.Addr{})
	e := tr.Explanation(Meta{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}}, nil)
	want := map[string][3]string{
		"a": {api.VerdictExhausted, "allocator", "all 10 in use"},
		"b": {api.VerdictTaken, "allocator", ""},
		"c": {api.VerdictCandidate, "static", ""},
		"d": {api.VerdictRejected, "annotations", "disabled"},
		"e": {api.VerdictNotChosen, "static", ""},
	}
	got := verdicts(e)
	for pool, w := range want {
		v := got[pool]
		if v.Verdict != w[0] || v.By != w[1] || v.Reason != w[2] {
			t.Errorf("pool %s: %+v, want %v", pool, v, w)
		}
	}
	if e.Pools[0].Pool != "b" || e.Pools[1].Pool != "c" {
		t.Errorf("order: taken and candidates first, got %+v", e.Pools)
	}
	if len(e.Policies) != 3 || e.Policies[1].Error != "boom" || !e.Policies[2].Fallback || e.Policies[2].Code != "Decided" {
		t.Errorf("policies: %+v", e.Policies)
	}
	if len(e.Addresses) != 1 || e.Addresses[0] != (api.ChosenAddress{Address: "10.0.0.9/24", Pool: "b", Family: "ipv4", Block: "10.0.0.0/24"}) {
		t.Errorf("addresses: %+v", e.Addresses)
	}
}

// A network's policy that is no chain records its answer through Outcome; a chain's steps
// win over it.
func TestOutcomeOnlyWithoutChainSteps(t *testing.T) {
	tr := &Trace{}
	tr.Outcome(Step{Name: "policy", Decision: policy.PodDecision{Code: policy.NoFit, Cause: policy.CauseFull, Reason: "r"}})
	e := tr.Explanation(Meta{}, api.Errorf(api.CodeNoPool, "no pool"))
	if len(e.Policies) != 1 || e.Policies[0].Cause != "Full" || e.Error.Code != api.CodeNoPool {
		t.Fatalf("%+v", e)
	}
	tr = &Trace{}
	tr.Policy(Step{Name: "a", Decision: policy.PodDecision{Code: policy.NoFit}})
	tr.Outcome(Step{Name: "policy", Decision: policy.PodDecision{Code: policy.NoFit}})
	if e := tr.Explanation(Meta{}, nil); len(e.Policies) != 1 || e.Policies[0].Policy != "a" {
		t.Fatalf("%+v", e.Policies)
	}
	var none *Trace // no trace in the context: every hook is a no-op
	none.Policy(Step{Name: "a"})
	none.Pools(nil)
	none.Chose("a", netip.Prefix{}, netip.Prefix{}, netip.Addr{})
	if From(context.Background()) != nil || none.DryRunPod() != nil {
		t.Fatal("a context without a trace has one")
	}
}

// The recorder keeps the last ADD per pod interface and drops the least recent past its
// capacity.
func TestRecorderBound(t *testing.T) {
	r := NewRecorder(3)
	put := func(pod, ifName, cid string) {
		r.put(&record{k: keyOf(api.Owner{ContainerID: cid, IfName: ifName}, api.PodRef{Namespace: "ns", Name: pod}), trace: &Trace{},
			meta: Meta{Owner: api.Owner{ContainerID: cid, IfName: ifName}, Pod: api.PodRef{Namespace: "ns", Name: pod}}})
	}
	put("a", "eth0", "1")
	put("a", "net1", "1")
	put("b", "eth0", "2")
	put("a", "eth0", "3") // the pod's sandbox recreated: replaces, moves to the front
	if r.Len() != 3 || len(r.find(api.PodRef{Namespace: "ns", Name: "a"}, api.Owner{})) != 2 {
		t.Fatalf("len %d", r.Len())
	}
	if got := r.find(api.PodRef{Namespace: "ns", Name: "a"}, api.Owner{IfName: "eth0"}); len(got) != 1 || got[0].meta.Owner.ContainerID != "3" {
		t.Fatalf("eth0 of a: %+v", got)
	}
	for i := range 3 {
		put(fmt.Sprintf("p%d", i), "eth0", "x")
	}
	if r.Len() != 3 || len(r.find(api.PodRef{Namespace: "ns", Name: "a"}, api.Owner{})) != 0 {
		t.Fatalf("after churn: len %d, pod a still there", r.Len())
	}
}

// detailPolicy gives per-pool reasons only when asked (policy.WithDetail), as the built-in
// policies do.
type detailPolicy struct {
	policy.PodOnly
	calls int
}

func (p *detailPolicy) SelectPodPools(ctx context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	p.calls++
	d := policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: "a"}}}
	if policy.DetailWanted(ctx) {
		d.Rejected = []policy.Rejection{{Pool: "b", Cause: policy.CauseNoMatch, Reason: "podAffinity does not match\xff"}}
	}
	return d, nil
}

// The per-pool reasons are asked for when the explanation is, once, from the recorded
// request, and cleaned like any plugin output.
func TestDetailAskedLazily(t *testing.T) {
	p := &detailPolicy{}
	req := &policy.PodRequest{Pools: views("a", "b")}
	d, _ := p.SelectPodPools(context.Background(), req)
	tr := &Trace{}
	tr.Pools(req.Pools)
	tr.Policy(Step{Name: "p", Policy: p, Request: req, Decision: d})
	tr.fillDetail(context.Background())
	tr.fillDetail(context.Background())
	if p.calls != 2 {
		t.Fatalf("policy called %d times, want 2 (the decision, then once for detail)", p.calls)
	}
	v := verdicts(tr.Explanation(Meta{}, nil))["b"]
	if v.Verdict != api.VerdictRejected || v.By != "p" || v.Cause != "NoMatch" || v.Reason != "podAffinity does not match\uFFFD" {
		t.Fatalf("pool b: %+v", v)
	}
}

// A successful ADD among many pools keeps only the pools' names and counts; a failed one
// keeps the request for the per-pool reasons.
func TestCompactManyPools(t *testing.T) {
	names := make([]string, maxDetailPools+1)
	for i := range names {
		names[i] = fmt.Sprintf("p%03d", i)
	}
	req := &policy.PodRequest{Pools: views(names...)}
	req.Pools[1].Excluded = []string{"10.0.0.1"}
	tr := &Trace{}
	tr.Pools(req.Pools)
	tr.Policy(Step{Name: "p", Policy: &detailPolicy{}, Request: req, Decision: policy.PodDecision{Code: policy.Decided}})
	tr.compact()
	if tr.steps[0].Request != nil || tr.steps[0].Policy != nil || tr.pools[1].Excluded != nil || tr.pools[1].Free != 10 {
		t.Fatalf("not compacted: %+v", tr.pools[1])
	}
	small := &Trace{}
	small.Pools(views("a"))
	small.Policy(Step{Name: "p", Policy: &detailPolicy{}, Request: req})
	small.compact()
	if small.steps[0].Request == nil {
		t.Fatal("a trace with few pools lost its request")
	}
}
