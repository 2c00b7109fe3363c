package policychain

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	ciliumannotations "github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
	spiderpoolpriority "github.com/allot-ipam/allot/plugins/policy/spiderpoolpriority"
	"github.com/allot-ipam/allot/plugins/policy/static"
	"github.com/allot-ipam/allot/sdk/policy"
)

// fake is a scripted policy.
type fake struct {
	pod  func(context.Context, *policy.PodRequest) (policy.PodDecision, error)
	node func(context.Context, *policy.NodeRequest) (policy.NodeDecision, error)
}

func (f fake) SelectPodPools(ctx context.Context, r *policy.PodRequest) (policy.PodDecision, error) {
	return f.pod(ctx, r)
}

func (f fake) SelectNodeCIDRConfig(ctx context.Context, r *policy.NodeRequest) (policy.NodeDecision, error) {
	return f.node(ctx, r)
}

func answer(d policy.PodDecision, err error) fake {
	return fake{
		pod: func(context.Context, *policy.PodRequest) (policy.PodDecision, error) { return d, err },
		node: func(context.Context, *policy.NodeRequest) (policy.NodeDecision, error) {
			return policy.NodeDecision{Code: policy.Skip}, nil
		},
	}
}

func decided(v4 ...string) policy.PodDecision {
	return policy.PodDecision{Code: policy.Decided, IPv4: policy.Candidates(v4...), Source: "test rule"}
}

var (
	skip       = answer(policy.PodDecision{Code: policy.Skip, Reason: "nothing to say"}, nil)
	pickA      = answer(decided("a"), nil)
	pickB      = answer(decided("b"), nil)
	noFit      = answer(policy.PodDecision{Code: policy.NoFit, Reason: "pool \"a\" is full"}, nil)
	failing    = answer(policy.PodDecision{}, errors.New("plugin crashed"))
	panicking  = fake{pod: func(context.Context, *policy.PodRequest) (policy.PodDecision, error) { panic("boom") }}
	hanging    = fake{pod: func(context.Context, *policy.PodRequest) (policy.PodDecision, error) { select {} }}
	ctxHonours = fake{pod: func(ctx context.Context, _ *policy.PodRequest) (policy.PodDecision, error) {
		<-ctx.Done()
		return policy.PodDecision{}, ctx.Err()
	}}
)

func podReq() *policy.PodRequest {
	return &policy.PodRequest{
		Pod:   policy.Pod{Namespace: "ns", Name: "p", Annotations: map[string]string{}},
		CNI:   policy.CNIRequest{IfName: "eth0"},
		Pools: []policy.PoolView{{Name: "a", Family: policy.IPv4, Free: 1}, {Name: "b", Family: policy.IPv4, Free: 1}, {Name: "c", Family: policy.IPv6, Free: 1}, {Name: "default", Family: policy.IPv4, Free: 1}},
	}
}

