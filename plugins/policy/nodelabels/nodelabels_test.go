package nodelabels

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

func v4spec(cidr string, mask int) *policy.CIDRSpec {
	return &policy.CIDRSpec{CIDR: netip.MustParsePrefix(cidr), PerNodeMaskSize: mask}
}

func cfg(name string, sel map[string]string, v4, v6 *policy.CIDRSpec) policy.CIDRConfigView {
	return policy.CIDRConfigView{Name: name, NodeSelector: policy.LabelSelector{MatchLabels: sel}, IPv4: v4, IPv6: v6, FreeBlocks: 10}
}

var node = policy.Node{Name: "node-1", Labels: map[string]string{
	"kubernetes.io/hostname":           "node-1",
	"node.kubernetes.io/instance-type": "medium",
	"rack":                             "rack1",
	"zone":                             "z1",
}}

func decide(t *testing.T, configs ...policy.CIDRConfigView) policy.NodeDecision {
	t.Helper()
	d, err := New().SelectNodeCIDRConfig(context.Background(), &policy.NodeRequest{Node: node, Configs: configs})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestTieBreakRules(t *testing.T) {
	it := map[string]string{"node.kubernetes.io/instance-type": "medium"}
	tests := []struct {
		name    string
		configs []policy.CIDRConfigView
		want    []string
	}{
		{"rule 1: most matching labels (documented example: instance-type+rack before instance-type)",
			[]policy.CIDRConfigView{
				cfg("a-one", it, v4spec("10.0.0.0/16", 24), nil),
				cfg("b-two", map[string]string{"node.kubernetes.io/instance-type": "medium", "rack": "rack1"}, v4spec("10.1.0.0/16", 24), nil),
			}, []string{"b-two", "a-one"}},
		{"rule 1 beats rule 2",
			[]policy.CIDRConfigView{
				cfg("a", it, v4spec("10.0.0.0/24", 24), nil), // 1 block
				cfg("b", map[string]string{"zone": "z1", "rack": "rack1"}, v4spec("10.1.0.0/16", 24), nil),
			}, []string{"b", "a"}},
		{"rule 2: fewest allocatable pod CIDRs (documented example: /16 mask 16 = 1 before 4)",
			[]policy.CIDRConfigView{
				cfg("a-four", it, v4spec("10.0.0.0/14", 16), nil),
				cfg("b-one", it, v4spec("10.8.0.0/16", 16), nil),
			}, []string{"b-one", "a-four"}},
		{"rule 2 beats rule 3",
			[]policy.CIDRConfigView{
				cfg("a", it, v4spec("10.0.0.0/16", 26), nil), // 1024 blocks of 64
				cfg("b", it, v4spec("10.1.0.0/16", 20), nil), // 16 blocks of 4096
			}, []string{"b", "a"}},
		{"rule 3: fewest addresses per node block (documented example: 27 before 25)",
			[]policy.CIDRConfigView{
				cfg("a-25", it, v4spec("10.0.0.0/22", 25), nil), // 8 blocks of 128
				cfg("b-27", it, v4spec("10.1.0.0/24", 27), nil), // 8 blocks of 32
			}, []string{"b-27", "a-25"}},
		{"rule 3 beats rule 4",
			[]policy.CIDRConfigView{
				cfg("a", map[string]string{"kubernetes.io/hostname": "node-1"}, v4spec("10.0.0.0/22", 25), nil),
				cfg("b", it, v4spec("10.1.0.0/24", 27), nil),
			}, []string{"b", "a"}},
		{"rule 4: lower label (documented example: kubernetes.io/hostname=node-1 before instance-type=medium)",
			[]policy.CIDRConfigView{
				cfg("a-it", it, v4spec("10.0.0.0/16", 24), nil),
				cfg("b-host", map[string]string{"kubernetes.io/hostname": "node-1"}, v4spec("10.1.0.0/16", 24), nil),
			}, []string{"b-host", "a-it"}},
		{"rule 4: same key, lower value",
			[]policy.CIDRConfigView{
				withV4(withExpr(cfg("a", nil, nil, nil), "zone", policy.OpIn, "z2", "z1"), "10.0.0.0/16", 24),
				withV4(withExpr(cfg("b", nil, nil, nil), "zone", policy.OpIn, "z1", "z0"), "10.1.0.0/16", 24),
			}, []string{"b", "a"}}, // "zone in (z0,z1)" < "zone in (z1,z2)"
		{"rule 4 beats rule 5",
			[]policy.CIDRConfigView{
				cfg("a", it, v4spec("10.0.0.0/16", 24), nil),
				cfg("b", map[string]string{"kubernetes.io/hostname": "node-1"}, v4spec("10.1.0.0/16", 24), nil),
			}, []string{"b", "a"}},
		{"rule 5: lower CIDR by numeric address, not string (10.9 before 10.10)",
			[]policy.CIDRConfigView{
				cfg("a-10", it, v4spec("10.10.0.0/16", 24), nil),
				cfg("b-9", it, v4spec("10.9.0.0/16", 24), nil),
			}, []string{"b-9", "a-10"}},
		{"rule 5: only IPv4 CIDRs are compared for dual stack",
			[]policy.CIDRConfigView{
				cfg("a", it, v4spec("10.2.0.0/16", 24), v4spec("fd00::/104", 120)),
				cfg("b", it, v4spec("10.1.0.0/16", 24), v4spec("fd99::/104", 120)),
			}, []string{"b", "a"}},
		{"rule 5: IPv6-only configs compare their IPv6 CIDRs",
			[]policy.CIDRConfigView{
				cfg("a", it, nil, v4spec("fd00:0:0:10::/64", 120)),
				cfg("b", it, nil, v4spec("fd00:0:0:9::/64", 120)),
			}, []string{"b", "a"}},
		{"after all five rules: by name",
			[]policy.CIDRConfigView{
				cfg("b", it, v4spec("10.0.0.0/16", 24), nil),
				cfg("a", it, v4spec("10.0.0.0/16", 24), nil),
			}, []string{"a", "b"}},
		{"non-matching configs are left out; empty selector matches with count 0",
			[]policy.CIDRConfigView{
				cfg("all", nil, v4spec("10.0.0.0/16", 24), nil),
				cfg("other-rack", map[string]string{"rack": "rack2"}, v4spec("10.1.0.0/16", 24), nil),
				cfg("rack1", map[string]string{"rack": "rack1"}, v4spec("10.2.0.0/16", 24), nil),
			}, []string{"rack1", "all"}},
		{"NotIn and DoesNotExist match no label on the node (count 0)",
			[]policy.CIDRConfigView{
				cfg("a-rack", map[string]string{"rack": "rack1"}, v4spec("10.9.0.0/16", 24), nil),
				withV4(withExpr(withExpr(cfg("b-neg", nil, nil, nil), "gpu", policy.OpDoesNotExist), "zone", policy.OpNotIn, "z9"), "10.0.0.0/16", 24),
			}, []string{"a-rack", "b-neg"}},
		{"In and Exists count once per key",
			[]policy.CIDRConfigView{
				cfg("a", map[string]string{"rack": "rack1", "zone": "z1"}, v4spec("10.9.0.0/16", 24), nil),
				withV4(withExpr(withExpr(cfg("b", map[string]string{"rack": "rack1"}, nil, nil), "rack", policy.OpExists), "rack", policy.OpIn, "rack1"), "10.0.0.0/16", 24),
			}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(t, tt.configs...)
			if d.Code != policy.Decided || !slices.Equal(d.Configs, tt.want) {
				t.Fatalf("got %v %v (%q), want %v", d.Code, d.Configs, d.Reason, tt.want)
			}
			// The answer must not depend on the order of the input.
			rev := slices.Clone(tt.configs)
			slices.Reverse(rev)
			if d2 := decide(t, rev...); !slices.Equal(d2.Configs, tt.want) {
				t.Fatalf("reversed input: got %v, want %v", d2.Configs, tt.want)
			}
		})
	}
}

