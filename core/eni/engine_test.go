package eni

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// memBackend is an in-memory cloud backend: one node, interfaces with limits, one subnet.
type memBackend struct {
	mu       sync.Mutex
	inv      cloud.NodeInventory
	next     netip.Addr
	calls    map[string]int
	failNext map[string]error
}

func newMemBackend(limits cloud.Limits, subnetFree uint64) *memBackend {
	return &memBackend{
		inv: cloud.NodeInventory{
			Interfaces: []cloud.Interface{{ID: "eni-0", Index: 0, Subnet: "subnet-a", Primary: true}},
			Subnets:    []cloud.Subnet{{ID: "subnet-a", VPC: "vpc", Zone: "z", Free: subnetFree}},
			Limits:     limits,
		},
		next:     netip.MustParseAddr("10.0.0.10"),
		calls:    map[string]int{},
		failNext: map[string]error{},
	}
}

func (m *memBackend) Inventory(context.Context, cloud.NodeRef) (cloud.NodeInventory, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["Inventory"]++
	out := m.inv
	out.Interfaces = make([]cloud.Interface, len(m.inv.Interfaces))
	for i, ifc := range m.inv.Interfaces {
		ifc.Addresses = append([]netip.Addr(nil), ifc.Addresses...)
		out.Interfaces[i] = ifc
	}
	out.Subnets = append([]cloud.Subnet(nil), m.inv.Subnets...)
	return out, nil
}

func (m *memBackend) take(n int) []netip.Addr {
	out := make([]netip.Addr, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, m.next)
		m.next = m.next.Next()
	}
	m.inv.Subnets[0].Free -= uint64(n)
	return out
}

func (m *memBackend) fail(op string) error {
	if err, ok := m.failNext[op]; ok {
		delete(m.failNext, op)
		return err
	}
	return nil
}

func (m *memBackend) Allocate(_ context.Context, req cloud.AllocateRequest) (cloud.AllocateResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["Allocate"]++
	if err := m.fail("Allocate"); err != nil {
		return cloud.AllocateResult{}, err
	}
	for i := range m.inv.Interfaces {
		ifc := &m.inv.Interfaces[i]
		if ifc.ID != req.Interface {
			continue
		}
		if len(ifc.Addresses)+req.Count > m.inv.Limits.AddressesPerInterface-1 {
			return cloud.AllocateResult{}, fmt.Errorf("over: %w", cloud.ErrLimitReached)
		}
		got := m.take(req.Count)
		ifc.Addresses = append(ifc.Addresses, got...)
		return cloud.AllocateResult{Interface: ifc.ID, Addresses: got}, nil
	}
	return cloud.AllocateResult{}, fmt.Errorf("no interface %s", req.Interface)
}

func (m *memBackend) CreateInterface(_ context.Context, req cloud.CreateInterfaceRequest) (cloud.Interface, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["CreateInterface"]++
	if err := m.fail("CreateInterface"); err != nil {
		return cloud.Interface{}, err
	}
	if len(m.inv.Interfaces) >= m.inv.Limits.MaxInterfaces {
		return cloud.Interface{}, cloud.ErrLimitReached
	}
	m.take(1)
	ifc := cloud.Interface{ID: fmt.Sprintf("eni-%d", req.Index), Index: req.Index, Subnet: req.Subnet, Addresses: m.take(req.Count), Tags: req.Tags}
	m.inv.Interfaces = append(m.inv.Interfaces, ifc)
	return ifc, nil
}

func (m *memBackend) Release(_ context.Context, req cloud.ReleaseRequest) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["Release"]++
	if err := m.fail("Release"); err != nil {
		return err
	}
	drop := map[netip.Addr]bool{}
	for _, a := range req.Addresses {
		drop[a] = true
	}
	for i := range m.inv.Interfaces {
		if m.inv.Interfaces[i].ID != req.Interface {
			continue
		}
		var kept []netip.Addr
		for _, a := range m.inv.Interfaces[i].Addresses {
			if !drop[a] {
				kept = append(kept, a)
			}
		}
		m.inv.Interfaces[i].Addresses = kept
	}
	return nil
}

func (m *memBackend) count(op string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[op]
}

type testClock struct{ now time.Time }

