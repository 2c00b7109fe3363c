package ciliumannotations

import (
	"context"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

// With policy.WithDetail every pool the decision leaves out says why: selectors that do not
// match the pod, or the rule that chose another pool.
func TestRejectedOnlyWhenAsked(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	db := &policy.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	req := &policy.PodRequest{
		Pod:       policy.Pod{Namespace: "web", Name: "w", Labels: map[string]string{"app": "web"}, Annotations: map[string]string{DefaultAnnotation: "blue"}},
		Namespace: policy.Namespace{Name: "web"},
		Pools: []policy.PoolView{{Name: "blue", Family: policy.IPv4}, {Name: "db", Family: policy.IPv4, PodAffinity: db},
			{Name: "default", Family: policy.IPv4}},
	}
	if d, _ := p.SelectPodPools(context.Background(), req); d.Code != policy.Decided || len(d.Rejected) != 0 {
		t.Fatalf("without detail: %+v", d)
	}
	d, _ := p.SelectPodPools(policy.WithDetail(context.Background()), req)
	want := map[string]string{
		"db":      "podAffinity {app=db} does not match pod web/w",
		"default": `pod annotation ipam.cilium.io/ip-pool chose pool "blue" for IPv4`,
	}
	if len(d.Rejected) != len(want) {
		t.Fatalf("rejected %+v", d.Rejected)
	}
	for _, r := range d.Rejected {
		if r.Reason != want[r.Pool] || r.Cause != policy.CauseNoMatch {
			t.Errorf("pool %s: %v %q, want %q", r.Pool, r.Cause, r.Reason, want[r.Pool])
		}
	}
}
