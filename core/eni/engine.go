package eni

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// NodeState is what the engine needs to know about one node, as the operator reads it from
// the node object: who it is in the cloud, which addresses pods hold, how many pods wait.
type NodeState struct {
	// Ref identifies the node (Name is required; the AWS backend needs ProviderID or an
	// instance ID as Name, and uses InstanceType and Zone when given).
	Ref cloud.NodeRef
	// Used are the addresses pods hold on the node (Cilium's status.ipam.used).
	Used []netip.Addr
	// Pending is the number of pods scheduled on the node that wait for an address.
	Pending int
	// Params overrides the configured watermarks for this node (nil: Config.Params).
	Params *Params
	// Per-node overrides of Config (nil / empty: the configuration's): the node object's
	// spec.eni.first-interface-index, subnet-ids, subnet-tags and security-groups.
	FirstInterfaceIndex *int
	SubnetIDs           []string
	SubnetTags          map[string]string
	SecurityGroups      []string
	// SecurityGroupTags choose the node's new interfaces' groups by tags (Cilium's
	// spec.eni.security-group-tags) when it names no SecurityGroups.
	SecurityGroupTags map[string]string
	// PrefixDelegation and IPv6PrefixDelegation override the configuration's for this node
	// (nil: Config's; Cilium's spec.eni.disable-prefix-delegation, inverted).
	PrefixDelegation     *bool
	IPv6PrefixDelegation *bool
}

// Publisher receives a node's pool after every change the engine made, so the operator can
// write it into the node object (Cilium's spec.ipam.pool) for the agent.
type Publisher interface {
	// Publish hands over the node's eligible interfaces (index >= first-interface-index) with
	// their addresses and the node's subnets.
	Publish(ctx context.Context, node string, pool cloud.NodeInventory) error
}

// NodeStatus is the engine's view of one node after its last pass.
type NodeStatus struct {
	Name                            string
	Available, Used, Needed, Excess int
	Pending                         int
	Interfaces                      int
	// Capacity is the most pod addresses the node's instance can hold (Capacity; 0 unknown).
	Capacity int
	// Releasing counts the node's addresses in the release handshake (marked or ready).
	Releasing int
	// Blocked says why the node's need could not be met ("" when it was, or there was none).
	Blocked string
	// LastError is the last cloud error met for this node, if any.
	LastError string
}

// PassResult sums up one pass.
type PassResult struct {
	Nodes     int // nodes in the pass
	Worked    int // nodes that needed work (allocation, release or handshake)
	Allocated int // addresses assigned
	Created   int // interfaces created
	Released  int // addresses unassigned
	Marked    int // addresses newly marked for release
	Errors    int // cloud or handshake calls that failed
	// Unfinished: some node still needs addresses and is not blocked (e.g. throttled), so the
	// next pass should come soon.
	Unfinished bool
	// NextRelease is when the earliest excess address becomes due for marking (its release
	// delay ends); zero if none waits. Run passes again then.
	NextRelease time.Time
}

// Options are the engine's collaborators besides the backend.
type Options struct {
	// Handshake carries release entries to agents; nil disables releasing.
	Handshake Handshake
	// Publisher receives pools; nil = none.
	Publisher Publisher
	Logger    *slog.Logger
	// Now is the clock of the release delay (default time.Now).
	Now func() time.Time
	// Metrics, if set, are updated (see NewMetrics).
	Metrics *Metrics
}

// Engine decides, per node, how many addresses to allocate or release and carries it out
// through a cloud backend. It is pure logic over interfaces: node state comes in through
// UpsertNode/DeleteNode, actions go out through cloud.CloudBackend, Handshake and Publisher.
type Engine struct {
	backend cloud.CloudBackend
	cfg     Config
	opts    Options
	log     *slog.Logger

	passMu sync.Mutex // one pass at a time

	mu    sync.Mutex
	nodes map[string]*node
	trig  chan struct{}
}

type node struct {
	state NodeState // guarded by Engine.mu

	// Owned by the pass that handles the node.
	inv         *cloud.NodeInventory
	neededSince time.Time
	excessSince map[netip.Addr]time.Time // by a release unit's first address
	refused     map[netip.Addr]time.Time
	// noPrefixes: the cloud found no free prefix in the node's subnet; like Cilium, the node
	// allocates secondary addresses from then on (until the operator restarts).
	noPrefixes bool
	status     NodeStatus
	published  string // signature of the last pool handed to the Publisher
}

