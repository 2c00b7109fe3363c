package static

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

func pools() []policy.PoolView {
	return []policy.PoolView{
		{Name: "blue", Family: policy.IPv4, Free: 1},
		{Name: "dual", Family: policy.IPv4, Free: 1, Default: true},
		{Name: "dual", Family: policy.IPv6, Free: 1, Default: true},
		{Name: "green", Family: policy.IPv6, Free: 1},
		{Name: "alpha", Family: policy.IPv4, Free: 1, Default: true}, // out of name order on purpose
	}
}

func names(cs []policy.Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Pool)
	}
	return out
}

func TestStatic(t *testing.T) {
	tests := []struct {
		name     string
		cniPools []string
		pools    []policy.PoolView
		code     policy.Code
		v4, v6   []string
		source   string
		reason   string
		cause    policy.Cause
	}{
		{"named pools split per family, order kept", []string{"green", "dual", "blue"}, pools(), policy.Decided,
			[]string{"dual", "blue"}, []string{"green", "dual"}, SourceCNIPools, "", 0},
		{"named pool that does not exist", []string{"blue", "nope"}, pools(), policy.NoFit, nil, nil, SourceCNIPools,
			`CNI config ipam.pools[1] names pool "nope", which does not exist`, policy.CauseNoMatch},
		{"named pool listed twice", []string{"blue", "blue"}, pools(), policy.NoFit, nil, nil, SourceCNIPools,
			`CNI config ipam.pools[1]: pool "blue" is listed twice`, policy.CauseInvalid},
		{"no named pools: default pools per family, sorted by name", nil, pools(), policy.Decided,
			[]string{"alpha", "dual"}, []string{"dual"}, SourceDefaultPools, "", 0},
		{"no named pools and no default: skip", nil, []policy.PoolView{{Name: "blue", Family: policy.IPv4}}, policy.Skip,
			nil, nil, "", "no pools named in the CNI config (ipam.pools) and no default pools", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &policy.PodRequest{CNI: policy.CNIRequest{Pools: tt.cniPools}, Pools: tt.pools}
			d, err := New().SelectPodPools(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Code == policy.NoFit && d.Cause != tt.cause {
				t.Fatalf("cause %v, want %v", d.Cause, tt.cause)
			}
			if d.Code != tt.code || d.Source != tt.source || d.Reason != tt.reason {
				t.Fatalf("got %v %q %q, want %v %q %q", d.Code, d.Source, d.Reason, tt.code, tt.source, tt.reason)
			}
			if !slices.Equal(names(d.IPv4), tt.v4) || !slices.Equal(names(d.IPv6), tt.v6) {
				t.Fatalf("got v4 %v v6 %v, want %v %v", names(d.IPv4), names(d.IPv6), tt.v4, tt.v6)
			}
		})
	}
}

func TestStaticConfigAndNodes(t *testing.T) {
	if _, err := FromConfig(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := FromConfig(map[string]any{"pools": 1}); err == nil || !strings.Contains(err.Error(), `config field "pools"`) {
		t.Fatalf("FromConfig = %v", err)
	}
	if d, err := New().SelectNodeCIDRConfig(context.Background(), &policy.NodeRequest{}); err != nil || d.Code != policy.Skip {
		t.Fatalf("node = %v %v", d, err)
	}
}

func BenchmarkDecision(b *testing.B) {
	var ps []policy.PoolView
	for i := range 20 {
		fam := policy.IPv4
		if i%5 == 4 {
			fam = policy.IPv6
		}
		ps = append(ps, policy.PoolView{Name: fmt.Sprintf("pool-%02d", i), Family: fam, Free: 10, Default: i%3 == 0})
	}
	req := &policy.PodRequest{CNI: policy.CNIRequest{IfName: "eth0", Pools: []string{"pool-07", "pool-04", "pool-12"}}, Pools: ps}
	p := New()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = p.SelectPodPools(ctx, req)
	}
}
