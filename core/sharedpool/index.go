package sharedpool

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-ipam/allot/core/addrset"
	"github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// localTTL bounds how long the index trusts what this process wrote (or saw taken) over
// what the informers say. The informers normally catch up within milliseconds; the bound only
// matters if an event is lost, and then the informer's own state wins again.
const localTTL = 2 * time.Minute

// Index is the allocator's view of the cluster's shared pools, reserved addresses and
// claims, fed by informers (Watch) or by hand (tests). It never decides alone that an address
// is free: the claim's Create does; the index only makes the first try likely to succeed.
//
// On top of the informers' state it keeps what this process knows sooner: claims it created
// or updated (local), claims it deleted (gone) and addresses it found taken by a Create that
// failed with AlreadyExists (taken), each until the informer reports the same or localTTL
// passes.
type Index struct {
	mu       sync.RWMutex
	now      func() time.Time
	log      *slog.Logger
	pools    map[string]*v1alpha1.SharedIPPool
	reserved map[string]*v1alpha1.ReservedIP
	claims   map[string]*v1alpha1.AddressClaim // by name, from the informer
	byPool   map[string]map[string]bool        // pool -> claim names
	byPod    map[string]map[string]bool        // namespace/pod -> claim names

	local map[string]localClaim // claims written by this process, by name
	gone  map[string]time.Time  // claim UIDs deleted by this process
	taken map[netip.Addr]time.Time
	// pending are addresses a Create of this process is racing for right now: concurrent ADDs
	// on this node skip them instead of colliding with each other.
	pending map[netip.Addr]bool

	// derived, rebuilt when pools or reservations change (version counts changes)
	version   uint64
	builtAt   uint64
	resolved  map[string]*Resolved
	resErrs   map[string]string // pool -> why it does not resolve
	conflicts map[string]string
	res       Reserved

	synced atomic.Bool
}

type localClaim struct {
	c  *v1alpha1.AddressClaim
	at time.Time
}

// NewIndex returns an empty index.
func NewIndex(log *slog.Logger, now func() time.Time) *Index {
	if log == nil {
		log = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	return &Index{
		now: now, log: log,
		pools: map[string]*v1alpha1.SharedIPPool{}, reserved: map[string]*v1alpha1.ReservedIP{},
		claims: map[string]*v1alpha1.AddressClaim{}, byPool: map[string]map[string]bool{}, byPod: map[string]map[string]bool{},
		local: map[string]localClaim{}, gone: map[string]time.Time{}, taken: map[netip.Addr]time.Time{},
		pending: map[netip.Addr]bool{},
		version: 1,
	}
}

// Synced reports whether the informers feeding the index have synced (SetSynced).
func (x *Index) Synced() bool { return x.synced.Load() }

// SetSynced marks the index as filled.
func (x *Index) SetSynced() { x.synced.Store(true) }

func podKey(ns, name string) string { return ns + "/" + name }

// UpsertPool records a SharedIPPool (add or update).
func (x *Index) UpsertPool(p *v1alpha1.SharedIPPool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.pools[p.Name] = p
	x.version++
}

// DeletePool forgets a SharedIPPool.
func (x *Index) DeletePool(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.pools, name)
	x.version++
}

// UpsertReserved records a ReservedIP.
func (x *Index) UpsertReserved(r *v1alpha1.ReservedIP) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.reserved[r.Name] = r
	x.version++
}

// DeleteReserved forgets a ReservedIP.
func (x *Index) DeleteReserved(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.reserved, name)
	x.version++
}

// UpsertClaim records an AddressClaim as the informer reports it.
func (x *Index) UpsertClaim(c *v1alpha1.AddressClaim) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.claims[c.Name]; ok {
		x.unlinkLocked(old)
	}
	x.claims[c.Name] = c
	addTo(x.byPool, c.Spec.Pool, c.Name)
	addTo(x.byPod, podKey(c.Spec.Holder.Namespace, c.Spec.Holder.Pod), c.Name)
	if l, ok := x.local[c.Name]; ok && (l.c.UID != c.UID || l.c.ResourceVersion == c.ResourceVersion || newerRV(c.ResourceVersion, l.c.ResourceVersion)) {
		delete(x.local, c.Name)
	}
	if a, err := netip.ParseAddr(c.Spec.IP); err == nil {
		delete(x.taken, a)
	}
}

