package ipam

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

	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/explain"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/sdk/policy"
)

// PoolSpec is one pool as the manager needs it.
type PoolSpec struct {
	Allocator allocator.Config
	Routes    []api.Route
	Default   bool
}

// PolicySource returns the pool policy that decides for a CNI network.
type PolicySource func(network string) policy.PoolPolicy

// Options configure a Manager.
type Options struct {
	Pools  []PoolSpec
	Store  *store.Store
	Policy PolicySource
	// PolicyTimeout bounds one policy decision.
	PolicyTimeout time.Duration
	// PluginStatus, if set, reports loaded plugins for allotctl.
	PluginStatus func(context.Context) []api.PluginStatus
	Metrics      *Metrics
	Logger       *slog.Logger
	Version      string
	Mode         string
	// Now is the clock (tests).
	Now func() time.Time

	// Dynamic, if set, makes the pools dynamic (agent mode): pools and their CIDRs come and
	// go at run time (EnsurePool, AddCIDR, RemoveCIDR), and an ADD whose pool has no free
	// address waits for one instead of failing at once. See dynamic.go.
	Dynamic *DynamicOptions
	// PodContext, if set, completes the policy's input (pod labels and annotations, owner,
	// namespace, node) before each decision, e.g. from an informer cache. An error fails
	// the ADD with that error.
	PodContext func(ctx context.Context, req *policy.PodRequest) error
	// OnChange, if set, is called whenever the demand on the pools may have changed: an
	// address taken or freed, a block added or removed, an ADD starting or ending its wait
	// for an address. It runs with the manager's lock held (so calls come in order): it must
	// not block or call the manager.
	OnChange func()
}

// poolKey names a pool. A name with both families (an IPPool with IPv4 and IPv6 CIDRs) is
// two pools of the same name here, one per family, as the policy contract has it.
type poolKey struct {
	name string
	fam  policy.Family
}

func famOf(a netip.Addr) policy.Family {
	if a.Is4() {
		return policy.IPv4
	}
	return policy.IPv6
}

func keyLess(a, b poolKey) bool {
	if a.name != b.name {
		return a.name < b.name
	}
	return a.fam < b.fam
}

type pool struct {
	alloc   *allocator.Pool
	spec    PoolSpec
	family  policy.Family
	prefix  []netip.Prefix
	gateway netip.Addr
	// addressing overrides how addresses of one block are presented (AddCIDRWith).
	addressing map[netip.Prefix]Addressing
	// disabled: the pool hands out no new address, whatever the policy chose; those held
	// stay (IPPool spec.disable, SetPoolDisabled).
	disabled bool
	// metrics are the pool's series (poolMetricsLocked), nil until first used.
	metrics *poolMetrics
}

type holding struct {
	rec store.Record
}

// Manager implements api.Service for a node.
type Manager struct {
	opts  Options
	log   *slog.Logger
	start time.Time

	mu       sync.Mutex
	pools    map[poolKey]*pool
	poolKeys []poolKey // sorted by name then family, for deterministic views
	owners   map[store.Owner]*holding
	holders  map[netip.Addr]store.Owner
	// inflight marks the owners with a request in flight. The channel is made only when a
	// second request for the owner has to wait (nil until then): most ADDs never wait, and
	// making and closing a channel each was a measurable part of an ADD.
	inflight map[store.Owner]chan struct{}

	// routing and selection of dynamic pools, from their cluster objects (SetPoolRouting,
	// SetPoolSelection); kept while a pool is dropped and registered again.
	routing   map[poolKey]PoolRouting
	selection map[poolKey]PoolSelection

	// problems found while rebuilding from the store, shown by Status.
	problems []string

	// Dynamic mode (dynamic.go): ADDs waiting for an address, per pool, and the channel
	// closed (then replaced) whenever an address may have become free.
	pending map[poolKey]int
	waiters int
	// waitingSince counts the waiting ADDs by the time each began (the oldest is a metric).
	waitingSince map[time.Time]int
	changed      chan struct{}
}

var _ api.Service = (*Manager)(nil)

