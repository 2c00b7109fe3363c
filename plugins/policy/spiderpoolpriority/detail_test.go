package spiderpoolpriority

import (
	"context"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

// With policy.WithDetail the decision says why every other pool was left out (the filter that
// removed it, or that the source did not name it); without, it says nothing and costs nothing.
func TestRejectedOnlyWhenAsked(t *testing.T) {
	// Pool e, the only IPv6 default, is disabled: NoFit, which still carries the detail.
	req := request([]policy.PoolView{v4("a", isDefault), v4("b", isDefault, podAff("app", "db")), v4("c", isDefault, exhausted), v4("d"), v6("e", isDefault, isDisabled)})
	p := New()
	d, err := p.SelectPodPools(context.Background(), req)
	if err != nil || d.Code != policy.NoFit || len(d.Rejected) != 0 {
		t.Fatalf("without detail: %+v %v", d, err)
	}
	d, err = p.SelectPodPools(policy.WithDetail(context.Background()), req)
	if err != nil || d.Code != policy.NoFit {
		t.Fatalf("with detail: %+v %v", d, err)
	}
	want := map[string]struct {
		cause  policy.Cause
		reason string
	}{
		"b": {policy.CauseUnavailable, `pool "b": podAffinity {app=db} does not match pod team-a/web-0`},
		"c": {policy.CauseFull, `pool "c": exhausted (no free address)`},
		"d": {policy.CauseNoMatch, `pool "d": not among the pools of cluster default pools`},
		"e": {policy.CauseUnavailable, `pool "e": disabled`},
	}
	got := map[string]policy.Rejection{}
	for _, r := range d.Rejected {
		got[r.Pool] = r
	}
	if len(got) != len(want) {
		t.Errorf("rejected %+v, want pools b c d e", d.Rejected)
	}
	for pool, w := range want {
		if r := got[pool]; r.Cause != w.cause || r.Reason != w.reason {
			t.Errorf("pool %s: %v %q, want %v %q", pool, r.Cause, r.Reason, w.cause, w.reason)
		}
	}
}