// DeleteClaim forgets an AddressClaim.
func (x *Index) DeleteClaim(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.claims[name]; ok {
		x.unlinkLocked(old)
		delete(x.claims, name)
		delete(x.gone, string(old.UID))
		if l, ok := x.local[name]; ok && l.c.UID == old.UID {
			delete(x.local, name)
		}
	}
	// A Create that lost the race for this address may have noted it taken after the
	// informer had already reported the winning claim; the claim is gone now, so is that.
	if a, err := k8s.ParseClaimName(name); err == nil {
		delete(x.taken, a)
	}
}

func (x *Index) unlinkLocked(c *v1alpha1.AddressClaim) {
	delFrom(x.byPool, c.Spec.Pool, c.Name)
	delFrom(x.byPod, podKey(c.Spec.Holder.Namespace, c.Spec.Holder.Pod), c.Name)
}

func addTo(m map[string]map[string]bool, k, v string) {
	s := m[k]
	if s == nil {
		s = map[string]bool{}
		m[k] = s
	}
	s[v] = true
}

func delFrom(m map[string]map[string]bool, k, v string) {
	if s := m[k]; s != nil {
		delete(s, v)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}

// newerRV reports a > b for resourceVersions that are etcd revisions (decimal). Anything
// else compares as not newer, which keeps the local copy until localTTL.
func newerRV(a, b string) bool {
	var x, y uint64
	if _, err := fmt.Sscan(a, &x); err != nil {
		return false
	}
	if _, err := fmt.Sscan(b, &y); err != nil {
		return false
	}
	return x > y
}

// noteWritten records a claim this process created or updated.
func (x *Index) noteWritten(c *v1alpha1.AddressClaim) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.local[c.Name] = localClaim{c: c.DeepCopy(), at: x.now()}
}

// noteDeleted records a claim this process deleted.
func (x *Index) noteDeleted(c *v1alpha1.AddressClaim) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.gone[string(c.UID)] = x.now()
	if l, ok := x.local[c.Name]; ok && l.c.UID == c.UID {
		delete(x.local, c.Name)
	}
}

// noteTaken records an address another agent holds (its Create failed with AlreadyExists).
func (x *Index) noteTaken(a netip.Addr) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, known := x.claims[k8s.ClaimName(a)]; known {
		return // the informer already reported the winner; its delete will free the address
	}
	x.taken[a] = x.now()
}

// expireLocked drops local knowledge older than localTTL.
func (x *Index) expireLocked() {
	cut := x.now().Add(-localTTL)
	for k, l := range x.local {
		if l.at.Before(cut) {
			delete(x.local, k)
		}
	}
	for k, t := range x.gone {
		if t.Before(cut) {
			delete(x.gone, k)
		}
	}
	for k, t := range x.taken {
		if t.Before(cut) {
			delete(x.taken, k)
		}
	}
}

// claimLocked is the effective claim of a name: this process's write if newer, nil if it
// deleted it.
func (x *Index) claimLocked(name string) *v1alpha1.AddressClaim {
	c := x.claims[name]
	if l, ok := x.local[name]; ok {
		c = l.c
	}
	if c != nil && !x.gone[string(c.UID)].IsZero() {
		return nil
	}
	return c
}

// podClaims returns the effective claims whose holder is the pod namespace/name, sorted
// by name.
func (x *Index) podClaims(ns, pod string) []*v1alpha1.AddressClaim {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expireLocked()
	k := podKey(ns, pod)
	names := map[string]bool{}
	for n := range x.byPod[k] {
		names[n] = true
	}
	for n, l := range x.local {
		if podKey(l.c.Spec.Holder.Namespace, l.c.Spec.Holder.Pod) == k {
			names[n] = true
		}
	}
	var out []*v1alpha1.AddressClaim
	for _, n := range sortedKeys(names) {
		if c := x.claimLocked(n); c != nil && c.Spec.Holder.Namespace == ns && c.Spec.Holder.Pod == pod {
			out = append(out, c)
		}
	}
	return out
}