// New builds the pools, then rebuilds every allocation from the store.
func New(ctx context.Context, opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PolicyTimeout <= 0 {
		opts.PolicyTimeout = 2 * time.Second
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	m := &Manager{
		opts:     opts,
		log:      opts.Logger,
		start:    opts.Now(),
		pools:    map[poolKey]*pool{},
		owners:   map[store.Owner]*holding{},
		holders:  map[netip.Addr]store.Owner{},
		inflight: map[store.Owner]chan struct{}{},
		pending:  map[poolKey]int{},
		changed:  make(chan struct{}),

		waitingSince: map[time.Time]int{},
	}
	names := map[string]bool{}
	for _, ps := range opts.Pools {
		a, err := allocator.New(ps.Allocator)
		if err != nil {
			return nil, fmt.Errorf("ipam: %w", err)
		}
		fam := a.Family()
		if names[a.Name()] {
			return nil, fmt.Errorf("ipam: pool %q defined twice", a.Name())
		}
		names[a.Name()] = true
		m.addPoolLocked(poolKey{a.Name(), fam}, &pool{alloc: a, spec: ps, family: fam, prefix: a.CIDRs(), gateway: ps.Allocator.Gateway})
	}
	if err := m.rebuild(ctx); err != nil {
		return nil, err
	}
	m.updatePoolMetrics()
	return m, nil
}

// rebuild marks every stored address as held. Records are never dropped here, even when
// their pool is gone from the configuration: losing a record could hand its address out
// twice once the pool comes back.
func (m *Manager) rebuild(ctx context.Context) error {
	recs, err := m.opts.Store.List(ctx)
	if err != nil {
		return fmt.Errorf("ipam: read allocations from store: %w", err)
	}
	for _, r := range recs {
		m.owners[r.Owner] = &holding{rec: r}
		for _, a := range r.Addresses {
			addr := a.Prefix.Addr()
			if prev, dup := m.holders[addr]; dup {
				msg := fmt.Sprintf("address %s is recorded for both %s and %s", addr, prev, r.Owner)
				m.problems = append(m.problems, msg)
				m.log.Error("store holds a duplicate address; both records kept, address stays in use", "addr", addr, "owners", []string{prev.String(), r.Owner.String()})
				continue
			}
			m.holders[addr] = r.Owner
			p, ok := m.pools[poolKey{a.Pool, famOf(addr)}]
			if !ok {
				p = m.poolContaining(addr)
			}
			if p == nil && m.opts.Dynamic != nil {
				// Expected in agent mode: the node's blocks are not known yet. AddCIDR marks
				// the address taken when its block arrives; until then it is held here.
				m.log.Info("allocation waits for its block", "owner", r.Owner.String(), "addr", addr, "pool", a.Pool)
				continue
			}
			if p == nil {
				msg := fmt.Sprintf("%s holds %s from pool %q, which is no longer configured", r.Owner, addr, a.Pool)
				m.problems = append(m.problems, msg)
				m.log.Warn("allocation outside every configured pool; kept until released", "owner", r.Owner.String(), "addr", addr, "pool", a.Pool)
				continue
			}
			if err := p.alloc.Allocate(addr); err != nil && !errors.Is(err, allocator.ErrExcluded) {
				m.log.Warn("restoring allocation", "owner", r.Owner.String(), "addr", addr, "err", err)
			}
		}
	}
	m.log.Info("allocations restored from store", "owners", len(recs), "addresses", len(m.holders))
	return nil
}

func (m *Manager) poolContaining(a netip.Addr) *pool {
	for _, k := range m.poolKeys {
		if k.fam == famOf(a) && m.pools[k].alloc.Contains(a) {
			return m.pools[k]
		}
	}
	return nil
}

// addPoolLocked registers p under k, keeping poolKeys sorted.
func (m *Manager) addPoolLocked(k poolKey, p *pool) {
	m.pools[k] = p
	i := sort.Search(len(m.poolKeys), func(i int) bool { return !keyLess(m.poolKeys[i], k) })
	m.poolKeys = slices.Insert(m.poolKeys, i, k)
}

// acquire waits until no other request for o is in flight and marks o as in flight.
// It returns with m.mu held.
func (m *Manager) acquire(ctx context.Context, o store.Owner) error {
	m.mu.Lock()
	for {
		ch, busy := m.inflight[o]
		if !busy {
			m.inflight[o] = nil
			return nil
		}
		if ch == nil {
			ch = make(chan struct{})
			m.inflight[o] = ch
		}
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return api.Errorf(api.CodeUnavailable, "waiting for an earlier request of %s: %v", o, ctx.Err())
		}
		m.mu.Lock()
	}
}

