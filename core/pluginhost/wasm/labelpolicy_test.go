package wasm

import (
	"context"
	"slices"
	"testing"

	"github.com/allot-ipam/allot/core/pluginhost/process/testdata/labelpolicy"
	"github.com/allot-ipam/allot/internal/benchutil"
	"github.com/allot-ipam/allot/sdk/policy"
)

// The example third-party plugin, built from its own module, run through this host.
const labelPolicyDir = "../../../plugin-examples/wasm-label-policy"

func names(cs []policy.Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Pool)
	}
	return out
}

func TestLabelPolicyThroughHost(t *testing.T) {
	p := openGuest(t, buildGuest(t, labelPolicyDir, true), nil)
	if st := p.Status(); st.PluginVersion != "0.1.0" {
		t.Errorf("plugin version %q, want 0.1.0", st.PluginVersion)
	}
	tests := []struct {
		name     string
		labels   map[string]string
		code     policy.Code
		v4, v6   []string
		source   string
		contains string
	}{
		{"no label: defaults", nil, policy.Decided, []string{"pool-v4-00"}, []string{"pool-v6-00"}, "default pools", ""},
		{"pool label, one family", map[string]string{"allot.io/pool": "pool-v4-03"}, policy.Decided,
			[]string{"pool-v4-03"}, nil, "pod label allot.io/pool", ""},
		{"per-family labels", map[string]string{"allot.io/pool-ipv4": "pool-v4-05,pool-v4-01", "allot.io/pool-ipv6": "pool-v6-02"},
			policy.Decided, []string{"pool-v4-05", "pool-v4-01"}, []string{"pool-v6-02"},
			"pod label allot.io/pool-ipv4, pod label allot.io/pool-ipv6", ""},
		{"unknown pool", map[string]string{"allot.io/pool": "nope"}, policy.NoFit, nil, nil, "", `"nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := p.SelectPodPools(context.Background(), podRequest("web", tt.labels))
			if err != nil {
				t.Fatal(err)
			}
			if d.Code != tt.code || !slices.Equal(names(d.IPv4), tt.v4) || !slices.Equal(names(d.IPv6), tt.v6) ||
				d.Source != tt.source {
				t.Errorf("got %+v", d)
			}
			if tt.contains != "" {
				mustContain(t, d.Reason, tt.contains)
			}
		})
	}
	nd, err := p.SelectNodeCIDRConfig(context.Background(), &policy.NodeRequest{Node: policy.Node{Name: "n"}})
	if err != nil || nd.Code != policy.Skip {
		t.Errorf("node decision %+v, %v; want Skip", nd, err)
	}
}

// BenchmarkWASMPolicyDecision: one pool decision (20 pools) through the WASM transport:
// encode, copy into the guest, decode, run the label policy, encode, decode on the host.
func BenchmarkWASMPolicyDecision(b *testing.B) {
	p := openGuest(b, buildGuest(b, labelPolicyDir, true), func(c *Config) { c.Instances = 1 })
	req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-07"})
	ctx := context.Background()
	if _, err := p.SelectPodPools(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	m := benchutil.Start(b)
	for b.Loop() {
		if _, err := p.SelectPodPools(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	m.Stop("decisions/s")
}

// BenchmarkWASMPolicyDecisionParallel: the same with one instance per GOMAXPROCS.
func BenchmarkWASMPolicyDecisionParallel(b *testing.B) {
	p := openGuest(b, buildGuest(b, labelPolicyDir, true), func(c *Config) { c.Instances = 0 })
	req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-07"})
	b.ReportAllocs()
	m := benchutil.Start(b)
	defer m.Stop("decisions/s")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := p.SelectPodPools(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkWASMPolicyDecisionPoolsChange: as BenchmarkWASMPolicyDecision, but a pool's free
// count changes on every call, so the guest cannot reuse its decoded pool views (the worst
// case: every decision decodes all 20 pools).
func BenchmarkWASMPolicyDecisionPoolsChange(b *testing.B) {
	p := openGuest(b, buildGuest(b, labelPolicyDir, true), func(c *Config) { c.Instances = 1 })
	req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-07"})
	ctx := context.Background()
	b.ReportAllocs()
	m := benchutil.Start(b)
	for b.Loop() {
		req.Pools[3].Free++
		if _, err := p.SelectPodPools(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	m.Stop("decisions/s")
}

// BenchmarkBuiltinPolicyDecision: a label policy called in-process (the built-in transport)
// on the same request, the reference the WASM benchmarks are compared with.
func BenchmarkBuiltinPolicyDecision(b *testing.B) {
	var pol policy.PoolPolicy = labelpolicy.Policy{}
	req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-07"})
	ctx := context.Background()
	b.ReportAllocs()
	m := benchutil.Start(b)
	for b.Loop() {
		if _, err := pol.SelectPodPools(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	m.Stop("decisions/s")
}