func chain(t *testing.T, fb policy.PoolPolicy, timeout time.Duration, links ...policy.PoolPolicy) (*Chain, *bytes.Buffer, *[]string) {
	t.Helper()
	var ls []Link
	for i, p := range links {
		ls = append(ls, Link{Name: string(rune('a'+i)) + "-policy", Policy: p})
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	var errs []string
	cfg := Config{Policies: ls, Timeout: timeout, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		OnError: func(name string, err error) { mu.Lock(); errs = append(errs, name+": "+err.Error()); mu.Unlock() }}
	if fb != nil {
		cfg.Fallback = &Link{Name: "fb", Policy: fb}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, &logs, &errs
}

func TestChainFlow(t *testing.T) {
	tests := []struct {
		name     string
		links    []policy.PoolPolicy
		fallback policy.PoolPolicy
		timeout  time.Duration
		code     policy.Code
		v4       []string
		source   string
		reason   string
		err      string
		errIs    error
		reported int
	}{
		{name: "first decided wins", links: []policy.PoolPolicy{pickA, pickB}, code: policy.Decided, v4: []string{"a"}, source: "a-policy: test rule"},
		{name: "skip falls through", links: []policy.PoolPolicy{skip, pickB}, code: policy.Decided, v4: []string{"b"}, source: "b-policy: test rule"},
		{name: "NoFit stops the chain", links: []policy.PoolPolicy{noFit, pickB}, code: policy.NoFit, reason: `pool "a" is full`, source: "a-policy"},
		{name: "all skip is NoFit naming the chain", links: []policy.PoolPolicy{skip, skip}, code: policy.NoFit,
			reason: "no policy in chain [a-policy b-policy] chose a pool (a-policy: nothing to say; b-policy: nothing to say)"},
		{name: "error without fallback fails the request", links: []policy.PoolPolicy{failing, pickB},
			err: `policychain: policy "a-policy": plugin crashed`, reported: 1},
		{name: "error with fallback: the fallback answers", links: []policy.PoolPolicy{failing, pickB}, fallback: pickA,
			code: policy.Decided, v4: []string{"a"}, source: "fb (fallback for a-policy): test rule", reported: 1},
		{name: "fallback that skips lets the chain continue", links: []policy.PoolPolicy{failing, pickB}, fallback: skip,
			code: policy.Decided, v4: []string{"b"}, reported: 1},
		{name: "fallback failing too joins both errors", links: []policy.PoolPolicy{failing}, fallback: failing,
			err: `policy "a-policy": plugin crashed; fallback "fb": plugin crashed`, reported: 2},
		{name: "panic is contained", links: []policy.PoolPolicy{panicking}, err: "policy panicked: boom", errIs: ErrPolicyPanic, reported: 1},
		{name: "panic with fallback", links: []policy.PoolPolicy{panicking}, fallback: pickB, code: policy.Decided, v4: []string{"b"}, reported: 1},
		{name: "hung policy is abandoned after the timeout", links: []policy.PoolPolicy{hanging}, timeout: 20 * time.Millisecond,
			err: "policy timed out after 20ms", errIs: ErrPolicyTimeout, reported: 1},
		{name: "hung policy with fallback", links: []policy.PoolPolicy{hanging}, fallback: pickA, timeout: 20 * time.Millisecond,
			code: policy.Decided, v4: []string{"a"}, reported: 1},
		{name: "policy honouring its deadline", links: []policy.PoolPolicy{ctxHonours}, fallback: pickA, timeout: 10 * time.Millisecond,
			code: policy.Decided, v4: []string{"a"}, reported: 1},
		{name: "invalid output goes to the fallback", links: []policy.PoolPolicy{answer(decided("zz"), nil)}, fallback: pickB,
			code: policy.Decided, v4: []string{"b"}, reported: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, logs, errs := chain(t, tt.fallback, tt.timeout, tt.links...)
			d, err := c.SelectPodPools(context.Background(), podReq())
			if len(*errs) != tt.reported {
				t.Errorf("OnError called %d times (%v), want %d", len(*errs), *errs, tt.reported)
			}
			if tt.reported > 0 && !strings.Contains(logs.String(), "pool policy failed") {
				t.Errorf("no slog warning: %q", logs.String())
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				if tt.errIs != nil && !errors.Is(err, tt.errIs) {
					t.Fatalf("err %v is not %v", err, tt.errIs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Code != tt.code {
				t.Fatalf("Code = %v (%q), want %v", d.Code, d.Reason, tt.code)
			}
			var got []string
			for _, c := range d.IPv4 {
				got = append(got, c.Pool)
			}
			if !slices.Equal(got, tt.v4) {
				t.Errorf("IPv4 = %v, want %v", got, tt.v4)
			}
			if tt.source != "" && d.Source != tt.source {
				t.Errorf("Source = %q, want %q", d.Source, tt.source)
			}
			if tt.reason != "" && d.Reason != tt.reason {
				t.Errorf("Reason = %q, want %q", d.Reason, tt.reason)
			}
		})
	}
}

func TestCallerCancelSkipsFallback(t *testing.T) {
	c, _, errs := chain(t, pickA, 0, ctxHonours)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.SelectPodPools(ctx, podReq())
	if !errors.Is(err, context.Canceled) || len(*errs) != 0 {
		t.Fatalf("err = %v, reported %v; want context.Canceled and no fallback", err, *errs)
	}
}

// Plugin output is untrusted: every broken answer is an error naming the policy and the field.
func TestInvalidPodDecisions(t *testing.T) {
	tests := []struct {
		name string
		d    policy.PodDecision
		want string
	}{
		{"unknown code", policy.PodDecision{Code: 7}, "code: Code(7) is not Decided, Skip or NoFit"},
		{"unknown cause", policy.PodDecision{Code: policy.NoFit, Reason: "r", Cause: 9}, "cause: Cause(9) is not a cause of this contract"},
		{"unknown pool", decided("zz"), `ipv4[0].pool: "zz" is not a pool of this request`},
		{"wrong family", policy.PodDecision{Code: policy.Decided, IPv6: policy.Candidates("a")}, `ipv6[0].pool: "a" is not an IPv6 pool`},
		{"duplicate", decided("a", "b", "a"), `ipv4[2].pool: "a" is listed twice`},
		{"empty name", decided(""), "ipv4[0].pool: must not be empty"},
		{"decided without candidates", policy.PodDecision{Code: policy.Decided}, "code Decided needs at least one candidate"},
		{"NoFit without reason", policy.PodDecision{Code: policy.NoFit, Reason: "  "}, "reason: code NoFit needs a reason"},
		{"Skip with candidates", policy.PodDecision{Code: policy.Skip, IPv4: policy.Candidates("a")}, "code Skip must carry no candidates"},
		{"NoFit with candidates", policy.PodDecision{Code: policy.NoFit, Reason: "x", IPv4: policy.Candidates("a")}, "code NoFit must carry no candidates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, _ := chain(t, nil, 0, answer(tt.d, nil))
			_, err := c.SelectPodPools(context.Background(), podReq())
			if err == nil || !errors.Is(err, ErrInvalidDecision) || !strings.Contains(err.Error(), `policy "a-policy"`) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidDecision naming a-policy and %q", err, tt.want)
			}
		})
	}
}

func TestReasonIsBounded(t *testing.T) {
	long := strings.Repeat("é", 3000) + "\xff"
	c, _, _ := chain(t, nil, 0, answer(policy.PodDecision{Code: policy.NoFit, Reason: long}, nil))
	d, err := c.SelectPodPools(context.Background(), podReq())
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Reason) > maxTextLen+len("…") || !strings.HasSuffix(d.Reason, "…") {
		t.Fatalf("reason not bounded: %d bytes", len(d.Reason))
	}
}

func TestNodeDecisions(t *testing.T) {
	req := &policy.NodeRequest{Node: policy.Node{Name: "n1"}, Configs: []policy.CIDRConfigView{{Name: "c1"}, {Name: "c2"}}}
	node := func(d policy.NodeDecision, err error) fake {
		return fake{node: func(context.Context, *policy.NodeRequest) (policy.NodeDecision, error) { return d, err }}
	}
	nskip := node(policy.NodeDecision{Code: policy.Skip}, nil)
	tests := []struct {
		name  string
		links []policy.PoolPolicy
		fb    policy.PoolPolicy
		want  []string
		code  policy.Code
		err   string
	}{
		{"skip then decide", []policy.PoolPolicy{nskip, node(policy.NodeDecision{Code: policy.Decided, Configs: []string{"c2", "c1"}}, nil)}, nil, []string{"c2", "c1"}, policy.Decided, ""},
		{"all skip", []policy.PoolPolicy{nskip}, nil, nil, policy.NoFit, ""},
		{"unknown config", []policy.PoolPolicy{node(policy.NodeDecision{Code: policy.Decided, Configs: []string{"c9"}}, nil)}, nil, nil, 0, `configs[0]: "c9" is not a CIDR config`},
		{"duplicate config", []policy.PoolPolicy{node(policy.NodeDecision{Code: policy.Decided, Configs: []string{"c1", "c1"}}, nil)}, nil, nil, 0, `configs[1]: "c1" is listed twice`},
		{"unknown code", []policy.PoolPolicy{node(policy.NodeDecision{Code: -1}, nil)}, nil, nil, 0, "code: Code(-1)"},
		{"error with fallback", []policy.PoolPolicy{node(policy.NodeDecision{}, errors.New("down"))},
			node(policy.NodeDecision{Code: policy.Decided, Configs: []string{"c1"}}, nil), []string{"c1"}, policy.Decided, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, _ := chain(t, tt.fb, 0, tt.links...)
			d, err := c.SelectNodeCIDRConfig(context.Background(), req)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Code != tt.code || !slices.Equal(d.Configs, tt.want) {
				t.Fatalf("got %v %v (%q), want %v %v", d.Code, d.Configs, d.Reason, tt.code, tt.want)
			}
			if d.Code == policy.NoFit && !strings.Contains(d.Reason, "no policy in chain [a-policy] chose a CIDR config") {
				t.Fatalf("reason = %q", d.Reason)
			}
		})
	}
}

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"empty", Config{}, "policies: at least one policy"},
		{"no name", Config{Policies: []Link{{Policy: pickA}}}, "policies[0].name: must not be empty"},
		{"nil policy", Config{Policies: []Link{{Name: "x"}}}, `policies[0] ("x"): policy is nil`},
		{"duplicate", Config{Policies: []Link{{Name: "x", Policy: pickA}, {Name: "x", Policy: pickB}}}, `policies[1].name: "x" appears twice`},
		{"fallback without name", Config{Policies: []Link{{Name: "x", Policy: pickA}}, Fallback: &Link{Policy: pickB}}, "fallback.name"},
		{"fallback nil", Config{Policies: []Link{{Name: "x", Policy: pickA}}, Fallback: &Link{Name: "f"}}, `fallback ("f"): policy is nil`},
		{"negative timeout", Config{Policies: []Link{{Name: "x", Policy: pickA}}, Timeout: -1}, "timeout: -1ns must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want %q", err, tt.want)
			}
		})
	}
	c, err := New(Config{Policies: []Link{{Name: "x", Policy: pickA}, {Name: "y", Policy: pickB}}})
	if err != nil || !slices.Equal(c.Names(), []string{"x", "y"}) {
		t.Fatalf("Names = %v, %v", c.Names(), err)
	}
}