func (c *testClock) Now() time.Time { return c.now }

func newTestEngine(t *testing.T, b cloud.CloudBackend, hs Handshake, mod func(*Config)) (*Engine, *testClock) {
	t.Helper()
	clk := &testClock{now: time.Unix(1000, 0)}
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(b, cfg, Options{Handshake: hs, Now: clk.Now, Metrics: NewMetrics(nil)})
	if err != nil {
		t.Fatal(err)
	}
	return e, clk
}

var ref = cloud.NodeRef{Name: "n1"}

func TestEngineAllocatesWithSurgeAndCreatesInterfaces(t *testing.T) {
	b := newMemBackend(cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 10}, 1000)
	e, _ := newTestEngine(t, b, nil, nil)
	// No pods: pre-allocate 8 on eth0 in one call.
	if err := e.UpsertNode(NodeState{Ref: ref}); err != nil {
		t.Fatal(err)
	}
	r := e.Pass(context.Background())
	if r.Allocated != 8 || b.count("Allocate") != 1 {
		t.Fatalf("pass 1: %+v, calls %v", r, b.calls)
	}
	// Pods take the 8 addresses and 12 more wait: need 8, surge 12 - 8 = 4. eth0 takes the
	// one address it has room for (9 max), then a new ENI at index 1 gets min(9, 7 + 4).
	used := append([]netip.Addr(nil), b.inv.Interfaces[0].Addresses...)
	if err := e.UpsertNode(NodeState{Ref: ref, Used: used, Pending: 12}); err != nil {
		t.Fatal(err)
	}
	r = e.Pass(context.Background())
	st, _ := e.Status("n1")
	if st.Needed != 0 || st.Interfaces != 2 || r.Created != 1 || st.Available != 18 || b.inv.Interfaces[1].Index != 1 {
		t.Fatalf("pass 2: %+v, status %+v", r, st)
	}
	// Pods keep taking everything: the node fills up to its instance's capacity (3 ENIs x 9)
	// and then needs nothing more (no max-allocate set: the capacity is the cap, as
	// Cilium's getMaxAllocate), instead of looping on calls that cannot succeed.
	for i := 0; i < 5; i++ {
		used = used[:0]
		for _, ifc := range b.inv.Interfaces {
			used = append(used, ifc.Addresses...)
		}
		_ = e.UpsertNode(NodeState{Ref: ref, Used: used, Pending: 5})
		e.Pass(context.Background())
	}
	st, _ = e.Status("n1")
	if st.Blocked != "" || st.Needed != 0 || st.Interfaces != 3 || st.Available != 27 || st.Capacity != 27 {
		t.Fatalf("full node: status %+v", st)
	}
	calls := b.count("Allocate") + b.count("CreateInterface")
	e.Pass(context.Background())
	if got := b.count("Allocate") + b.count("CreateInterface"); got != calls {
		t.Fatalf("a node at capacity still calls the cloud: %d calls, was %d", got, calls)
	}
}

// TestNeededNeverExceedsInstanceCapacity: without max-allocate the need is capped by what
// the instance can hold, (interfaces - first-interface-index) x (addresses per interface -
// 1); an explicit max-allocate wins over it (also above it, as in Cilium).
func TestNeededNeverExceedsInstanceCapacity(t *testing.T) {
	for _, tc := range []struct {
		name       string
		first, max int
		wantCap    int
		wantAvail  int
	}{
		{"no max-allocate, first 0", 0, 0, 3 * 5, 3 * 5},
		{"no max-allocate, first 1", 1, 0, 2 * 5, 2 * 5},
		{"max-allocate below capacity", 0, 7, 3 * 5, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newMemBackend(cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 6}, 1000)
			e, _ := newTestEngine(t, b, nil, func(c *Config) { c.FirstInterfaceIndex = tc.first; c.Params.MaxAllocate = tc.max })
			var used []netip.Addr
			for i := 0; i < 10; i++ {
				// Pods take every address each round and as many more wait.
				used = used[:0]
				for _, ifc := range b.inv.Interfaces {
					if ifc.Index >= tc.first {
						used = append(used, ifc.Addresses...)
					}
				}
				if err := e.UpsertNode(NodeState{Ref: ref, Used: used, Pending: 20}); err != nil {
					t.Fatal(err)
				}
				e.Pass(context.Background())
				st, _ := e.Status("n1")
				if st.Available+st.Needed > max(tc.wantAvail, st.Available) {
					t.Fatalf("round %d: available %d + needed %d exceeds the cap %d", i, st.Available, st.Needed, tc.wantAvail)
				}
			}
			st, _ := e.Status("n1")
			if st.Capacity != tc.wantCap || st.Available != tc.wantAvail || st.Needed != 0 || st.Blocked != "" {
				t.Fatalf("status %+v, want capacity %d, available %d, needed 0, not blocked", st, tc.wantCap, tc.wantAvail)
			}
			if NeededIPs(st.Available, st.Available, e.effectiveParams(NodeState{Ref: ref}, b.inv, e.selector(NodeState{Ref: ref}))) != 0 {
				t.Fatal("a full node still needs addresses")
			}
		})
	}
}