func withExpr(c policy.CIDRConfigView, key, op string, vals ...string) policy.CIDRConfigView {
	c.NodeSelector.MatchExpressions = append(slices.Clone(c.NodeSelector.MatchExpressions), policy.Requirement{Key: key, Operator: op, Values: vals})
	return c
}

func withV4(c policy.CIDRConfigView, cidr string, mask int) policy.CIDRConfigView {
	c.IPv4 = v4spec(cidr, mask)
	return c
}

// Google Distributed Cloud's ClusterCIDRConfig reference: "If the best match ClusterCIDRConfig
// does not have more CIDRs available for allocation, the next best CIDR is chosen"; "If no
// matching ClusterCIDRConfig is found for a node, the node remains in a NotReady state" — two
// distinct NoFit answers.
func TestFullAndNoMatch(t *testing.T) {
	best := cfg("best", map[string]string{"rack": "rack1", "zone": "z1"}, v4spec("10.0.0.0/16", 24), nil)
	next := cfg("next", map[string]string{"rack": "rack1"}, v4spec("10.1.0.0/16", 24), nil)
	other := cfg("other", map[string]string{"rack": "rack9"}, v4spec("10.2.0.0/16", 24), nil)

	full := best
	full.FreeBlocks = 0
	d := decide(t, full, next, other)
	if d.Code != policy.Decided || !slices.Equal(d.Configs, []string{"next"}) || !strings.Contains(d.Reason, `skipped full configs ["best"]`) {
		t.Fatalf("best full: got %v %v %q", d.Code, d.Configs, d.Reason)
	}

	nextFull := next
	nextFull.FreeBlocks = 0
	d = decide(t, full, nextFull, other)
	if d.Code != policy.NoFit || d.Cause != policy.CauseFull || !strings.Contains(d.Reason, `["best", "next"]`) {
		t.Fatalf("all full: got %v %q", d.Code, d.Reason)
	}

	d = decide(t, other)
	if d.Code != policy.NoFit || d.Cause != policy.CauseNoMatch || !strings.Contains(d.Reason, `node "node-1"`) {
		t.Fatalf("no match: got %v %q", d.Code, d.Reason)
	}
	d = decide(t)
	if d.Code != policy.NoFit || d.Cause != policy.CauseNoMatch {
		t.Fatalf("no configs: got %v %q", d.Code, d.Reason)
	}
}

