package main

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

func pools() []policy.PoolView {
	v4 := func(name string, def bool) policy.PoolView {
		return policy.PoolView{Name: name, Family: policy.IPv4, Default: def, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}}
	}
	v6 := func(name string, def bool) policy.PoolView {
		return policy.PoolView{Name: name, Family: policy.IPv6, Default: def, CIDRs: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}}
	}
	off := v4("off", false)
	off.Disabled = true
	gone := v4("gone", true)
	gone.Terminating = true
	return []policy.PoolView{v4("blue", false), v6("blue", false), v4("default", true), v6("default", true), gone, off, v4("red", false), v6("v6only", false)}
}

func names(cs []policy.Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Pool)
	}
	return out
}

func TestSelectPodPools(t *testing.T) {
	tests := []struct {
		name     string
		labels   map[string]string
		pools    []policy.PoolView
		code     policy.Code
		v4, v6   []string
		source   string
		contains string
	}{
		{name: "no label: default pools, terminating skipped", code: policy.Decided,
			v4: []string{"default"}, v6: []string{"default"}, source: "default pools"},
		{name: "no label, no usable default", pools: pools()[:2], code: policy.NoFit, contains: "no default pool"},
		{name: "dual-stack pool", labels: map[string]string{LabelPool: "blue"}, code: policy.Decided,
			v4: []string{"blue"}, v6: []string{"blue"}, source: "pod label allot.io/pool"},
		{name: "pool with one family", labels: map[string]string{LabelPool: "red"}, code: policy.Decided,
			v4: []string{"red"}, source: "pod label allot.io/pool"},
		{name: "list, best first", labels: map[string]string{LabelPool: " red , blue"}, code: policy.Decided,
			v4: []string{"red", "blue"}, v6: []string{"blue"}, source: "pod label allot.io/pool"},
		{name: "per-family label overrides", labels: map[string]string{LabelPool: "blue", LabelPoolIPv6: "v6only"},
			code: policy.Decided, v4: []string{"blue"}, v6: []string{"v6only"},
			source: "pod label allot.io/pool, pod label allot.io/pool-ipv6"},
		{name: "only an ipv4 label", labels: map[string]string{LabelPoolIPv4: "red"}, code: policy.Decided,
			v4: []string{"red"}, source: "pod label allot.io/pool-ipv4"},
		{name: "disabled pool is skipped with a reason", labels: map[string]string{LabelPoolIPv4: "off,red"},
			code: policy.Decided, v4: []string{"red"}, source: "pod label allot.io/pool-ipv4", contains: `"off" is disabled`},
		{name: "unknown pool", labels: map[string]string{LabelPool: "nope"}, code: policy.NoFit, contains: `allot.io/pool="nope"`},
		{name: "unknown per-family pool", labels: map[string]string{LabelPoolIPv6: "nope"}, code: policy.NoFit,
			contains: `IPv6 pool "nope" does not exist`},
		{name: "terminating pool", labels: map[string]string{LabelPoolIPv4: "gone"}, code: policy.NoFit, contains: "terminating"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &policy.PodRequest{Pod: policy.Pod{Name: "p", Labels: tt.labels}, Pools: tt.pools}
			if req.Pools == nil {
				req.Pools = pools()
			}
			d, err := labelPolicy{}.SelectPodPools(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Code != tt.code || !slices.Equal(names(d.IPv4), tt.v4) || !slices.Equal(names(d.IPv6), tt.v6) || d.Source != tt.source {
				t.Errorf("got %+v", d)
			}
			if !strings.Contains(d.Reason, tt.contains) {
				t.Errorf("reason %q does not contain %q", d.Reason, tt.contains)
			}
		})
	}
}

func TestNodesSkipped(t *testing.T) {
	d, err := labelPolicy{}.SelectNodeCIDRConfig(context.Background(), &policy.NodeRequest{})
	if err != nil || d.Code != policy.Skip {
		t.Errorf("got %+v, %v", d, err)
	}
}
