package awseni_test

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/eni"
	awseni "github.com/allot-ipam/allot/plugins/cloud/awseni"
	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/test/ec2fake"
)

// The harness runs the real engine (core/eni) over the real backend and the real
// aws-sdk-go-v2 client against ec2fake, with simulated agents: each node runs a number of
// "pods" that take addresses from the pool the engine publishes and answer the release
// handshake the way the agent will.

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type pools struct {
	mu sync.Mutex
	m  map[string]cloud.NodeInventory
}

func (p *pools) Publish(_ context.Context, node string, inv cloud.NodeInventory) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]cloud.NodeInventory{}
	}
	p.m[node] = inv
	return nil
}

func (p *pools) addrs(node string) []netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []netip.Addr
	for _, ifc := range p.m[node].Interfaces {
		out = append(out, eni.PoolAddrs(ifc)...) // as spec.ipam.pool lists them
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

type simNode struct {
	ref  cloud.NodeRef
	mod  func(*eni.NodeState) // per-node overrides (spec.eni), if any
	want int                  // pods that should run
	pods []netip.Addr         // addresses the node's pods hold
}

type harness struct {
	t       testing.TB
	ctx     context.Context
	fake    *ec2fake.Server
	url     string
	vpc     string
	subnets []string
	clock   *clock
	hs      *eni.MemoryHandshake
	pools   *pools
	metrics *awseni.Metrics
	backend *awseni.Backend
	engine  *eni.Engine
	nodes   []*simNode
	ecfg    eni.Config
	bcfg    awseni.Config
}

type setup struct {
	fake    ec2fake.Options
	subnets []netip.Prefix // all in us-east-1a; nodes' eth0 in the first
	ipv6    netip.Prefix   // the first subnet's IPv6 block, if any
	types   []string       // instance types, cycled over the nodes
	nodes   int
	ecfg    func(*eni.Config)
	bcfg    func(*awseni.Config)
}

func newHarness(t testing.TB, s setup) *harness {
	t.Helper()
	h := &harness{t: t, ctx: context.Background(), clock: &clock{now: time.Unix(1_700_000_000, 0)}, hs: &eni.MemoryHandshake{}, pools: &pools{}}
	h.fake = ec2fake.New(s.fake)
	h.vpc = h.fake.AddVPC(ec2fake.VPC{CIDR: netip.MustParsePrefix("10.0.0.0/8")})
	for i, p := range s.subnets {
		sn := ec2fake.Subnet{VPC: h.vpc, AZ: "us-east-1a", CIDR: p, Tags: map[string]string{"index": fmt.Sprint(i)}}
		if i == 0 {
			sn.IPv6CIDR = s.ipv6
		}
		id, err := h.fake.AddSubnet(sn)
		if err != nil {
			t.Fatal(err)
		}
		h.subnets = append(h.subnets, id)
	}
	sg := h.fake.AddSecurityGroup(ec2fake.SecurityGroup{VPC: h.vpc, Name: "nodes"})
	for i := 0; i < s.nodes; i++ {
		typ := s.types[i%len(s.types)]
		id, err := h.fake.AddInstance(ec2fake.Instance{Type: typ, Subnet: h.subnets[0], SecurityGroups: []string{sg}})
		if err != nil {
			t.Fatal(err)
		}
		h.nodes = append(h.nodes, &simNode{ref: cloud.NodeRef{Name: fmt.Sprintf("node-%04d", i), ProviderID: "aws:///us-east-1a/" + id, InstanceType: typ, Zone: "us-east-1a"}})
	}
	h.url = ec2fake.Start(t, h.fake)
	h.ecfg = eni.DefaultConfig()
	h.ecfg.MinPassInterval = 0
	if s.ecfg != nil {
		s.ecfg(&h.ecfg)
	}
	h.bcfg = awseni.DefaultConfig()
	h.bcfg.QPS, h.bcfg.Burst, h.bcfg.MaxBackoff = 0, 0, awseni.Duration{Duration: 20 * time.Millisecond}
	if s.bcfg != nil {
		s.bcfg(&h.bcfg)
	}
	h.restart()
	return h
}

// restart builds a new backend and engine (empty caches) over the same EC2 and handshake:
// an operator restart.
func (h *harness) restart() {
	h.t.Helper()
	h.metrics = awseni.NewMetrics(nil)
	client := ec2fake.NewClient(h.url, awseni.ClientOptions(h.bcfg.QPS, h.bcfg.Burst, h.bcfg.MaxAttempts, h.bcfg.MaxBackoff.Duration, h.metrics))
	b, err := awseni.NewWithAPI(client, h.bcfg, awseni.Options{Metrics: h.metrics})
	if err != nil {
		h.t.Fatal(err)
	}
	e, err := eni.New(b, h.ecfg, eni.Options{Handshake: eni.Checked(h.hs, eni.OperatorMayApply, "operator"), Publisher: h.pools, Now: h.clock.Now})
	if err != nil {
		h.t.Fatal(err)
	}
	h.backend, h.engine = b, e
	for _, n := range h.nodes {
		h.report(n)
	}
}

func (h *harness) report(n *simNode) {
	s := eni.NodeState{Ref: n.ref, Used: append([]netip.Addr(nil), n.pods...), Pending: max(n.want-len(n.pods), 0)}
	if n.mod != nil {
		n.mod(&s)
	}
	if err := h.engine.UpsertNode(s); err != nil {
		h.t.Fatal(err)
	}
}

// agents runs every node's agent once: answer the handshake, stop pods beyond want, start
// pods on free addresses, report used and pending to the engine.
func (h *harness) agents() {
	h.t.Helper()
	agentSide := eni.Checked(h.hs, eni.AgentMayApply, "agent")
	for _, n := range h.nodes {
		name := n.ref.Name
		states, _ := h.hs.States(h.ctx, name)
		held := map[netip.Addr]bool{}
		for _, a := range n.pods {
			held[a] = true
		}
		if ts := eni.AgentAnswer(states, func(a netip.Addr) bool { return held[a] }); len(ts) > 0 {
			if _, err := agentSide.Apply(h.ctx, name, ts); err != nil {
				h.t.Fatal(err)
			}
		}
		states, _ = h.hs.States(h.ctx, name)
		if len(n.pods) > n.want {
			n.pods = n.pods[:n.want]
		}
		pool := h.pools.addrs(name)
		inPool := map[netip.Addr]bool{}
		for _, a := range pool {
			inPool[a] = true
		}
		for _, a := range n.pods {
			if !inPool[a] {
				h.t.Fatalf("%s: pod address %s left the node's pool while in use", name, a)
			}
		}
		held = map[netip.Addr]bool{}
		for _, a := range n.pods {
			held[a] = true
		}
		for _, a := range pool {
			if len(n.pods) >= n.want {
				break
			}
			if !held[a] && !eni.Reserved(states[a]) {
				n.pods = append(n.pods, a)
				held[a] = true
			}
		}
		h.report(n)
	}
}

// verify checks what must hold at any time: every pod's address is on its own node's ENIs
// in EC2, no address is held by two pods, and the fake's own bookkeeping is consistent.
func (h *harness) verify() {
	h.t.Helper()
	owner := map[netip.Addr]string{}
	for _, n := range h.nodes {
		id, _ := awseni.InstanceID(n.ref)
		onNode := map[netip.Addr]bool{}
		for _, e := range h.fake.InstanceENIs(id) {
			for _, a := range e.Secondary {
				onNode[a] = true
			}
			for _, p := range e.Prefixes4 {
				for a := p.Addr(); p.Contains(a); a = a.Next() {
					onNode[a] = true
				}
			}
		}
		for _, a := range n.pods {
			if prev, dup := owner[a]; dup {
				h.t.Fatalf("address %s held by pods on %s and %s", a, prev, n.ref.Name)
			}
			owner[a] = n.ref.Name
			if !onNode[a] {
				h.t.Fatalf("%s: pod address %s is not on the node's ENIs in EC2", n.ref.Name, a)
			}
		}
	}
	if err := h.fake.CheckInvariants(); err != nil {
		h.t.Fatal(err)
	}
}

// converge runs agents and passes until every node runs all its pods with no need and
// (if settle) no excess and nothing in the handshake; the clock advances by step each round.
func (h *harness) converge(maxRounds int, step time.Duration, settle bool) int {
	h.t.Helper()
	for round := 1; round <= maxRounds; round++ {
		h.agents()
		h.engine.Pass(h.ctx)
		h.verify()
		h.clock.Advance(step)
		if h.done(settle) {
			return round
		}
	}
	for _, n := range h.nodes {
		st, _ := h.engine.Status(n.ref.Name)
		h.t.Logf("%s want=%d pods=%d status=%+v", n.ref.Name, n.want, len(n.pods), st)
	}
	h.t.Fatalf("no convergence in %d rounds", maxRounds)
	return 0
}

func (h *harness) done(settle bool) bool {
	for _, n := range h.nodes {
		st, ok := h.engine.Status(n.ref.Name)
		if !ok || len(n.pods) != n.want || st.Needed != 0 || st.Used != len(n.pods) {
			return false
		}
		if settle && (st.Excess != 0 || st.Releasing != 0) {
			return false
		}
	}
	return true
}

func (h *harness) mutatingCalls() int {
	n := 0
	for action, st := range h.fake.Stats() {
		switch action {
		case "CreateNetworkInterface", "AttachNetworkInterface", "ModifyNetworkInterfaceAttribute",
			"AssignPrivateIpAddresses", "UnassignPrivateIpAddresses", "DeleteNetworkInterface", "CreateTags":
			n += st.Calls
		}
	}
	return n
}