// TestExcludedInterfacesNeverServePods: an interface carrying the exclude tags (Cilium's
// --exclude-interface-tags) gives no address to the pool, gets no allocation and is never
// released from, but keeps its device index: new interfaces go elsewhere.
func TestExcludedInterfacesNeverServePods(t *testing.T) {
	b := newMemBackend(cloud.Limits{MaxInterfaces: 4, AddressesPerInterface: 10}, 1000)
	b.inv.Interfaces = append(b.inv.Interfaces, cloud.Interface{ID: "eni-x", Index: 1, Subnet: "subnet-a",
		Tags: map[string]string{"no-pods": "true"}, Addresses: addrs("10.9.0.1", "10.9.0.2")})
	pub := &recordPublisher{}
	clk := &testClock{now: time.Unix(1000, 0)}
	cfg := DefaultConfig()
	cfg.ExcludeInterfaceTags = map[string]string{"no-pods": "true"}
	cfg.Params.PreAllocate = 20
	e, err := New(b, cfg, Options{Publisher: pub, Now: clk.Now, Handshake: &MemoryHandshake{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.UpsertNode(NodeState{Ref: ref}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		e.Pass(context.Background())
	}
	st, _ := e.Status("n1")
	// eth0 (9) + a new ENI at index 2 (9) + one more at 3 (2): capacity (4-1 excluded) x 9.
	if st.Capacity != 27 || st.Available != 20 {
		t.Fatalf("status %+v", st)
	}
	for _, ifc := range b.inv.Interfaces {
		if ifc.ID == "eni-x" && len(ifc.Addresses) != 2 {
			t.Fatalf("excluded interface got addresses: %v", ifc.Addresses)
		}
		if ifc.ID != "eni-x" && ifc.Index == 1 {
			t.Fatalf("a new interface took the excluded one's index: %+v", ifc)
		}
	}
	for _, ifc := range pub.last().Interfaces {
		if ifc.ID == "eni-x" {
			t.Fatalf("excluded interface published in the pool: %+v", ifc)
		}
	}
	// Excess: everything pods may use goes back (the agent's answer is simulated), nothing of
	// the excluded interface.
	_ = e.UpsertNode(NodeState{Ref: ref, Params: &Params{PreAllocate: 0}})
	hs := e.opts.Handshake
	for i := 0; i < 10; i++ {
		e.Pass(context.Background())
		states, _ := hs.States(context.Background(), "n1")
		if _, err := hs.Apply(context.Background(), "n1", AgentAnswer(states, func(netip.Addr) bool { return false })); err != nil {
			t.Fatal(err)
		}
		clk.now = clk.now.Add(time.Hour)
	}
	if st, _ := e.Status("n1"); st.Available != 0 || b.count("Release") == 0 {
		t.Fatalf("after release: status %+v, %d releases", st, b.count("Release"))
	}
	for _, ifc := range b.inv.Interfaces {
		if ifc.ID == "eni-x" && len(ifc.Addresses) != 2 {
			t.Fatalf("addresses released from the excluded interface: %v", ifc.Addresses)
		}
	}
}

type recordPublisher struct {
	mu   sync.Mutex
	pool cloud.NodeInventory
}

func (p *recordPublisher) Publish(_ context.Context, _ string, pool cloud.NodeInventory) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pool = pool
	return nil
}

func (p *recordPublisher) last() cloud.NodeInventory {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pool
}

func TestEngineThrottledNodeIsUnfinished(t *testing.T) {
	b := newMemBackend(cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 10}, 1000)
	b.failNext["Allocate"] = fmt.Errorf("slow down: %w", cloud.ErrThrottled)
	e, _ := newTestEngine(t, b, nil, nil)
	_ = e.UpsertNode(NodeState{Ref: ref})
	r := e.Pass(context.Background())
	if !r.Unfinished || r.Errors != 1 {
		t.Fatalf("throttled pass: %+v", r)
	}
	r = e.Pass(context.Background())
	if r.Allocated != 8 || r.Unfinished {
		t.Fatalf("next pass: %+v", r)
	}
}

// agent answers the handshake for a node whose pods hold used.
func agent(t *testing.T, hs Handshake, used map[netip.Addr]bool) {
	t.Helper()
	side := Checked(hs, AgentMayApply, "agent")
	states, _ := side.States(context.Background(), "n1")
	if _, err := side.Apply(context.Background(), "n1", AgentAnswer(states, func(a netip.Addr) bool { return used[a] })); err != nil {
		t.Fatal(err)
	}
}

func TestReleaseHandshake(t *testing.T) {
	ctx := context.Background()
	b := newMemBackend(cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 30}, 1000)
	hs := &MemoryHandshake{}
	e, clk := newTestEngine(t, b, Checked(hs, OperatorMayApply, "operator"), nil)
	_ = e.UpsertNode(NodeState{Ref: ref, Pending: 20}) // 8 + surge 12 = 20 addresses
	e.Pass(ctx)
	if st, _ := e.Status("n1"); st.Available != 20 {
		t.Fatalf("available %d", st.Available)
	}
	// All pods gone: excess 12 (keep pre-allocate 8).
	_ = e.UpsertNode(NodeState{Ref: ref})
	e.Pass(ctx)
	if st, _ := hs.States(ctx, "n1"); len(st) != 0 {
		t.Fatalf("marked before the delay: %v", st)
	}
	clk.now = clk.now.Add(179 * time.Second)
	e.Pass(ctx)
	if st, _ := hs.States(ctx, "n1"); len(st) != 0 {
		t.Fatalf("marked before the delay: %v", st)
	}
	clk.now = clk.now.Add(time.Second)
	r := e.Pass(ctx)
	states, _ := hs.States(ctx, "n1")
	if r.Marked != 12 || len(states) != 12 {
		t.Fatalf("after the delay: %+v, states %v", r, states)
	}
	// Nothing is released before the agent answers.
	e.Pass(ctx)
	if b.count("Release") != 0 {
		t.Fatal("released without an answer")
	}
	// A pod started on one marked address meanwhile (the agent had not seen the mark yet):
	// the agent refuses it; the others are ready.
	var busy netip.Addr
	for a := range states {
		busy = a
		break
	}
	agent(t, hs, map[netip.Addr]bool{busy: true})
	_ = e.UpsertNode(NodeState{Ref: ref, Used: []netip.Addr{busy}})
	r = e.Pass(ctx)
	if r.Released != 11 || b.count("Release") != 1 {
		t.Fatalf("release: %+v", r)
	}
	states, _ = hs.States(ctx, "n1")
	for a, s := range states {
		if a == busy || s != StateReleased {
			t.Fatalf("after release: %v", states)
		}
	}
	for _, ifc := range b.inv.Interfaces {
		for _, a := range ifc.Addresses {
			if _, gone := states[a]; gone {
				t.Fatalf("%s still assigned", a)
			}
		}
	}
	// The agent drops released entries.
	agent(t, hs, nil)
	if st, _ := hs.States(ctx, "n1"); len(st) != 0 {
		t.Fatalf("entries left: %v", st)
	}
	if st, _ := e.Status("n1"); st.Available != 9 || st.Excess != 0 {
		t.Fatalf("final status %+v", st)
	}
}