func TestInvalidConfigsNeverMatch(t *testing.T) {
	bad := cfg("bad", map[string]string{"rack": "rack1"}, v4spec("10.0.0.0/16", 24), v4spec("fd00::/104", 112))
	d := decide(t, bad)
	if d.Code != policy.NoFit || d.Cause != policy.CauseNoMatch || !strings.Contains(d.Reason, `"bad": ipv6.perNodeMaskSize: dual stack needs equal addresses per node`) {
		t.Fatalf("got %v %q", d.Code, d.Reason)
	}
	good := cfg("good", nil, v4spec("10.1.0.0/16", 24), nil)
	if d := decide(t, bad, good); d.Code != policy.Decided || !slices.Equal(d.Configs, []string{"good"}) {
		t.Fatalf("got %v %v", d.Code, d.Configs)
	}
}

func TestValidateConfig(t *testing.T) {
	tests := []struct {
		name string
		c    policy.CIDRConfigView
		want string
	}{
		{"valid v4", cfg("a", nil, v4spec("10.0.0.0/16", 24), nil), ""},
		{"valid dual stack (32-24 == 128-120)", cfg("a", nil, v4spec("10.0.0.0/16", 24), v4spec("fd00::/104", 120)), ""},
		{"no name", cfg("", nil, v4spec("10.0.0.0/16", 24), nil), "name: must not be empty"},
		{"no family", cfg("a", nil, nil, nil), "ipv4, ipv6: at least one family"},
		{"unset CIDR", cfg("a", nil, &policy.CIDRSpec{PerNodeMaskSize: 24}, nil), "ipv4.cidr: must be set"},
		{"IPv6 CIDR in ipv4", cfg("a", nil, v4spec("fd00::/104", 120), nil), "ipv4.cidr: fd00::/104 is not of this family"},
		{"IPv4 CIDR in ipv6", cfg("a", nil, nil, v4spec("10.0.0.0/16", 24)), "ipv6.cidr: 10.0.0.0/16 is not of this family"},
		{"host bits", cfg("a", nil, v4spec("10.0.0.1/16", 24), nil), "ipv4.cidr: 10.0.0.1/16 has host bits set"},
		{"mask shorter than CIDR", cfg("a", nil, v4spec("10.0.0.0/16", 8), nil), "ipv4.perNodeMaskSize: 8 must be between"},
		{"mask too long", cfg("a", nil, v4spec("10.0.0.0/16", 33), nil), "ipv4.perNodeMaskSize: 33"},
		{"unequal dual stack", cfg("a", nil, v4spec("10.0.0.0/16", 24), v4spec("fd00::/104", 112)), "ipv6.perNodeMaskSize: dual stack"},
		{"bad selector", cfg("a", map[string]string{"bad key": "x"}, v4spec("10.0.0.0/16", 24), nil), "nodeSelector: invalid label selector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateConfig(&tt.c)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ValidateConfig = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestPodsSkipAndConfig(t *testing.T) {
	d, err := New().SelectPodPools(context.Background(), &policy.PodRequest{})
	if err != nil || d.Code != policy.Skip {
		t.Fatalf("SelectPodPools = %v %v, want Skip", d, err)
	}
	if _, err := FromConfig(map[string]any{}); err != nil {
		t.Fatal(err)
	}
	if _, err := FromConfig(map[string]any{"x": 1}); err == nil || !strings.Contains(err.Error(), `config field "x"`) {
		t.Fatalf("FromConfig = %v", err)
	}
}

func benchConfigs() []policy.CIDRConfigView {
	var cs []policy.CIDRConfigView
	for i := range 20 {
		sel := map[string]string{}
		switch i % 4 {
		case 0:
			sel["zone"] = fmt.Sprintf("z%d", i%3)
		case 1:
			sel["node.kubernetes.io/instance-type"] = "medium"
		case 2:
			sel["rack"] = fmt.Sprintf("rack%d", i%2)
			sel["zone"] = "z1"
		}
		c := cfg(fmt.Sprintf("cidr-%02d", i), sel,
			v4spec(fmt.Sprintf("10.%d.0.0/16", i), 24+(i%3)), v4spec(fmt.Sprintf("fd00:0:%x::/104", i), 120+(i%3)))
		c.FreeBlocks = uint64(i % 5)
		cs = append(cs, c)
	}
	return cs
}

// BenchmarkDecision: 20 dual-stack configs, about half of them matching the node.
func BenchmarkDecision(b *testing.B) {
	req := &policy.NodeRequest{Node: node, Configs: benchConfigs()}
	p := New()
	ctx := context.Background()
	if d, _ := p.SelectNodeCIDRConfig(ctx, req); d.Code != policy.Decided {
		b.Fatalf("setup: %v %q", d.Code, d.Reason)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = p.SelectNodeCIDRConfig(ctx, req)
	}
}