// done clears o's in-flight mark. Called with m.mu held.
func (m *Manager) done(o store.Owner) {
	if ch := m.inflight[o]; ch != nil {
		close(ch)
	}
	delete(m.inflight, o)
}

func toOwner(o api.Owner) store.Owner {
	return store.Owner{ContainerID: o.ContainerID, IfName: o.IfName}
}

func fromOwner(o store.Owner) api.Owner {
	return api.Owner{ContainerID: o.ContainerID, IfName: o.IfName}
}

// Allocate implements api.Service.
func (m *Manager) Allocate(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	begin := time.Now()
	alloc, err := m.allocate(ctx, req)
	m.opts.Metrics.observe("allocate", begin, err)
	return alloc, err
}

func (m *Manager) allocate(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	requested, err := req.Validate()
	if err != nil {
		return nil, err
	}
	owner := toOwner(req.Owner)

	// Fast path, and the idempotent answer to a repeated ADD.
	if err := m.acquire(ctx, owner); err != nil {
		return nil, err
	}
	if h, ok := m.owners[owner]; ok {
		defer m.mu.Unlock()
		defer m.done(owner)
		return m.allocationOf(h.rec), nil
	}
	// The policy's view of the pools is taken in the same critical section (when the pools
	// are known), so that an ADD takes the lock three times: here, to take its addresses,
	// and to hold them once stored.
	var views []policy.PoolView
	if m.ready() {
		views = m.poolViewsLocked()
	}
	m.mu.Unlock()
	rec, err := m.reserve(ctx, req, owner, requested, views)
	if err != nil {
		return nil, err
	}
	// Not the request's context: see the package doc.
	perr := m.opts.Store.Put(context.WithoutCancel(ctx), rec)
	return m.hold(rec, perr)
}