func TestReleaseAbortsWhenNoLongerExcess(t *testing.T) {
	ctx := context.Background()
	b := newMemBackend(cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 30}, 1000)
	hs := &MemoryHandshake{}
	e, clk := newTestEngine(t, b, Checked(hs, OperatorMayApply, "operator"), nil)
	_ = e.UpsertNode(NodeState{Ref: ref, Pending: 20})
	e.Pass(ctx)
	_ = e.UpsertNode(NodeState{Ref: ref})
	e.Pass(ctx)
	clk.now = clk.now.Add(181 * time.Second)
	e.Pass(ctx)
	agent(t, hs, nil) // all 12 ready
	// Pods come back before the operator acts: 10 used -> excess 2. Only 2 may go.
	used := append([]netip.Addr(nil), b.inv.Interfaces[0].Addresses[:10]...)
	_ = e.UpsertNode(NodeState{Ref: ref, Used: used})
	r := e.Pass(ctx)
	if r.Released != 2 {
		t.Fatalf("released %d, want 2", r.Released)
	}
	states, _ := hs.States(ctx, "n1")
	if len(states) != 2 {
		t.Fatalf("entries after abort: %v", states)
	}
	// Need appears (many pods): every remaining mark is aborted, nothing more released.
	clk.now = clk.now.Add(181 * time.Second)
	_ = e.UpsertNode(NodeState{Ref: ref, Used: used, Pending: 30})
	agent(t, hs, nil)
	e.Pass(ctx)
	if states, _ := hs.States(ctx, "n1"); len(states) != 0 {
		t.Fatalf("entries after need: %v", states)
	}
}