// New returns an engine; Run drives it, or the caller calls Pass.
func New(backend cloud.CloudBackend, cfg Config, opts Options) (*Engine, error) {
	if backend == nil {
		return nil, errors.New("eni: backend is nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("eni: config: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Engine{
		backend: backend, cfg: cfg, opts: opts, log: opts.Logger,
		nodes: map[string]*node{}, trig: make(chan struct{}, 1),
	}, nil
}

// UpsertNode records a node's state and triggers a pass.
func (e *Engine) UpsertNode(s NodeState) error {
	if s.Ref.Name == "" {
		return errors.New("eni: node: ref.name is empty")
	}
	if s.Pending < 0 {
		return fmt.Errorf("eni: node %q: pending: %d is negative", s.Ref.Name, s.Pending)
	}
	if s.Params != nil {
		if err := s.Params.Validate("params"); err != nil {
			return fmt.Errorf("eni: node %q: %w", s.Ref.Name, err)
		}
	}
	if s.FirstInterfaceIndex != nil && *s.FirstInterfaceIndex < 0 {
		return fmt.Errorf("eni: node %q: first-interface-index: %d is negative", s.Ref.Name, *s.FirstInterfaceIndex)
	}
	// IPv6 addresses come from the node's /80 and count for no watermark.
	s.Used = slices.DeleteFunc(slices.Clone(s.Used), netip.Addr.Is6)
	e.mu.Lock()
	n := e.nodes[s.Ref.Name]
	if n == nil {
		n = &node{excessSince: map[netip.Addr]time.Time{}, refused: map[netip.Addr]time.Time{}}
		e.nodes[s.Ref.Name] = n
	}
	n.state = s
	e.mu.Unlock()
	e.Trigger()
	return nil
}

// DeleteNode forgets a node (its Kubernetes node is gone). Its interfaces stay with the
// instance: the cloud deletes them with it when delete-on-termination is set.
func (e *Engine) DeleteNode(name string) {
	e.mu.Lock()
	delete(e.nodes, name)
	e.mu.Unlock()
}

// Status returns the node's status after the last pass that handled it.
func (e *Engine) Status(name string) (NodeStatus, bool) {
	e.passMu.Lock()
	defer e.passMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	n, ok := e.nodes[name]
	if !ok {
		return NodeStatus{}, false
	}
	return n.status, true
}

// Trigger asks for a pass; Run coalesces triggers and keeps to MinPassInterval.
func (e *Engine) Trigger() {
	select {
	case e.trig <- struct{}{}:
	default:
	}
}

// Run runs passes until ctx ends: on trigger, at most one per MinPassInterval, and at least
// one per ResyncInterval (soon again while a node is unfinished).
func (e *Engine) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.trig:
		case <-timer.C:
		}
		if wait := e.cfg.MinPassInterval - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		select { // triggers that came while waiting are served by this pass
		case <-e.trig:
		default:
		}
		last = time.Now()
		res := e.Pass(ctx)
		e.log.Debug("eni: pass", "took", time.Since(last), "nodes", res.Nodes, "worked", res.Worked, "allocated", res.Allocated,
			"created", res.Created, "released", res.Released, "marked", res.Marked, "errors", res.Errors)
		next := e.cfg.ResyncInterval
		if res.Unfinished {
			next = e.cfg.MinPassInterval
		}
		if !res.NextRelease.IsZero() {
			// The release delay runs on Options.Now, the timer on the wall clock: with a
			// test clock the wait is at least MinPassInterval.
			next = min(next, max(res.NextRelease.Sub(e.opts.Now()), e.cfg.MinPassInterval, 10*time.Millisecond))
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

type queued struct {
	name    string
	n       *node
	state   NodeState
	deficit int
}

// Pass runs one resync pass: it refreshes every node's inventory, orders the nodes by deficit
// (largest need first, releases last) and handles them with Config.Workers workers.
func (e *Engine) Pass(ctx context.Context) PassResult {
	e.passMu.Lock()
	defer e.passMu.Unlock()
	start := time.Now()

	e.mu.Lock()
	items := make([]*queued, 0, len(e.nodes))
	for name, n := range e.nodes {
		items = append(items, &queued{name: name, n: n, state: n.state})
	}
	e.mu.Unlock()
	sort.Slice(items, func(i, j int) bool { return items[i].name < items[j].name })

	var res PassResult
	var resMu sync.Mutex
	res.Nodes = len(items)

	// Inventories first, so the queue is ordered on fresh numbers.
	e.parallel(items, func(q *queued) {
		inv, err := e.backend.Inventory(ctx, q.state.Ref)
		if err != nil {
			q.n.status.LastError = err.Error()
			e.log.Warn("eni: inventory failed", "node", q.name, "err", err)
			resMu.Lock()
			res.Errors++
			resMu.Unlock()
			q.n.inv = nil
			return
		}
		q.n.inv = &inv
		sel := e.selectorFor(q.n, q.state, inv)
		p := e.effectiveParams(q.state, inv, sel)
		avail := Available(inv, sel)
		q.deficit = Deficit(NeededIPs(avail, len(q.state.Used), p), ExcessIPs(avail, len(q.state.Used), p))
	})
	order(items)

	e.parallel(items, func(q *queued) {
		if q.n.inv == nil {
			return
		}
		r := e.maintain(ctx, q)
		resMu.Lock()
		defer resMu.Unlock()
		res.Allocated += r.Allocated
		res.Created += r.Created
		res.Released += r.Released
		res.Marked += r.Marked
		res.Errors += r.Errors
		if r.Worked > 0 {
			res.Worked++
		}
		res.Unfinished = res.Unfinished || r.Unfinished
		if !r.NextRelease.IsZero() && (res.NextRelease.IsZero() || r.NextRelease.Before(res.NextRelease)) {
			res.NextRelease = r.NextRelease
		}
	})
	e.opts.Metrics.observePass(time.Since(start), items)
	return res
}

// order sorts a queue by deficit, largest first, then by name (deterministic).
func order(items []*queued) {
	sort.SliceStable(items, func(i, j int) bool {
		if items[i].deficit != items[j].deficit {
			return items[i].deficit > items[j].deficit
		}
		return items[i].name < items[j].name
	})
}

// parallel runs fn over items with Config.Workers goroutines, starting them in order.
func (e *Engine) parallel(items []*queued, fn func(*queued)) {
	ch := make(chan *queued)
	var wg sync.WaitGroup
	for w := 0; w < min(e.cfg.Workers, max(len(items), 1)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range ch {
				fn(q)
			}
		}()
	}
	for _, q := range items {
		ch <- q
	}
	close(ch)
	wg.Wait()
}

func (e *Engine) params(s NodeState) Params {
	if s.Params != nil {
		return *s.Params
	}
	return e.cfg.Params
}

// effectiveParams are the node's watermarks with max-allocate, when unset, taken from the
// instance's capacity (Capacity), as Cilium's getMaxAllocate does: without it a node whose
// pods outgrow what its instance type can hold would keep "needing" addresses no interface
// can take, every pass.
func (e *Engine) effectiveParams(s NodeState, inv cloud.NodeInventory, sel Selector) Params {
	p := e.params(s)
	if p.MaxAllocate == 0 {
		p.MaxAllocate = Capacity(inv, sel)
	}
	return p
}

// selectorFor is the node's selector in its prefix mode: prefix delegation is on for the
// node, its instance can carry prefixes (AWS: Nitro; Cilium allocates secondary addresses
// on other instances) and its subnet has not run out of free prefixes.
func (e *Engine) selectorFor(n *node, s NodeState, inv cloud.NodeInventory) Selector {
	sel := e.selector(s)
	sel.Prefixes = e.prefixes(s) && inv.Limits.PrefixDelegation && !n.noPrefixes
	return sel
}

// prefixes and ipv6Prefixes are the node's prefix delegation switches: its own, else the
// configuration's.
func (e *Engine) prefixes(s NodeState) bool {
	if s.PrefixDelegation != nil {
		return *s.PrefixDelegation
	}
	return e.cfg.PrefixDelegation
}

func (e *Engine) ipv6Prefixes(s NodeState) bool {
	if s.IPv6PrefixDelegation != nil {
		return *s.IPv6PrefixDelegation
	}
	return e.cfg.IPv6PrefixDelegation
}

// selector is which of the node's interfaces carry pod addresses.
func (e *Engine) selector(s NodeState) Selector {
	return Selector{First: e.first(s), ExcludeTags: e.cfg.ExcludeInterfaceTags}
}

// first is the node's first interface index: its own when it has one, else the config's.
func (e *Engine) first(s NodeState) int {
	if s.FirstInterfaceIndex != nil {
		return *s.FirstInterfaceIndex
	}
	return e.cfg.FirstInterfaceIndex
}

// subnetRules are the node's subnet choices: its own IDs and tags when it has any (both
// replace the configuration's together, so a node never mixes the two), else the config's.
func (e *Engine) subnetRules(s NodeState) SubnetRules {
	if len(s.SubnetIDs) > 0 || len(s.SubnetTags) > 0 {
		return SubnetRules{IDs: s.SubnetIDs, Tags: s.SubnetTags}
	}
	return SubnetRules{IDs: e.cfg.SubnetIDs, Tags: e.cfg.SubnetTags}
}

// securityGroups are the groups of the node's new interfaces, by ID or by tags: the node's
// own (IDs, else tags), else the configuration's IDs; neither lets the backend apply its rule
// (AWS: its security-group-tags, else eth0's groups). Cilium's order: IDs, tags, eth0's.
func (e *Engine) securityGroups(s NodeState) ([]string, map[string]string) {
	switch {
	case len(s.SecurityGroups) > 0:
		return s.SecurityGroups, nil
	case len(s.SecurityGroupTags) > 0:
		return nil, s.SecurityGroupTags
	}
	return e.cfg.SecurityGroups, nil
}

// Nodes returns the names of the nodes the engine knows, sorted.
func (e *Engine) Nodes() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.nodes))
	for n := range e.nodes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// fail records a failed cloud call of a node's pass. It names the node from the pass's