// reserve takes the addresses the policy's decision for req points at (waiting for a new
// block when a dynamic pool is exhausted) and returns the record to persist. It is called
// with the owner's slot acquired and m.mu unlocked; on error it gives the slot back. views
// nil: the pools were not known yet when the slot was acquired; they are read once they are.
func (m *Manager) reserve(ctx context.Context, req *api.AllocateRequest, owner store.Owner, requested []netip.Addr, views []policy.PoolView) (store.Record, error) {
	release := func() {
		m.mu.Lock()
		m.done(owner)
		m.mu.Unlock()
	}
	if views == nil {
		if err := m.waitReady(ctx); err != nil {
			release()
			return store.Record{}, err
		}
		m.mu.Lock()
		views = m.poolViewsLocked()
		m.mu.Unlock()
	}

	decision, err := m.decideFresh(ctx, req, views)
	if err != nil {
		release()
		return store.Record{}, err
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	addrs, err := m.takeLocked(req, decision, requested, take{tr: explain.From(ctx)})
	if err != nil && m.opts.Dynamic != nil && api.CodeOf(err) == api.CodeExhausted {
		addrs, err = m.waitAndTakeLocked(ctx, req, decision, requested)
	}
	if err != nil {
		m.done(owner)
		return store.Record{}, err
	}
	return store.Record{
		Owner:     owner,
		Network:   req.Network,
		Pod:       store.Pod{Namespace: req.Pod.Namespace, Name: req.Pod.Name, UID: req.Pod.UID},
		Addresses: addrs,
		Created:   m.opts.Now().UTC(),
	}, nil
}

// hold makes rec's addresses its owner's once persisted (perr nil), or returns them to their
// pools; either way it gives the owner's slot back.
//
// Only the state other requests read is changed under m.mu (owners, holders, the pools'
// gauges, the owner's slot, and the routes the answer copies); the counters and the answer's
// strings are made after it is released, since a commit wakes its writers together and they
// all come here at once.
func (m *Manager) hold(rec store.Record, perr error) (*api.Allocation, error) {
	owner, addrs := rec.Owner, rec.Addresses
	if perr != nil {
		m.mu.Lock()
		for _, a := range addrs {
			m.freeLocked(a)
		}
		m.broadcastLocked()
		m.done(owner)
		m.mu.Unlock()
		m.log.Error("allocation not persisted; addresses returned to their pools", "owner", owner.String(), "err", perr)
		m.opts.Metrics.storeError("allocate")
		return nil, api.Errorf(api.CodeUnavailable, "store: %v", perr)
	}
	h := &holding{rec: rec}
	m.mu.Lock()
	m.owners[owner] = h
	for _, a := range addrs {
		m.holders[a.Prefix.Addr()] = owner
	}
	counted := m.updatePoolMetricsOfLocked(addrs)
	m.changedLocked()
	routes := m.routesOfLocked(rec)
	m.done(owner)
	m.mu.Unlock()
	for i, a := range addrs {
		if i < len(counted) && counted[i] != nil {
			counted[i].allocs.Inc()
		} else {
			m.opts.Metrics.allocated(a.Pool)
		}
	}
	if m.debug() {
		m.log.Debug("allocated", "owner", owner.String(), "network", rec.Network, "pod", rec.Pod.Namespace+"/"+rec.Pod.Name, "addresses", addrStrings(addrs))
	}
	return newAllocation(rec, routes), nil
}

// decide asks the network's policy for candidate pools.
func (m *Manager) decide(ctx context.Context, req *api.AllocateRequest, views []policy.PoolView) (policy.PodDecision, error) {
	pol := m.opts.Policy(req.Network)
	if pol == nil {
		return policy.PodDecision{}, api.Errorf(api.CodeInternal, "no pool policy configured for network %q", req.Network)
	}
	pctx, cancel := m.policyContext(ctx, pol)
	defer cancel()
	preq := &policy.PodRequest{
		Pod:  policy.Pod{Namespace: req.Pod.Namespace, Name: req.Pod.Name, UID: req.Pod.UID},
		Node: policy.Node{},
		CNI: policy.CNIRequest{
			IfName:           req.Owner.IfName,
			Network:          req.Network,
			Pools:            req.Pools,
			DefaultIPv4Pools: req.DefaultIPv4Pools,
			DefaultIPv6Pools: req.DefaultIPv6Pools,
		},
		Namespace: policy.Namespace{Name: req.Pod.Namespace},
		Pools:     views,
	}
	tr := explain.From(ctx)
	tr.Service("node pools")
	tr.Pools(views)
	if m.opts.PodContext != nil {
		if err := m.opts.PodContext(pctx, preq); err != nil {
			if api.CodeOf(err) == api.CodeInternal {
				var e *api.Error
				if !errors.As(err, &e) {
					err = api.Errorf(api.CodeUnavailable, "pod %s/%s: %v", req.Pod.Namespace, req.Pod.Name, err)
				}
			}
			return policy.PodDecision{}, err
		}
	}
	d, err := pol.SelectPodPools(pctx, preq)
	tr.Outcome(explain.Step{Name: "policy", Policy: pol, Request: preq, Decision: d, Err: err})
	if err != nil {
		return d, api.Errorf(api.CodeUnavailable, "pool policy failed: %v", err)
	}
	switch d.Code {
	case policy.Decided:
	case policy.NoFit, policy.Skip:
		reason := d.Reason
		if reason == "" {
			reason = "no policy chose a pool"
		}
		return d, api.Errorf(api.CodeNoPool, "no pool for %s: %s", req.Owner, reason)
	default:
		return d, api.Errorf(api.CodeInternal, "pool policy answered unknown code %v", d.Code)
	}
	if len(d.IPv4) == 0 && len(d.IPv6) == 0 {
		return d, api.Errorf(api.CodeNoPool, "no pool for %s: the policy (%s) chose no pool for any family", req.Owner, d.Source)
	}
	return d, nil
}

// decideFresh is decide, asked once more when the policy found no pool the request names or
// selects and DynamicOptions.RefreshPools registered pools the node's watch had not delivered.
func (m *Manager) decideFresh(ctx context.Context, req *api.AllocateRequest, views []policy.PoolView) (policy.PodDecision, error) {
	d, err := m.decide(ctx, req, views)
	if err == nil || d.Code != policy.NoFit || d.Cause != policy.CauseNoMatch {
		return d, err
	}
	if dyn := m.opts.Dynamic; dyn == nil || dyn.RefreshPools == nil || !dyn.RefreshPools(ctx) {
		return d, err
	}
	m.mu.Lock()
	views = m.poolViewsLocked()
	m.mu.Unlock()
	return m.decide(ctx, req, views)
}

// policyContext bounds a decision by PolicyTimeout, unless nothing in it can block: no
// PodContext and a policy that says it is inline (policychain.Chain of built-in policies).
// The bound's timer and its registration with the request's context (shared by a framed
// connection's requests) were 3.8% of a durable allocation's CPU profile.
func (m *Manager) policyContext(ctx context.Context, pol policy.PoolPolicy) (context.Context, context.CancelFunc) {
	if in, ok := pol.(interface{ Inline() bool }); ok && in.Inline() && m.opts.PodContext == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, m.opts.PolicyTimeout)
}

