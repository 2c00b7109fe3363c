package wasm

import (
	"context"
	"slices"
	"testing"
	"time"

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

// constantDir is a guest answering a constant decision: the transport's floor.
const constantDir = "testdata/constant"

// BenchmarkWASMPolicyDecision: one pool decision (20 pools) through the WASM transport:
// encode, copy into the guest, decode, run the label policy, encode, decode on the host.
// Two baselines run in the same benchmark, in batches alternating with its own (see
// interleaved), so the ratios compare on a loaded machine where the absolute figures do
// not: x-builtin, the same label policy called in-process (the built-in transport), and
// x-floor, the same request through the same transport to a guest that answers a constant
// (how much of a decision is the transport: the rest is the policy's own work in the guest).
func BenchmarkWASMPolicyDecision(b *testing.B) {
	p := openGuest(b, buildGuest(b, labelPolicyDir, true), func(c *Config) { c.Instances = 1 })
	floor := openGuest(b, buildGuest(b, constantDir, true), func(c *Config) { c.Instances = 1 })
	req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-07"})
	ctx := context.Background()
	decide := func(pol policy.PoolPolicy) func() {
		return func() {
			if _, err := pol.SelectPodPools(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	}
	decide(p)()
	decide(floor)()
	b.ReportAllocs()
	interleaved(b, decide(p), baseline{"builtin", decide(labelpolicy.Policy{})}, baseline{"floor", decide(floor)})
}

// baseline is an operation a benchmark compares its own with.
type baseline struct {
	name string
	op   func()
}

// interleaved runs op b.N times in batches; after each batch, off the clock, it runs each
// baseline as many times. It reports op's process CPU time per call (cpu-µs/op) and, per
// baseline, the baseline's (name-cpu-µs/op) and op's as a multiple of it (x-name): measured
// over the same stretches of time, the ratio holds when other processes take the CPU.
func interleaved(b *testing.B, op func(), baselines ...baseline) {
	const batch = 200
	base := make([]time.Duration, len(baselines))
	var own time.Duration
	batches := 0
	start := benchutil.CPUTime()
	n := 0
	for b.Loop() {
		op()
		if n++; n%batch != 0 {
			continue
		}
		own += benchutil.CPUTime() - start
		b.StopTimer()
		for i, bl := range baselines {
			t0 := benchutil.CPUTime()
			for range batch {
				bl.op()
			}
			base[i] += benchutil.CPUTime() - t0
		}
		batches++
		b.StartTimer()
		start = benchutil.CPUTime()
	}
	own += benchutil.CPUTime() - start
	perOp := func(d time.Duration, ops int) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(ops) }
	b.ReportMetric(perOp(own, n), "cpu-µs/op")
	if batches == 0 {
		return // a calibration run too short for a batch
	}
	for i, bl := range baselines {
		theirs := perOp(base[i], batches*batch)
		b.ReportMetric(theirs, bl.name+"-cpu-µs/op")
		b.ReportMetric(perOp(own, n)/theirs, "x-"+bl.name)
	}
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