// nodeClaims returns the effective claims held on node (all when node is ""), sorted by
// name.
func (x *Index) nodeClaims(node string) []*v1alpha1.AddressClaim {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expireLocked()
	names := map[string]bool{}
	for n := range x.claims {
		names[n] = true
	}
	for n := range x.local {
		names[n] = true
	}
	var out []*v1alpha1.AddressClaim
	for _, n := range sortedKeys(names) {
		if c := x.claimLocked(n); c != nil && (node == "" || c.Spec.Holder.Node == node) {
			out = append(out, c)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// poolInfo is one pool as allocation needs it.
type poolInfo struct {
	obj      *v1alpha1.SharedIPPool
	res      *Resolved // nil when the spec does not resolve
	err      string    // why it does not resolve
	conflict string    // why it must not hand out addresses (sharedpool.Conflicts)
}

// rebuildLocked recomputes resolved pools, reserved addresses and conflicts after a change.
func (x *Index) rebuildLocked() {
	if x.builtAt == x.version {
		return
	}
	ris := make([]v1alpha1.ReservedIP, 0, len(x.reserved))
	for _, n := range sortedKeys(x.reserved) {
		ris = append(ris, *x.reserved[n])
	}
	res, errs := ReservedFrom(ris)
	for _, e := range errs {
		x.log.Warn("ReservedIP ignored", "err", e)
	}
	x.res = res
	pools := make([]v1alpha1.SharedIPPool, 0, len(x.pools))
	x.resolved = map[string]*Resolved{}
	x.resErrs = map[string]string{}
	for _, n := range sortedKeys(x.pools) {
		p := x.pools[n]
		pools = append(pools, *p)
		r, err := Resolve(p, res)
		if err != nil {
			x.resErrs[n] = err.Error()
			continue
		}
		x.resolved[n] = r
	}
	x.conflicts = Conflicts(pools)
	x.builtAt = x.version
}

// pool returns what the index knows of pool name.
func (x *Index) pool(name string) (poolInfo, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.rebuildLocked()
	p, ok := x.pools[name]
	if !ok {
		return poolInfo{}, false
	}
	return poolInfo{obj: p, res: x.resolved[name], err: x.resErrs[name], conflict: x.conflicts[name]}, true
}

// usedLocked returns the positions in f.Usable of the addresses of pool that are held (by
// the informer's claims of the pool, this process's writes, or seen taken), sorted, unique.
func (x *Index) usedLocked(pool string, f *ResolvedFamily) []uint64 {
	var used []uint64
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			if i, ok := f.Usable.Index(a); ok {
				used = append(used, i)
			}
		}
	}
	for n := range x.byPool[pool] {
		if c := x.claimLocked(n); c != nil {
			add(c.Spec.IP)
		}
	}
	for n, l := range x.local {
		if _, inInformer := x.byPool[pool][n]; !inInformer && l.c.Spec.Pool == pool && x.claimLocked(n) != nil {
			add(l.c.Spec.IP)
		}
	}
	for a := range x.taken {
		if i, ok := f.Usable.Index(a); ok {
			used = append(used, i)
		}
	}
	for a := range x.pending {
		if i, ok := f.Usable.Index(a); ok {
			used = append(used, i)
		}
	}
	slices.Sort(used)
	return slices.Compact(used)
}

// pick chooses the first free address of the pool's family fam at or after position start
// of its usable addresses (wrapping) and marks it pending until unpend. Each node starts at
// its own position (Allocator.start), so nodes fill separate stretches of the pool and race
// for the same address only where two stretches meet or when the pool is nearly full; the
// pending mark keeps this node's own concurrent ADDs apart. It returns false when the index
// sees no free address.
//
// With spread set, the address is instead the free one at rank start modulo the number of
// free addresses: after a conflict, when the pool is nearly full and every node is hunting
// the same few gaps, a uniform pick among them collides least.
func (x *Index) pick(pool string, fam policy.Family, start uint64, spread bool) (netip.Addr, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.rebuildLocked()
	r := x.resolved[pool]
	if r == nil || r.Get(fam) == nil {
		return netip.Addr{}, false
	}
	f := r.Get(fam)
	used := x.usedLocked(pool, f)
	var a netip.Addr
	var ok bool
	if spread {
		a, ok = pickFree(f.Usable, used, start)
	} else {
		a, ok = pickFrom(f.Usable, used, start)
	}
	if ok {
		x.pending[a] = true
	}
	return a, ok
}

// unpend ends the race for a (its Create returned; noteWritten or noteTaken has recorded
// the outcome).
func (x *Index) unpend(a netip.Addr) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.pending, a)
}

