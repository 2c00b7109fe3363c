package static

import (
	"context"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

func TestRejectedOnlyWhenAsked(t *testing.T) {
	req := &policy.PodRequest{CNI: policy.CNIRequest{Pools: []string{"a"}},
		Pools: []policy.PoolView{{Name: "a", Family: policy.IPv4}, {Name: "b", Family: policy.IPv4}, {Name: "a", Family: policy.IPv6}}}
	p := &Policy{}
	if d, _ := p.SelectPodPools(context.Background(), req); len(d.Rejected) != 0 {
		t.Fatalf("without detail: %+v", d.Rejected)
	}
	d, _ := p.SelectPodPools(policy.WithDetail(context.Background()), req)
	if len(d.Rejected) != 1 || d.Rejected[0].Pool != "b" || d.Rejected[0].Reason != "not named in the CNI config (ipam.pools)" {
		t.Fatalf("with detail: %+v", d.Rejected)
	}
}
