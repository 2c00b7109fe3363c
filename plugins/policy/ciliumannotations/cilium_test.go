package ciliumannotations

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
		{Name: "default", Family: policy.IPv4, Free: 1},
		{Name: "default", Family: policy.IPv6, Free: 1},
		{Name: "green-pool", Family: policy.IPv4, Free: 1},
		{Name: "green-pool", Family: policy.IPv6, Free: 1},
		{Name: "v6-only", Family: policy.IPv6, Free: 1},
	}
}

func names(cs []policy.Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Pool)
	}
	return out
}

// Cilium's multi-pool documentation, "Architecture": rules 1-3 in order.
func TestCiliumRules(t *testing.T) {
	const key = DefaultAnnotation
	tests := []struct {
		name   string
		podAnn map[string]string
		nsAnn  map[string]string
		pools  []policy.PoolView
		code   policy.Code
		v4, v6 []string
		source string
		reason string
	}{
		{"rule 1: pod annotation", map[string]string{key: "green-pool"}, map[string]string{key: "v6-only"}, pools(), policy.Decided,
			[]string{"green-pool"}, []string{"green-pool"}, "pod annotation " + key, ""},
		{"rule 2: namespace annotation when the pod has none", nil, map[string]string{key: "v6-only"}, pools(), policy.Decided,
			nil, []string{"v6-only"}, "namespace annotation " + key, ""},
		{"rule 3: pool named default", nil, nil, pools(), policy.Decided,
			[]string{"default"}, []string{"default"}, SourceDefaultPool, ""},
		{"per-family annotation for one family, default for the other", map[string]string{DefaultIPv4Annotation: "green-pool"}, nil, pools(), policy.Decided,
			[]string{"green-pool"}, []string{"default"}, "pod annotation " + DefaultIPv4Annotation + ", " + SourceDefaultPool, ""},
		{"per-family annotation wins over ip-pool", map[string]string{DefaultIPv6Annotation: "v6-only", key: "green-pool"}, nil, pools(), policy.Decided,
			[]string{"green-pool"}, []string{"v6-only"}, "pod annotation " + key + ", pod annotation " + DefaultIPv6Annotation, ""},
		{"namespace per-family annotation after the pod's ip-pool", map[string]string{key: "green-pool"}, map[string]string{DefaultIPv6Annotation: "v6-only"}, pools(), policy.Decided,
			[]string{"green-pool"}, []string{"green-pool"}, "pod annotation " + key, ""},
		{"per-family key naming a pool without that family", map[string]string{DefaultIPv4Annotation: "v6-only"}, nil, pools(), policy.NoFit,
			nil, nil, "pod annotation " + DefaultIPv4Annotation, `pod annotation ipam.cilium.io/ipv4-pool names pool "v6-only", which has no IPv4 CIDRs`},
		{"pod annotation names a missing pool", map[string]string{key: "nope"}, nil, pools(), policy.NoFit,
			nil, nil, "pod annotation " + key, `pod annotation ipam.cilium.io/ip-pool names pool "nope", which does not exist`},
		{"namespace annotation names a missing pool", nil, map[string]string{key: "nope"}, pools(), policy.NoFit,
			nil, nil, "namespace annotation " + key, `namespace annotation ipam.cilium.io/ip-pool names pool "nope", which does not exist`},
		{"empty annotation counts as absent, as in Cilium", map[string]string{key: ""}, map[string]string{key: "green-pool"}, pools(), policy.Decided,
			[]string{"green-pool"}, []string{"green-pool"}, "namespace annotation " + key, ""},
		{"no default pool", nil, nil, []policy.PoolView{{Name: "x", Family: policy.IPv4}}, policy.NoFit, nil, nil, SourceDefaultPool,
			`no ipam.cilium.io/ip-pool annotation on pod team/web-0 or namespace "team", no pool selector matched, and no pool named "default"`},
	}
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &policy.PodRequest{
				Pod:       policy.Pod{Namespace: "team", Name: "web-0", Annotations: tt.podAnn},
				Namespace: policy.Namespace{Name: "team", Annotations: tt.nsAnn},
				Pools:     tt.pools,
			}
			d, err := p.SelectPodPools(context.Background(), req)
			if err != nil {
				t.Fatal(err)
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

// Cilium's pool selectors (podSelector / namespaceSelector, allot's podAffinity and
// namespaceAffinity): used when no annotation names a pool; one match wins, several are an
// error, none falls back to "default" unless require-pool-match says otherwise.
func TestCiliumSelectors(t *testing.T) {
	sel := func(k, v string) *policy.LabelSelector {
		return &policy.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	base := func() []policy.PoolView {
		ps := pools()
		return append(ps,
			policy.PoolView{Name: "web", Family: policy.IPv4, Free: 1, PodAffinity: sel("app", "web")},
			policy.PoolView{Name: "team-ns", Family: policy.IPv4, Free: 1, NamespaceAffinity: sel("team", "a")},
			policy.PoolView{Name: "by-name", Family: policy.IPv6, Free: 1, PodAffinity: sel(PodNameLabel, "web-0")},
		)
	}
	p, _ := New(Config{})
	strict, _ := New(Config{RequirePoolMatch: true})
	tests := []struct {
		name           string
		pol            *Policy
		podLbl, nsLbl  map[string]string
		podAnn, nsAnn  map[string]string
		code           policy.Code
		v4, v6, reason string
	}{
		{"pod selector", p, map[string]string{"app": "web"}, nil, nil, nil, policy.Decided, "web", "by-name", ""},
		{"namespace selector", p, nil, map[string]string{"team": "a"}, nil, nil, policy.Decided, "team-ns", "by-name", ""},
		{"two matches refuse", p, map[string]string{"app": "web"}, map[string]string{"team": "a"}, nil, nil, policy.NoFit, "", "",
			"2 pools' selectors match pod team/web-0 for IPv4 (web, team-ns): refusing to choose"},
		{"annotation wins over selectors", p, map[string]string{"app": "web"}, nil, map[string]string{DefaultAnnotation: "green-pool"}, nil, policy.Decided, "green-pool", "green-pool", ""},
		{"no match: default", p, nil, nil, nil, nil, policy.Decided, "default", "by-name", ""},
		{"no match, pod requires a match", p, nil, nil, map[string]string{RequirePoolMatchAnnotation: "true"}, nil, policy.NoFit, "", "",
			"no pool's selectors match pod team/web-0 for IPv4 and pod annotation ipam.cilium.io/require-pool-match requires a match"},
		{"no match, namespace requires a match", p, nil, nil, nil, map[string]string{RequirePoolMatchAnnotation: "true"}, policy.NoFit, "", "",
			"no pool's selectors match pod team/web-0 for IPv4 and namespace annotation ipam.cilium.io/require-pool-match requires a match"},
		{"no match, config requires a match", strict, nil, nil, nil, nil, policy.NoFit, "", "",
			"no pool's selectors match pod team/web-0 for IPv4 and the policy's requirePoolMatch setting requires a match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &policy.PodRequest{
				Pod:       policy.Pod{Namespace: "team", Name: "web-0", Labels: tt.podLbl, Annotations: tt.podAnn},
				Namespace: policy.Namespace{Name: "team", Labels: tt.nsLbl, Annotations: tt.nsAnn},
				Pools:     base(),
			}
			d, err := tt.pol.SelectPodPools(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			first := func(cs []policy.Candidate) string {
				if len(cs) == 0 {
					return ""
				}
				return cs[0].Pool
			}
			if d.Code != tt.code || d.Reason != tt.reason || first(d.IPv4) != tt.v4 || first(d.IPv6) != tt.v6 {
				t.Fatalf("got %v v4=%q v6=%q reason %q; want %v %q %q %q", d.Code, first(d.IPv4), first(d.IPv6), d.Reason, tt.code, tt.v4, tt.v6, tt.reason)
			}
		})
	}
}

func TestCustomKeyAndConfig(t *testing.T) {
	p, err := FromConfig(map[string]any{"annotation": "example.com/pool"})
	if err != nil {
		t.Fatal(err)
	}
	req := &policy.PodRequest{Pod: policy.Pod{Annotations: map[string]string{"example.com/pool": "green-pool", DefaultAnnotation: "v6-only"}}, Pools: pools()}
	d, _ := p.SelectPodPools(context.Background(), req)
	if d.Code != policy.Decided || d.Source != "pod annotation example.com/pool" || names(d.IPv4)[0] != "green-pool" {
		t.Fatalf("got %+v", d)
	}
	for _, tt := range []struct {
		cfg  map[string]any
		want string
	}{
		{map[string]any{"annotation": 1}, `config field "annotation": must be a string, got int`},
		{map[string]any{"annotation": "bad key!"}, `config field "annotation": "bad key!" is not a valid annotation key`},
		{map[string]any{"key": "x"}, `config field "key": unknown field`},
		{map[string]any{"requirePoolMatch": "yes"}, `config field "requirePoolMatch": must be a boolean, got string`},
		{map[string]any{"ipv4Annotation": "bad key!"}, `config field "ipv4Annotation": "bad key!" is not a valid annotation key`},
	} {
		if _, err := FromConfig(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("FromConfig(%v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
	if d, err := p.SelectNodeCIDRConfig(context.Background(), &policy.NodeRequest{}); err != nil || d.Code != policy.Skip {
		t.Fatalf("node = %v %v", d, err)
	}
}

// The annotation value is arbitrary user input: whatever it is, the answer is a valid pool
// of the right family or a NoFit with a reason.
func FuzzSelectPodPools(f *testing.F) {
	f.Add("green-pool", "default")
	f.Add("", "x")
	f.Add("\x00", "v6-only")
	p, _ := New(Config{})
	f.Fuzz(func(t *testing.T, podVal, nsVal string) {
		req := &policy.PodRequest{
			Pod:       policy.Pod{Annotations: map[string]string{DefaultAnnotation: podVal}},
			Namespace: policy.Namespace{Annotations: map[string]string{DefaultAnnotation: nsVal}},
			Pools:     pools(),
		}
		d, err := p.SelectPodPools(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		switch d.Code {
		case policy.Decided:
			for _, c := range d.IPv4 {
				if !slices.Contains([]string{podVal, nsVal, DefaultPool}, c.Pool) || policy.LookupPool(req.Pools, c.Pool, policy.IPv4) == nil {
					t.Fatalf("bad v4 candidate %q", c.Pool)
				}
			}
			for _, c := range d.IPv6 {
				if !slices.Contains([]string{podVal, nsVal, DefaultPool}, c.Pool) || policy.LookupPool(req.Pools, c.Pool, policy.IPv6) == nil {
					t.Fatalf("bad v6 candidate %q", c.Pool)
				}
			}
		case policy.NoFit:
			if d.Reason == "" {
				t.Fatal("NoFit without reason")
			}
		default:
			t.Fatalf("unexpected code %v", d.Code)
		}
	})
}

func BenchmarkDecision(b *testing.B) {
	var ps []policy.PoolView
	for i := range 20 {
		fam := policy.IPv4
		if i%2 == 1 {
			fam = policy.IPv6
		}
		ps = append(ps, policy.PoolView{Name: fmt.Sprintf("pool-%02d", i/2), Family: fam, Free: 10})
	}
	req := &policy.PodRequest{
		Pod:       policy.Pod{Namespace: "team", Name: "web-0", Annotations: map[string]string{"app": "web"}},
		Namespace: policy.Namespace{Name: "team", Annotations: map[string]string{DefaultAnnotation: "pool-07"}},
		Pools:     ps,
	}
	p, _ := New(Config{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = p.SelectPodPools(ctx, req)
	}
}

// Every NoFit carries the machine-readable cause a host acts on (sdk/policy.Cause).
func TestNoFitCauses(t *testing.T) {
	web := &policy.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	two := append(pools(),
		policy.PoolView{Name: "web-a", Family: policy.IPv4, Free: 1, PodAffinity: web},
		policy.PoolView{Name: "web-b", Family: policy.IPv4, Free: 1, PodAffinity: web})
	p, _ := New(Config{})
	strict, _ := New(Config{RequirePoolMatch: true})
	tests := []struct {
		name string
		pol  *Policy
		ann  map[string]string
		ps   []policy.PoolView
		want policy.Cause
	}{
		{"two selectors match", p, nil, two, policy.CauseAmbiguous},
		{"annotation names a missing pool", p, map[string]string{DefaultAnnotation: "nope"}, pools(), policy.CauseNoMatch},
		{"family key names a pool without the family", p, map[string]string{DefaultIPv4Annotation: "v6-only"}, pools(), policy.CauseNoMatch},
		{"a match is required and none matches", strict, nil, pools(), policy.CauseNoMatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &policy.PodRequest{Pod: policy.Pod{Namespace: "team", Name: "web-0", Labels: map[string]string{"app": "web"},
				Annotations: tt.ann}, Namespace: policy.Namespace{Name: "team"}, Pools: tt.ps}
			d, err := tt.pol.SelectPodPools(context.Background(), req)
			if err != nil || d.Code != policy.NoFit || d.Cause != tt.want {
				t.Fatalf("got %v %v (%q), %v; want NoFit %v", d.Code, d.Cause, d.Reason, err, tt.want)
			}
		})
	}
}