// pickFree returns the free address of usable at rank seed mod free, where used are the
// sorted positions (in usable) of the addresses that are not free.
func pickFree(usable addrset.Set, used []uint64, seed uint64) (netip.Addr, bool) {
	size := usable.Size()
	if uint64(len(used)) >= size {
		return netip.Addr{}, false
	}
	k := seed % (size - uint64(len(used)))
	// The k-th free position is k plus the number of used positions at or before it.
	j := uint64(0)
	for j < uint64(len(used)) && used[j] <= k+j {
		j++
	}
	return usable.Nth(k + j)
}

// pickFrom returns the first free address of usable at or after position start (modulo the
// size, wrapping), where used are the sorted, unique positions (in usable) of the addresses
// that are not free.
func pickFrom(usable addrset.Set, used []uint64, start uint64) (netip.Addr, bool) {
	size := usable.Size()
	if uint64(len(used)) >= size {
		return netip.Addr{}, false
	}
	p := start % size
	j := sort.Search(len(used), func(i int) bool { return used[i] >= p })
	for j < len(used) && used[j] == p {
		p++
		j++
	}
	if p == size {
		p, j = 0, 0
		for j < len(used) && used[j] == p {
			p++
			j++
		}
	}
	return usable.Nth(p)
}

// views returns the pools as the pool policy sees them, sorted by name then family, and the
// names of pools that must not hand out addresses with the reason.
func (x *Index) views() ([]policy.PoolView, map[string]string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expireLocked()
	x.rebuildLocked()
	blocked := map[string]string{}
	var out []policy.PoolView
	for _, n := range sortedKeys(x.pools) {
		p := x.pools[n]
		if msg := x.resErrs[n]; msg != "" {
			blocked[n] = msg
		}
		if msg := x.conflicts[n]; msg != "" {
			blocked[n] = msg
		}
		r := x.resolved[n]
		for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
			spec := p.Spec.IPv4
			if fam == policy.IPv6 {
				spec = p.Spec.IPv6
			}
			if spec == nil {
				continue
			}
			v := specView(n, p, fam, spec, blocked[n] != "")
			if r != nil {
				x.usageLocked(&v, r.Get(fam), fam)
			}
			out = append(out, v)
		}
	}
	return out, blocked
}

// specView is what the policy sees of family fam (spec) of pool p, named n, from its spec
// alone.
func specView(n string, p *v1alpha1.SharedIPPool, fam policy.Family, spec *v1alpha1.SharedPoolFamily, blocked bool) policy.PoolView {
	v := policy.PoolView{
		Name: n, Family: fam, Default: p.Spec.Default,
		Disabled:    p.Spec.Disable || blocked,
		Terminating: p.DeletionTimestamp != nil,
		Excluded:    spec.ExcludeIPs,
		NodeName:    p.Spec.NodeName, NamespaceName: p.Spec.NamespaceName, MultusName: p.Spec.MultusName,
	}
	// An auto pool names the AllotSubnet it was cut from; the pod annotations
	// ipam.spidernet.io/subnet(s) select pools by it (spiderpool-priority).
	v.Subnet = p.Labels[v1alpha1.LabelSubnet]
	if p.Spec.NodeAffinity != nil {
		s := k8s.LabelSelector(p.Spec.NodeAffinity)
		v.NodeAffinity = &s
	}
	if p.Spec.NamespaceAffinity != nil {
		s := k8s.LabelSelector(p.Spec.NamespaceAffinity)
		v.NamespaceAffinity = &s
	}
	if p.Spec.PodAffinity != nil {
		s := k8s.LabelSelector(p.Spec.PodAffinity)
		v.PodAffinity = &s
	}
	return v
}