// takeLocked takes one address per wanted family: the requested one if the runtime asked for
// one in that family, else the next free address of the first candidate pool that has one.
// On failure nothing stays taken.
func (m *Manager) takeLocked(req *api.AllocateRequest, d policy.PodDecision, requested []netip.Addr, tk take) ([]store.Address, error) {
	var taken []store.Address
	fail := func(err error) ([]store.Address, error) {
		for _, a := range taken {
			if !tk.dry {
				m.freeLocked(a)
			}
		}
		return nil, err
	}
	used := make([]bool, len(requested))
	for _, fam := range []struct {
		f     policy.Family
		cands []policy.Candidate
	}{{policy.IPv4, d.IPv4}, {policy.IPv6, d.IPv6}} {
		idx := -1
		for i, a := range requested {
			if !used[i] && (a.Is4() == (fam.f == policy.IPv4)) {
				idx = i
				break
			}
		}
		if idx >= 0 {
			used[idx] = true
			a, err := m.takeRequestedLocked(req.Owner, idx, requested[idx], fam.cands, tk)
			if err != nil {
				return fail(err)
			}
			taken = append(taken, a)
			continue
		}
		if len(fam.cands) == 0 {
			continue
		}
		a, err := m.takeNextLocked(fam.f, fam.cands, tk)
		if err != nil {
			return fail(err)
		}
		taken = append(taken, a)
	}
	for i, u := range used {
		if !u {
			return fail(api.InvalidField(fmt.Sprintf("ips[%d]", i), "%s: only one address per family can be requested", requested[i]))
		}
	}
	return taken, nil
}

func (m *Manager) takeRequestedLocked(o api.Owner, idx int, a netip.Addr, cands []policy.Candidate, tk take) (store.Address, error) {
	field := fmt.Sprintf("ips[%d]", idx)
	p := m.poolContaining(a)
	if p == nil {
		return store.Address{}, api.InvalidField(field, "%s is not in any configured pool", a)
	}
	if len(cands) > 0 && !slices.ContainsFunc(cands, func(c policy.Candidate) bool { return c.Pool == p.alloc.Name() }) {
		names := make([]string, len(cands))
		for i, c := range cands {
			names[i] = c.Pool
		}
		return store.Address{}, api.InvalidField(field, "%s is in pool %q, but this request may use only %v", a, p.alloc.Name(), names)
	}
	if p.disabled {
		return store.Address{}, &api.Error{Code: api.CodeNoPool, Field: field, Message: fmt.Sprintf("%s is in pool %q, which is disabled (IPPool spec.disable)", a, p.alloc.Name())}
	}
	if err := tk.allocate(p, a); err != nil {
		if errors.Is(err, allocator.ErrInUse) {
			holder := m.holders[a]
			return store.Address{}, &api.Error{Code: api.CodeConflict, Field: field, Message: fmt.Sprintf("%s is already held by %s", a, holder)}
		}
		return store.Address{}, api.InvalidField(field, "%v", err)
	}
	return tk.chose(p, m.addressOf(p, a)), nil
}