// Built-ins composed: spiderpool-priority has no source for this pod and skips, so
// cilium-annotations answers with the pool named "default"; static is never reached.
func TestBuiltinChain(t *testing.T) {
	cil, err := ciliumannotations.New(ciliumannotations.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Policies: []Link{
		{Name: spiderpoolpriority.Name, Policy: spiderpoolpriority.New()},
		{Name: ciliumannotations.Name, Policy: cil},
		{Name: static.Name, Policy: static.New()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.SelectPodPools(context.Background(), podReq())
	if err != nil || d.Code != policy.Decided || d.IPv4[0].Pool != "default" || !strings.HasPrefix(d.Source, "cilium-annotations: ") {
		t.Fatalf("got %+v, %v", d, err)
	}
}

// BenchmarkDecision: the spiderpool-priority built-in behind a chain with validation, on the
// same 20-pool input as the policy's own benchmark shape.
func BenchmarkDecision(b *testing.B) {
	req := podReq()
	req.Pools = nil
	for i := range 20 {
		fam := policy.IPv4
		if i >= 16 {
			fam = policy.IPv6
		}
		req.Pools = append(req.Pools, policy.PoolView{Name: string(rune('a'+i)) + "-pool", Family: fam, Free: 10, Default: i%4 == 0,
			NodeName: []string{"n1"}})
	}
	req.Node.Name = "n1"
	c, err := New(Config{Policies: []Link{{Name: spiderpoolpriority.Name, Policy: spiderpoolpriority.New()}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if d, err := c.SelectPodPools(ctx, req); err != nil || d.Code != policy.Decided {
		b.Fatalf("setup: %v %v", d, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = c.SelectPodPools(ctx, req)
	}
}

// An inline link runs on the caller's goroutine: its deadline is the caller's, not the
// chain's timeout, and a panic is still contained and falls through to the fallback. Under
// testing/synctest the slow link's sleep is simulated time.
func TestInlineLink(t *testing.T) {
	synctest.Test(t, testInlineLink)
}

func testInlineLink(t *testing.T) {
	slow := fake{pod: func(ctx context.Context, r *policy.PodRequest) (policy.PodDecision, error) {
		if _, ok := ctx.Deadline(); ok {
			return policy.PodDecision{}, errors.New("inline link got the chain's deadline")
		}
		time.Sleep(30 * time.Millisecond) // sleep: simulated (synctest): longer than the chain's 5ms bound
		return decided("a"), nil
	}}
	c, err := New(Config{Policies: []Link{{Name: "slow", Policy: slow, Inline: true}}, Timeout: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.SelectPodPools(context.Background(), podReq())
	if err != nil || d.Code != policy.Decided || d.IPv4[0].Pool != "a" {
		t.Fatalf("inline: %+v %v", d, err)
	}
	c, err = New(Config{Policies: []Link{{Name: "boom", Policy: panicking, Inline: true}}, Fallback: &Link{Name: "fb", Policy: pickB}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d, err = c.SelectPodPools(context.Background(), podReq())
	if err != nil || d.Code != policy.Decided || d.IPv4[0].Pool != "b" {
		t.Fatalf("inline panic: %+v %v", d, err)
	}
}

// A chain is inline only if every link, fallback included, is: the node's manager then
// bounds its decisions with no timer of its own.
func TestInlineOnlyIfEveryLinkIs(t *testing.T) {
	p := answer(decided("a"), nil)
	for _, tc := range []struct {
		links    []Link
		fallback *Link
		want     bool
	}{
		{[]Link{{Name: "x", Policy: p, Inline: true}}, nil, true},
		{[]Link{{Name: "x", Policy: p, Inline: true}, {Name: "y", Policy: p}}, nil, false},
		{[]Link{{Name: "x", Policy: p, Inline: true}}, &Link{Name: "f", Policy: p}, false},
		{[]Link{{Name: "x", Policy: p, Inline: true}}, &Link{Name: "f", Policy: p, Inline: true}, true},
	} {
		c, err := New(Config{Policies: tc.links, Fallback: tc.fallback})
		if err != nil {
			t.Fatal(err)
		}
		if c.Inline() != tc.want {
			t.Errorf("%v (fallback %v): Inline() = %v, want %v", c.Names(), tc.fallback, c.Inline(), tc.want)
		}
	}
}