func TestHandshakeSides(t *testing.T) {
	ctx := context.Background()
	hs := &MemoryHandshake{}
	op := Checked(hs, OperatorMayApply, "operator")
	ag := Checked(hs, AgentMayApply, "agent")
	a := netip.MustParseAddr("10.0.0.1")
	if _, err := ag.Apply(ctx, "n", []Transition{{a, StateNone, StateReady}}); err == nil {
		t.Fatal("agent invented an entry")
	}
	if _, err := op.Apply(ctx, "n", []Transition{{a, StateMarked, StateReleased}}); err == nil {
		t.Fatal("operator released without an answer")
	}
	if rej, err := op.Apply(ctx, "n", []Transition{{a, StateNone, StateMarked}}); err != nil || len(rej) != 0 {
		t.Fatal(rej, err)
	}
	// Compare and set: a stale transition is rejected, not applied.
	if rej, _ := op.Apply(ctx, "n", []Transition{{a, StateReady, StateReleased}}); len(rej) != 1 {
		t.Fatal("stale transition applied")
	}
	if ts := AgentAnswer(map[netip.Addr]ReleaseState{a: StateMarked}, func(netip.Addr) bool { return true }); len(ts) != 1 || ts[0].To != StateDoNotRelease {
		t.Fatalf("in-use answer: %v", ts)
	}
	if !Reserved(StateReady) || Reserved(StateDoNotRelease) || Reserved(StateNone) {
		t.Fatal("Reserved")
	}
}

// Under testing/synctest: the engine's pass interval and the triggers run on simulated time.
func TestRunKeepsMinInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemBackend(cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 30}, 1000)
		cnt := &countingBackend{CloudBackend: b}
		e, _ := newTestEngine(t, cnt, nil, func(c *Config) { c.MinPassInterval = 100 * time.Millisecond })
		_ = e.UpsertNode(NodeState{Ref: ref})
		ctx, cancel := context.WithTimeout(context.Background(), 550*time.Millisecond)
		defer cancel()
		triggers := make(chan struct{})
		go func() {
			defer close(triggers)
			for ctx.Err() == nil {
				e.Trigger()
				time.Sleep(5 * time.Millisecond) // sleep: simulated (synctest)
			}
		}()
		_ = e.Run(ctx)
		<-triggers
		// 110 triggers in 550 ms, at most one pass per 100 ms: 6 at most, and more than one.
		if n := cnt.inventories.Load(); n < 2 || n > 6 {
			t.Fatalf("%d passes in 550 ms with a 100 ms minimum interval", n)
		}
	})
}

type countingBackend struct {
	cloud.CloudBackend
	inventories atomic.Int64
}

func (c *countingBackend) Inventory(ctx context.Context, n cloud.NodeRef) (cloud.NodeInventory, error) {
	c.inventories.Add(1)
	return c.CloudBackend.Inventory(ctx, n)
}
