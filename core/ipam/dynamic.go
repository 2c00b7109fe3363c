package ipam

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/explain"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Dynamic pools (agent mode).
//
// In a cluster the node's pools are the blocks the operator hands it, and they change at
// run time: EnsurePool registers a pool (with no CIDR yet) so the policy can choose it,
// AddCIDR adds a block when it arrives, RemoveCIDR takes one away before the node gives it
// back. The package invariants hold as in standalone mode:
//
//   - Pools never overlap: AddCIDR refuses a block overlapping any CIDR of any pool.
//   - Nothing held is forgotten or handed out twice: on start, records whose block is not
//     known yet stay in the holders map; AddCIDR marks every held address inside the new
//     block as taken before anything can be handed out from it. RemoveCIDR is refused while
//     any address of the block is taken, including an address taken by an ADD whose store
//     commit is still running (it is taken in the allocator before the commit).
//   - Once RemoveCIDR returns nil, nothing can be handed out from the block: it is gone
//     from the allocator, under the same lock that every allocation takes.
//
// An ADD whose candidate pools have no free address waits (holding its owner's in-flight
// mark, as any ADD does) until an address may have become free — a block added or an
// address released — then tries again, up to DynamicOptions.Wait or the request's context.
// While it waits it counts as pending on the first candidate pool of each family it wants:
// that is the pendingIPs of the pre-allocation formula, which the agent reads with Usage.

// DynamicOptions configure dynamic pools.
type DynamicOptions struct {
	// Node is the node's name, for messages.
	Node string
	// Wait bounds how long an ADD waits for a free address. It should be shorter than the
	// CNI plugin's timeout, so that the runtime gets this error rather than a timeout.
	Wait time.Duration
	// BlockGateway reserves the first usable address of every block of four addresses or more
	// added with AddCIDR (not AddCIDRWith) as the gateway of the block's pods: never handed
	// out, and returned as the gateway with every address of the block. This is what a
	// bridge on the node (the CNI bridge plugin with isGateway) takes as its own address,
	// as host-local does with its ranges' default gateway. The operator counts a block's
	// addresses the same way (core/operator addrs).
	BlockGateway bool
	// Ready, if set, is closed once the node's pools are known (the agent has read its
	// AllotNode). Until then a new ADD waits for it, up to Wait: before it the manager has
	// no pool at all, and the policy would answer "no pool" (CNI error 103, a configuration
	// error to the runtime) for a pod that a moment later gets an address. An ADD of an owner
	// that already holds addresses (restored from the store) is answered without waiting.
	Ready <-chan struct{}
	// RefreshPools, if set, is called when the policy finds no pool that the request names
	// or selects (NoFit, CauseNoMatch). The node learns its pools from a watch, which may
	// lag a pool created a moment ago: RefreshPools reads them from their source (the agent:
	// the API server), registers those the watch has not delivered yet and reports whether it
	// registered any; if it did, the decision is asked again, once. It is bounded by ctx and
	// must cost at most one read per call (the policy's words are never parsed for a name).
	RefreshPools func(ctx context.Context) bool
}

// ready reports whether the node's pools are known (always, but for a dynamic manager
// before DynamicOptions.Ready is closed).
func (m *Manager) ready() bool {
	d := m.opts.Dynamic
	if d == nil || d.Ready == nil {
		return true
	}
	select {
	case <-d.Ready:
		return true
	default:
		return false
	}
}