// snapshot: the node's live state is UpsertNode's to write while the pass runs.
func (e *Engine) fail(np *nodePass, op string, err error) {
	np.r.Errors++
	np.n.status.LastError = op + ": " + err.Error()
	np.n.inv = nil // re-read the truth next pass
	e.opts.Metrics.countError(op, err)
	e.log.Warn("eni: cloud call failed", "node", np.q.name, "op", op, "err", err)
}

func (e *Engine) description(node string) string {
	if strings.Contains(e.cfg.Description, "%s") {
		return fmt.Sprintf(e.cfg.Description, node)
	}
	return e.cfg.Description
}

func (e *Engine) tags(node string) map[string]string {
	out := map[string]string{"allot.io/node": node}
	for k, v := range e.cfg.Tags {
		out[k] = v
	}
	if e.cfg.ClusterName != "" {
		out[ClusterTag] = e.cfg.ClusterName
	}
	return out
}

func poolSignature(inv cloud.NodeInventory) string {
	var b strings.Builder
	for _, ifc := range inv.Interfaces {
		fmt.Fprintf(&b, "%s/%d:", ifc.ID, ifc.Index)
		for _, a := range ifc.Addresses {
			b.WriteString(a.String())
			b.WriteByte(',')
		}
		for _, p := range ifc.Prefixes {
			b.WriteString(p.String())
			b.WriteByte(',')
		}
		b.WriteByte(';')
	}
	return b.String()
}