func (m *Manager) takeNextLocked(fam policy.Family, cands []policy.Candidate, tk take) (store.Address, error) {
	var tried, disabled []string
	for _, c := range cands {
		p, ok := m.pools[poolKey{c.Pool, fam}]
		if !ok {
			return store.Address{}, api.Errorf(api.CodeNotFound, "pool %q chosen by the policy has no %s addresses", c.Pool, fam.Label())
		}
		if p.disabled {
			disabled = append(disabled, c.Pool)
			tk.tr.Pool(c.Pool, fam, api.VerdictDisabled, "IPPool spec.disable")
			continue
		}
		a, err := tk.next(p)
		if errors.Is(err, allocator.ErrExhausted) {
			tried = append(tried, c.Pool)
			tk.exhausted(m, p)
			continue
		}
		if err != nil {
			return store.Address{}, api.Errorf(api.CodeInternal, "pool %q: %v", c.Pool, err)
		}
		return tk.chose(p, m.addressOf(p, a)), nil
	}
	if len(tried) == 0 && len(disabled) > 0 {
		// Nothing to wait for: a new block would not be used either.
		return store.Address{}, api.Errorf(api.CodeNoPool, "no %s address: pool(s) %s disabled (IPPool spec.disable)", fam, strings.Join(quoteAll(disabled), ", "))
	}
	msg := fmt.Sprintf("no free %s address: pool(s) %s exhausted", fam, strings.Join(quoteAll(tried), ", "))
	if len(disabled) > 0 {
		msg += fmt.Sprintf("; %s disabled (IPPool spec.disable)", strings.Join(quoteAll(disabled), ", "))
	}
	return store.Address{}, api.Errorf(api.CodeExhausted, "%s", msg)
}

func (m *Manager) addressOf(p *pool, a netip.Addr) store.Address {
	bits := a.BitLen()
	for _, pr := range p.prefix {
		if pr.Contains(a) {
			bits = pr.Bits()
			if ad, ok := p.addressing[pr]; ok {
				return store.Address{Pool: p.alloc.Name(), Prefix: netip.PrefixFrom(a, ad.Bits), Gateway: ad.Gateway}
			}
			break
		}
	}
	return store.Address{Pool: p.alloc.Name(), Prefix: netip.PrefixFrom(a, bits), Gateway: p.gateway}
}

func (m *Manager) freeLocked(a store.Address) {
	addr := a.Prefix.Addr()
	if p, ok := m.pools[poolKey{a.Pool, famOf(addr)}]; ok && p.alloc.Contains(addr) {
		if err := p.alloc.Release(addr); err != nil && !errors.Is(err, allocator.ErrNotAllocated) {
			m.log.Warn("releasing address", "addr", addr, "pool", a.Pool, "err", err)
		}
	} else if p := m.poolContaining(addr); p != nil {
		_ = p.alloc.Release(addr)
	}
}

// Release implements api.Service.
func (m *Manager) Release(ctx context.Context, req *api.ReleaseRequest) error {
	begin := time.Now()
	err := m.release(ctx, req.Owner)
	m.opts.Metrics.observe("release", begin, err)
	return err
}