// waitReady waits until the node's pools are known (DynamicOptions.Ready), up to Wait or
// ctx; then the runtime hears "try again later".
func (m *Manager) waitReady(ctx context.Context) error {
	d := m.opts.Dynamic
	if d == nil || d.Ready == nil {
		return nil
	}
	select {
	case <-d.Ready:
		return nil
	default:
	}
	begin := time.Now()
	t := time.NewTimer(d.Wait)
	defer t.Stop()
	select {
	case <-d.Ready:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	return api.Errorf(api.CodeUnavailable, "node %s: its pools are not known yet (the agent has not read its node's blocks from the API server); the request ended after %s waiting",
		d.Node, time.Since(begin).Round(time.Millisecond))
}

// BlockGateway is the gateway AddCIDR reserves in block c with DynamicOptions.BlockGateway:
// its first usable address (after the IPv4 network or IPv6 subnet-router anycast address),
// or the invalid Addr for blocks of fewer than four addresses (point-to-point and host
// blocks, whose every address goes to pods).
func BlockGateway(c netip.Prefix) netip.Addr {
	if !c.IsValid() || c.Addr().BitLen()-c.Bits() < 2 {
		return netip.Addr{}
	}
	return c.Masked().Addr().Next()
}

// PoolUsage is one pool (of one family) as the agent sees it.
type PoolUsage struct {
	Name   string
	Family policy.Family
	// CIDRs are the pool's blocks on this node, with their counters, in address order.
	CIDRs []allocator.CIDRStats
	// Usable and Used sum the blocks.
	Usable, Used uint64
	// Pending counts ADDs waiting for an address of this pool.
	Pending int
}

// ErrNotDynamic is returned by the run-time pool operations of a manager without
// Options.Dynamic.
var ErrNotDynamic = errors.New("ipam: pools are static (not in agent mode)")

// ErrNoSuchPool is returned for a pool the manager does not have.
var ErrNoSuchPool = errors.New("no such pool")

// EnsurePool registers an empty pool name of family fam if there is none.
func (m *Manager) EnsurePool(name string, fam policy.Family) error {
	if m.opts.Dynamic == nil {
		return ErrNotDynamic
	}
	if name == "" || !fam.Valid() {
		return fmt.Errorf("ipam: ensure pool %q (%s): name and family are required", name, fam)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.ensurePoolLocked(poolKey{name, fam})
	return err
}

// SetPoolDisabled marks a dynamic pool disabled (IPPool spec.disable): it hands out no new
// address, whatever the policy chose, and the addresses it holds stay. A request whose every
// candidate is disabled fails at once (CodeNoPool) instead of waiting for a block.
func (m *Manager) SetPoolDisabled(name string, fam policy.Family, disabled bool) error {
	if m.opts.Dynamic == nil {
		return ErrNotDynamic
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pools[poolKey{name, fam}]
	if !ok {
		return fmt.Errorf("ipam: pool %q (%s): %w", name, fam.Label(), ErrNoSuchPool)
	}
	p.disabled = disabled
	return nil
}

func (m *Manager) ensurePoolLocked(k poolKey) (*pool, error) {
	if p, ok := m.pools[k]; ok {
		return p, nil
	}
	a, err := allocator.New(allocator.Config{Name: k.name, Family: k.fam})
	if err != nil {
		return nil, fmt.Errorf("ipam: %w", err)
	}
	p := &pool{alloc: a, spec: PoolSpec{Allocator: allocator.Config{Name: k.name, Family: k.fam}}, family: k.fam}
	m.addPoolLocked(k, p)
	m.updatePoolMetricsLocked()
	return p, nil
}

// DropPool forgets an empty pool (no block, nobody waiting for it), e.g. when the cluster
// pool is deleted. A pool that still has a block is kept and an error returned.
func (m *Manager) DropPool(name string, fam policy.Family) error {
	if m.opts.Dynamic == nil {
		return ErrNotDynamic
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := poolKey{name, fam}
	p, ok := m.pools[k]
	if !ok {
		return nil
	}
	if n := len(p.prefix); n > 0 {
		return fmt.Errorf("ipam: pool %q (%s): still has %d block(s) on this node", name, fam.Label(), n)
	}
	if m.pending[k] > 0 {
		return fmt.Errorf("ipam: pool %q (%s): %d request(s) waiting for an address", name, fam.Label(), m.pending[k])
	}
	delete(m.pools, k)
	m.poolKeys = slices.DeleteFunc(m.poolKeys, func(x poolKey) bool { return x == k })
	m.opts.Metrics.dropPool(name, string(fam))
	return nil
}

// AddCIDR adds block c to pool name (created if needed). Adding a block the pool already
// has is a no-op.
func (m *Manager) AddCIDR(name string, c netip.Prefix) error { return m.addCIDR(name, c, nil) }

// addCIDR adds block c with its addressing (nil: the block's own). The addressing is in
// place before waiting ADDs are woken, all under one hold of the lock: an ADD must never
// take an address of the block before it knows how to present it.
func (m *Manager) addCIDR(name string, c netip.Prefix, ad *Addressing) error {
	if m.opts.Dynamic == nil {
		return ErrNotDynamic
	}
	if !c.IsValid() || c != c.Masked() {
		return fmt.Errorf("ipam: pool %q: block %s is not a valid masked CIDR", name, c)
	}
	k := poolKey{name, famOf(c.Addr())}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.ensurePoolLocked(k)
	if err != nil {
		return err
	}
	if slices.Contains(p.prefix, c) {
		p.setAddressing(c, ad)
		return nil
	}
	if err := m.overlapLocked(name, c); err != nil {
		return err
	}
	held := m.heldInLocked(c)
	var gw netip.Addr
	if ad == nil && m.opts.Dynamic.BlockGateway {
		gw, ad = m.blockGatewayLocked(k, c, held)
	}
	if err := p.alloc.AddCIDRWithGateway(c, gw); err != nil {
		return fmt.Errorf("ipam: %w", err)
	}
	p.prefix = p.alloc.CIDRs()
	p.setAddressing(c, ad)
	for _, a := range held {
		if err := p.alloc.Allocate(a); err != nil && !errors.Is(err, allocator.ErrExcluded) {
			m.log.Warn("marking a held address in a new block", "addr", a, "pool", name, "err", err)
		}
	}
	lvl := slog.LevelInfo
	if c.Bits() == c.Addr().BitLen() {
		lvl = slog.LevelDebug // single-address blocks (ENI mode) come by the hundred
	}
	m.log.Log(context.Background(), lvl, "block added", "pool", name, "cidr", c, "held", len(held))
	m.broadcastLocked()
	m.updatePoolMetricsLocked()
	m.changedLocked()
	return nil
}

// setAddressing records how block c's addresses are presented (nil: the block's own).
func (p *pool) setAddressing(c netip.Prefix, ad *Addressing) {
	if ad == nil {
		return
	}
	if p.addressing == nil {
		p.addressing = map[netip.Prefix]Addressing{}
	}
	p.addressing[c] = *ad
}

// overlapLocked refuses block c of pool name when it overlaps a block of any pool.
func (m *Manager) overlapLocked(name string, c netip.Prefix) error {
	for _, ok := range m.poolKeys {
		for _, o := range m.pools[ok].prefix {
			if o.Overlaps(c) {
				return fmt.Errorf("ipam: pool %q: block %s overlaps %s of pool %q; pools must not overlap", name, c, o, ok.name)
			}
		}
	}
	return nil
}

// heldInLocked returns, in order, the addresses of c held before the block was known
// (restored from the store): they are taken before anything is handed out from it.
func (m *Manager) heldInLocked(c netip.Prefix) []netip.Addr {
	var held []netip.Addr
	for a := range m.holders {
		if c.Contains(a) {
			held = append(held, a)
		}
	}
	slices.SortFunc(held, netip.Addr.Compare)
	return held
}

// blockGatewayLocked picks the gateway block c of pool k reserves, and the addressing that
// presents it, when the block brings no addressing of its own.
func (m *Manager) blockGatewayLocked(k poolKey, c netip.Prefix, held []netip.Addr) (netip.Addr, *Addressing) {
	var ad *Addressing
	gw := BlockGateway(c)
	if reserve, pad, ok := m.blockAddressingLocked(k, c); ok {
		// The pool's object names the gateway (IPPool spec.ipvN.gateway).
		gw, ad = reserve, pad
	}
	if gw.IsValid() && slices.Contains(held, gw) {
		// A pod of a version that did not reserve gateways holds it: the block keeps
		// no gateway rather than losing track of that pod's address.
		m.log.Warn("block gateway held by a pod; the block's pods get no gateway", "pool", k.name, "cidr", c, "addr", gw)
		gw = netip.Addr{}
	}
	if gw.IsValid() && ad == nil {
		ad = &Addressing{Bits: c.Bits(), Gateway: gw}
	}
	return gw, ad
}

// Addressing is how the addresses of one block are presented to pods: with prefix length
// Bits and Gateway instead of the block's own. ENI mode adds each cloud address as a
// single-address block and presents it with its subnet's prefix length and router.
type Addressing struct {
	Bits    int
	Gateway netip.Addr
}

// AddCIDRWith is AddCIDR whose addresses are presented with ad (ad.Bits at most the
// family's length: a single address's subnet, or a host address of a larger block, as ENI
// mode presents the addresses of an IPv6 /80; the gateway, if set, of the block's family).
// Adding a block the pool already has updates its addressing for later allocations.
func (m *Manager) AddCIDRWith(name string, c netip.Prefix, ad Addressing) error {
	if !c.IsValid() || ad.Bits < 0 || ad.Bits > c.Addr().BitLen() {
		return fmt.Errorf("ipam: pool %q: block %s: addressing prefix length %d must be between 0 and %d", name, c, ad.Bits, c.Addr().BitLen())
	}
	if ad.Gateway.IsValid() && ad.Gateway.Is4() != c.Addr().Is4() {
		return fmt.Errorf("ipam: pool %q: block %s: gateway %s is of another family", name, c, ad.Gateway)
	}
	return m.addCIDR(name, c, &ad)
}

// ErrBlockInUse: RemoveCIDR of a block with an address taken.
var ErrBlockInUse = errors.New("block in use")

// RemoveCIDR removes block c from pool name. It is refused (ErrBlockInUse) while any address
// of the block is taken; once it returns nil nothing can be handed out from the block.
// Removing a block the pool does not have is a no-op.
func (m *Manager) RemoveCIDR(name string, c netip.Prefix) error {
	if m.opts.Dynamic == nil {
		return ErrNotDynamic
	}
	k := poolKey{name, famOf(c.Addr())}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pools[k]
	if !ok || !slices.Contains(p.prefix, c) {
		return nil
	}
	if err := p.alloc.RemoveCIDR(c); err != nil {
		if errors.Is(err, allocator.ErrInUse) {
			return fmt.Errorf("ipam: pool %q: %w: %v", name, ErrBlockInUse, err)
		}
		return fmt.Errorf("ipam: %w", err)
	}
	p.prefix = p.alloc.CIDRs()
	delete(p.addressing, c)
	m.log.Info("block removed", "pool", name, "cidr", c)
	m.updatePoolMetricsLocked()
	m.changedLocked()
	return nil
}

// DropCIDR removes block c from pool name even while addresses of it are held, and returns
// the held addresses of the block. It is for a block that is no longer the node's (the
// operator or a person took it away while pods used it): from then on nothing is handed out
// from it, while its holders keep their addresses and records until their DEL (or GC, or
// reclaim) frees them, as rebuild keeps records whose block is not known. Should the block
// come back, AddCIDR marks those addresses taken again. This is what Cilium's agent does with
// an in-use CIDR removed from its CiliumNode's spec (pkg/ipam/pool.go, cidrPool.updatePool:
// kept for its holders, no new allocation from it). Dropping a block the pool does not have
// is a no-op.
func (m *Manager) DropCIDR(name string, c netip.Prefix) ([]netip.Addr, error) {
	if m.opts.Dynamic == nil {
		return nil, ErrNotDynamic
	}
	k := poolKey{name, famOf(c.Addr())}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pools[k]
	if !ok || !slices.Contains(p.prefix, c) {
		return nil, nil
	}
	if _, err := p.alloc.DropCIDR(c); err != nil {
		return nil, fmt.Errorf("ipam: %w", err)
	}
	p.prefix = p.alloc.CIDRs()
	delete(p.addressing, c)
	var held []netip.Addr
	for a := range m.holders {
		if c.Contains(a) {
			held = append(held, a)
		}
	}
	slices.SortFunc(held, netip.Addr.Compare)
	m.log.Warn("block dropped while in use; its holders keep their addresses, nothing more is handed out from it", "pool", name, "cidr", c, "held", len(held))
	m.updatePoolMetricsLocked()
	m.changedLocked()
	return held, nil
}

// Orphans returns the held addresses that lie in no block of any pool (blocks not known yet,
// or dropped while in use), with their owners, sorted by address.
func (m *Manager) Orphans() []Orphan {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Orphan
	for a, o := range m.holders {
		if m.poolContaining(a) == nil {
			out = append(out, Orphan{Addr: a, Owner: fromOwner(o)})
		}
	}
	slices.SortFunc(out, func(x, y Orphan) int { return x.Addr.Compare(y.Addr) })
	return out
}

// Orphan is a held address outside every block (Manager.Orphans).
type Orphan struct {
	Addr  netip.Addr
	Owner api.Owner
}

// Usage returns every pool with its blocks and pending requests, sorted by name then
// family.
func (m *Manager) Usage() []PoolUsage {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]PoolUsage, 0, len(m.poolKeys))
	for _, k := range m.poolKeys {
		p := m.pools[k]
		st := p.alloc.Stats()
		out = append(out, PoolUsage{
			Name: k.name, Family: k.fam, CIDRs: p.alloc.CIDRStats(),
			Usable: st.Usable, Used: st.Used, Pending: m.pending[k],
		})
	}
	return out
}

// broadcastLocked wakes every ADD waiting for an address.
func (m *Manager) broadcastLocked() {
	if m.waiters == 0 {
		return
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

// changedLocked tells the agent that demand may have changed. The callback must not block;
// it runs under the lock so that it sees changes in order.
func (m *Manager) changedLocked() {
	if m.opts.OnChange != nil {
		m.opts.OnChange()
	}
}

// waitAndTakeLocked is called, with m.mu held, after takeLocked found the candidate pools
// exhausted. It counts the request as pending, waits for an address to become free and
// tries again, until it gets one or the wait is over. It returns with m.mu held.
func (m *Manager) waitAndTakeLocked(ctx context.Context, req *api.AllocateRequest, d policy.PodDecision, requested []netip.Addr) ([]store.Address, error) {
	keys := waitedPools(d)
	defer m.waitingLocked(keys)()

	wait := m.opts.Dynamic.Wait
	if wait <= 0 {
		wait = 25 * time.Second
	}
	begin := time.Now()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	m.log.Info("no free address; waiting for a block", "owner", req.Owner.String(), "pod", req.Pod.Namespace+"/"+req.Pod.Name, "pools", keyNames(keys))
	for {
		ch := m.changed
		m.mu.Unlock()
		var timeout bool
		select {
		case <-ch:
		case <-timer.C:
			timeout = true
		case <-ctx.Done():
			m.mu.Lock()
			return nil, api.Errorf(api.CodeUnavailable, "%s; the request ended after %s waiting: %v",
				m.waitMessageLocked(keys), time.Since(begin).Round(time.Millisecond), ctx.Err())
		}
		m.mu.Lock()
		addrs, err := m.takeLocked(req, d, requested, take{tr: explain.From(ctx)})
		if err == nil || api.CodeOf(err) != api.CodeExhausted {
			return addrs, err
		}
		if timeout {
			m.opts.Metrics.timeouts.Inc()
			return nil, api.Errorf(api.CodeExhausted, "%s; requested a new block from the operator, none arrived within %s",
				m.waitMessageLocked(keys), wait)
		}
	}
}

// waitedPools are the pools a request waits on: each family's first candidate.
func waitedPools(d policy.PodDecision) []poolKey {
	var keys []poolKey
	for _, fc := range []struct {
		f policy.Family
		c []policy.Candidate
	}{{policy.IPv4, d.IPv4}, {policy.IPv6, d.IPv6}} {
		if len(fc.c) > 0 {
			keys = append(keys, poolKey{fc.c[0].Pool, fc.f})
		}
	}
	return keys
}

// waitingLocked counts a request as pending on keys, the demand the agent reports, and
// returns the function that stops counting it; both are called with m.mu held.
func (m *Manager) waitingLocked(keys []poolKey) (stop func()) {
	for _, k := range keys {
		m.pending[k]++
	}
	m.waiters++
	since := m.opts.Now()
	m.waitingSince[since]++
	m.waitMetricsLocked(keys)
	m.changedLocked()
	return func() {
		for _, k := range keys {
			if m.pending[k]--; m.pending[k] <= 0 {
				delete(m.pending, k)
			}
		}
		m.waiters--
		if m.waitingSince[since]--; m.waitingSince[since] <= 0 {
			delete(m.waitingSince, since)
		}
		m.waitMetricsLocked(keys)
		m.changedLocked()
	}
}

// waitMessageLocked names the pools a waiting request still finds exhausted.
func (m *Manager) waitMessageLocked(keys []poolKey) string {
	var parts []string
	for _, k := range keys {
		if p, ok := m.pools[k]; !ok || p.alloc.Stats().Free == 0 {
			parts = append(parts, fmt.Sprintf("pool %q: no free %s address on node %s", k.name, k.fam.Label(), m.opts.Dynamic.Node))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("pools %s: no free address on node %s", strings.Join(keyNames(keys), ", "), m.opts.Dynamic.Node)
	}
	return strings.Join(parts, "; ")
}

func keyNames(keys []poolKey) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s/%s", k.name, k.fam)
	}
	return out
}

// waitMetricsLocked publishes the waiting counts of keys (0 once nothing waits on one) and
// the oldest wait's start.
func (m *Manager) waitMetricsLocked(keys []poolKey) {
	counts := make(map[[2]string]int, len(keys))
	for _, k := range keys {
		counts[[2]string{k.name, string(k.fam)}] = m.pending[k]
	}
	var oldest time.Time
	for t := range m.waitingSince {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	m.opts.Metrics.waits(counts, oldest)
}