func addAddresses(inv *cloud.NodeInventory, id string, addrs []netip.Addr) {
	for i := range inv.Interfaces {
		if inv.Interfaces[i].ID == id {
			ifc := &inv.Interfaces[i]
			ifc.Addresses = append(append([]netip.Addr(nil), ifc.Addresses...), addrs...)
			sort.Slice(ifc.Addresses, func(a, b int) bool { return ifc.Addresses[a].Less(ifc.Addresses[b]) })
		}
	}
}

func removeAddresses(inv *cloud.NodeInventory, id string, addrs []netip.Addr) {
	drop := map[netip.Addr]bool{}
	for _, a := range addrs {
		drop[a] = true
	}
	for i := range inv.Interfaces {
		if inv.Interfaces[i].ID != id {
			continue
		}
		var kept []netip.Addr
		for _, a := range inv.Interfaces[i].Addresses {
			if !drop[a] {
				kept = append(kept, a)
			}
		}
		gone := len(inv.Interfaces[i].Addresses) - len(kept)
		inv.Interfaces[i].Addresses = kept
		for j := range inv.Subnets {
			if inv.Subnets[j].ID == inv.Interfaces[i].Subnet {
				inv.Subnets[j].Free += uint64(gone)
			}
		}
	}
}

func takeFromSubnet(inv *cloud.NodeInventory, id string, n uint64) {
	for i := range inv.Subnets {
		if inv.Subnets[i].ID == id {
			inv.Subnets[i].Free -= min(n, inv.Subnets[i].Free)
		}
	}
}

func setSubnetFree(inv *cloud.NodeInventory, id string, free uint64) {
	for i := range inv.Subnets {
		if inv.Subnets[i].ID == id {
			inv.Subnets[i].Free = free
		}
	}
}