func (m *Manager) release(ctx context.Context, o api.Owner) error {
	if err := o.Validate(); err != nil {
		return err
	}
	owner := toOwner(o)
	if err := m.acquire(ctx, owner); err != nil {
		return err
	}
	h, ok := m.owners[owner]
	if !ok {
		m.done(owner)
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()

	derr := m.opts.Store.Delete(context.WithoutCancel(ctx), owner)

	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.done(owner)
	if derr != nil {
		m.opts.Metrics.storeError("release")
		return api.Errorf(api.CodeUnavailable, "store: %v", derr)
	}
	delete(m.owners, owner)
	for _, a := range h.rec.Addresses {
		addr := a.Prefix.Addr()
		if m.holders[addr] == owner {
			delete(m.holders, addr)
			m.freeLocked(a)
		}
		m.opts.Metrics.released(a.Pool)
	}
	m.broadcastLocked()
	m.updatePoolMetricsLocked()
	m.changedLocked()
	if m.debug() {
		m.log.Debug("released", "owner", owner.String(), "addresses", addrStrings(h.rec.Addresses))
	}
	return nil
}

// debug reports whether debug records are logged. The allocate and release paths build
// their debug attributes (strings of the owner and addresses) only then: with debug off,
// building them under m.mu was about 2% of an allocation's CPU (BenchmarkAPIAllocate).
func (m *Manager) debug() bool { return m.log.Enabled(context.Background(), slog.LevelDebug) }

// Check implements api.Service.
func (m *Manager) Check(ctx context.Context, req *api.CheckRequest) (*api.Allocation, error) {
	if err := req.Owner.Validate(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.owners[toOwner(req.Owner)]
	if !ok {
		return nil, api.Errorf(api.CodeNotFound, "%s holds no address", req.Owner)
	}
	return m.allocationOf(h.rec), nil
}

// GC implements api.Service: it releases every allocation of the network whose owner is
// not valid. Allocations made after the GC request arrived are spared, since the runtime's
// list of valid attachments cannot include them.
func (m *Manager) GC(ctx context.Context, req *api.GCRequest) (*api.GCResponse, error) {
	if req.Network == "" {
		return nil, api.InvalidField("network", "must not be empty")
	}
	valid := make(map[store.Owner]bool, len(req.Valid))
	for i, o := range req.Valid {
		if o.ContainerID == "" || o.IfName == "" {
			return nil, api.InvalidField(fmt.Sprintf("valid[%d]", i), "containerID and ifName are required")
		}
		valid[toOwner(o)] = true
	}
	began := m.opts.Now()
	m.mu.Lock()
	var stale []store.Owner
	for o, h := range m.owners {
		if h.rec.Network == req.Network && !valid[o] && !h.rec.Created.After(began) {
			stale = append(stale, o)
		}
	}
	m.mu.Unlock()
	sort.Slice(stale, func(i, j int) bool { return ownerLess(stale[i], stale[j]) })

	resp := &api.GCResponse{Released: []api.Owner{}}
	// Release concurrently so that the deletes share commits.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
		limit = make(chan struct{}, 32)
	)
	for _, o := range stale {
		wg.Add(1)
		limit <- struct{}{}
		go func(o store.Owner) {
			defer wg.Done()
			defer func() { <-limit }()
			err := m.release(ctx, fromOwner(o))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", o, err))
				return
			}
			resp.Released = append(resp.Released, fromOwner(o))
		}(o)
	}
	wg.Wait()
	sort.Slice(resp.Released, func(i, j int) bool { return ownerLess(toOwner(resp.Released[i]), toOwner(resp.Released[j])) })
	if len(resp.Released) > 0 {
		m.log.Info("gc released stale allocations", "network", req.Network, "count", len(resp.Released))
	}
	if len(errs) > 0 {
		return resp, api.Errorf(api.CodeUnavailable, "gc: %v", errors.Join(errs...))
	}
	return resp, nil
}

func ownerLess(a, b store.Owner) bool {
	if a.ContainerID != b.ContainerID {
		return a.ContainerID < b.ContainerID
	}
	return a.IfName < b.IfName
}

// allocationOf is r as the API answers it. Called with m.mu held.
func (m *Manager) allocationOf(r store.Record) *api.Allocation {
	return newAllocation(r, m.routesOfLocked(r))
}

// routesOfLocked returns the routes of r's pools (a new slice: the answer may be built after
// m.mu is released).
func (m *Manager) routesOfLocked(r store.Record) []api.Route {
	var out []api.Route
	for _, a := range r.Addresses {
		p, ok := m.pools[poolKey{a.Pool, famOf(a.Prefix.Addr())}]
		switch {
		case ok && len(p.spec.Routes) > 0:
			out = append(out, p.spec.Routes...)
		case m.opts.Dynamic != nil:
			out = append(out, m.routesLocked(poolKey{a.Pool, famOf(a.Prefix.Addr())}, a.Gateway)...)
		}
	}
	return out
}

// newAllocation is r as the API answers it, with its pools' routes. It reads nothing of the
// manager.
func newAllocation(r store.Record, routes []api.Route) *api.Allocation {
	out := &api.Allocation{
		Owner:   fromOwner(r.Owner),
		Network: r.Network,
		Pod:     api.PodRef{Namespace: r.Pod.Namespace, Name: r.Pod.Name, UID: r.Pod.UID},
		Created: r.Created,
		IPs:     make([]api.IPConfig, 0, len(r.Addresses)),
		Routes:  routes,
	}
	for _, a := range r.Addresses {
		ip := api.IPConfig{Address: a.Prefix.String(), Pool: a.Pool}
		if a.Gateway.IsValid() {
			ip.Gateway = a.Gateway.String()
		}
		out.IPs = append(out.IPs, ip)
	}
	return out
}

func addrStrings(as []store.Address) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Prefix.String()
	}
	return out
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}