// usageLocked fills in v the address space of the resolved family f and its use.
func (x *Index) usageLocked(v *policy.PoolView, f *ResolvedFamily, fam policy.Family) {
	v.CIDRs = []netip.Prefix{f.Subnet}
	v.Total = f.Usable.Size()
	v.Free = v.Total - uint64(len(x.usedLocked(v.Name, f)))
	v.AllExcluded = f.Configured.Empty()
	if !v.AllExcluded {
		rs := x.res.Get(fam)
		v.AllReserved = f.Configured.Subtract(rs).Empty()
		if ov := f.Configured.Intersect(rs); !ov.Empty() {
			v.Reserved = ov.Strings()
		}
	}
}

// Watch feeds the index from the informers of c (SharedIPPool, ReservedIP, AddressClaim;
// cluster-wide) and marks it synced once they have synced. c must have been created with
// those types allowed; Watch does not start c.
func (x *Index) Watch(ctx context.Context, c cache.Cache) error {
	kinds := []struct {
		obj              client.Object
		upsert           func(any)
		delete           func(string)
		expectedTypeName string
	}{
		{&v1alpha1.SharedIPPool{}, func(o any) {
			if p, ok := o.(*v1alpha1.SharedIPPool); ok {
				x.UpsertPool(p)
			}
		}, x.DeletePool, "SharedIPPool"},
		{&v1alpha1.ReservedIP{}, func(o any) {
			if r, ok := o.(*v1alpha1.ReservedIP); ok {
				x.UpsertReserved(r)
			}
		}, x.DeleteReserved, "ReservedIP"},
		{&v1alpha1.AddressClaim{}, func(o any) {
			if c, ok := o.(*v1alpha1.AddressClaim); ok {
				x.UpsertClaim(c)
			}
		}, x.DeleteClaim, "AddressClaim"},
	}
	var regs []toolscache.ResourceEventHandlerRegistration
	for _, k := range kinds {
		inf, err := c.GetInformer(ctx, k.obj)
		if err != nil {
			return fmt.Errorf("sharedpool: informer for %s: %w", k.expectedTypeName, err)
		}
		reg, err := inf.AddEventHandler(eventHandler(k.upsert, k.delete))
		if err != nil {
			return fmt.Errorf("sharedpool: event handler for %s: %w", k.expectedTypeName, err)
		}
		regs = append(regs, reg)
	}
	go x.syncedWhen(ctx, c, regs)
	return nil
}

// eventHandler feeds an informer's objects to upsert and the names of deleted ones to del.
func eventHandler(upsert func(any), del func(string)) toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { upsert(o) },
		UpdateFunc: func(_, o any) { upsert(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if m, ok := o.(client.Object); ok {
				del(m.GetName())
			}
		},
	}
}

// syncedWhen marks the index synced once the cache and every handler of regs have synced.
func (x *Index) syncedWhen(ctx context.Context, c cache.Cache, regs []toolscache.ResourceEventHandlerRegistration) {
	if !c.WaitForCacheSync(ctx) {
		return
	}
	for _, r := range regs {
		for !r.HasSynced() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	x.SetSynced()
}

// CacheObjects are the objects the informer cache given to Watch must serve, cluster-wide.
func CacheObjects() []client.Object {
	return []client.Object{&v1alpha1.SharedIPPool{}, &v1alpha1.ReservedIP{}, &v1alpha1.AddressClaim{}}
}
