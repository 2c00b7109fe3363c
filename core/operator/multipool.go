package operator

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/allot-ipam/allot/core/agent"
	"github.com/allot-ipam/allot/core/blockalloc"
	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

const (
	kindPool = "ippool"
	// maxBlocksPerPool bounds one node's blocks from one pool (the CRD's maxItems).
	maxBlocksPerPool = 1024
	conflictRetry    = 20 * time.Millisecond
)

// newMultiPool makes the multi-pool reconcilers: IPPool status and AllotNode blocks, each
// re-queueing the other through its dirty set.
func newMultiPool(t *term) []reconciler {
	pools := &ippoolReconciler{client: t.client, st: t.st, m: t.m, log: t.log, status: t.status, event: t.event,
		ready: t.st.waitReady, dirty: newDirtySet(t.opts.StatusDelay)}
	nodes := &allotNodeReconciler{client: t.client, reader: t.reader, st: t.st, m: t.m, log: t.log, event: t.event,
		fence: t.fence, ready: t.st.waitReady, workers: t.opts.Workers, kick: newDirtySet(0), poolDirty: pools.dirty,
		statusDelay: t.opts.StatusDelay, now: time.Now, live: newLivePools(t.reader, t.m.liveReads, t.log)}
	pools.nodeKick = nodes.kick
	return []reconciler{pools, nodes}
}

// Setup registers the AllotNode controller.
func (r *allotNodeReconciler) Setup(mgr ctrl.Manager) error {
	return controllerFor(mgr, "allot-allotnode", &allotv1.AllotNode{}, r.kick, r.workers, r.reconcile)
}

// Setup registers the IPPool controller.
func (r *ippoolReconciler) Setup(mgr ctrl.Manager) error {
	return controllerFor(mgr, "allot-ippool", &allotv1.IPPool{}, r.dirty, 2, r.reconcile)
}

// Rebuild reserves every block every AllotNode holds, read from the API server.
func (r *allotNodeReconciler) Rebuild(ctx context.Context) error {
	var list allotv1.AllotNodeList
	if err := r.reader.List(ctx, &list); err != nil {
		return fmt.Errorf("list AllotNodes: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b allotv1.AllotNode) int { return strings.Compare(a.Name, b.Name) })
	st := r.st
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range list.Items {
		n := &list.Items[i]
		h := &allotHold{uid: n.UID, generation: n.Generation, blocks: map[netip.Prefix]string{}}
		for b, pool := range allocatedBlocks(n) {
			if err := st.set.Reserve(b); err != nil {
				// Two nodes claim overlapping blocks (written by hand, or by an older
				// version): keep the first, the node's reconcile reports the conflict.
				r.log.Warn("rebuild: conflicting block", "allotNode", n.Name, "block", b, "err", err)
				continue
			}
			h.blocks[b] = pool
		}
		st.allot[n.Name] = h
	}
	return nil
}

// allocatedBlocks parses spec.ipam.pools.allocated; unparsable entries (the CRD refuses them)
// are skipped.
func allocatedBlocks(n *allotv1.AllotNode) map[netip.Prefix]string {
	out := map[netip.Prefix]string{}
	for _, a := range n.Spec.IPAM.Pools.Allocated {
		for _, s := range a.CIDRs {
			if p, err := parsePrefix(s); err == nil {
				out[p] = a.Pool
			}
		}
	}
	return out
}

// allotNodeReconciler is the AllotNode reconciler: it syncs the leader's view of one node
// with its object (blocks the agent released are freed), hands out blocks until every
// request is covered (fenced: the Lease renewed recently), and writes the node's status.
// The state changes happen under st.mu (plan); what to report is decided by pure functions
// (unmetChanges, nodeStatus, allocationNote).
type allotNodeReconciler struct {
	client    client.Client
	reader    client.Reader // the API server itself (Rebuild, blocks in doubt)
	live      *livePools    // requested pools the cache lacks, read from the API server
	st        *state
	m         *metrics
	log       *slog.Logger
	event     eventFunc
	fence     func(context.Context) error
	poolDirty *dirtySet // pools whose status to recompute
	kick      *dirtySet // AllotNodes to re-queue (this controller's source)
	workers   int
	ready     func(context.Context) error
	// statusDelay is StatusDelay: a status with only good news waits (statusWait).
	statusDelay time.Duration
	now         func() time.Time
	// lastSpecWrite is when a spec write last succeeded (UnixNano): statusWait waits while
	// nodes are still getting blocks.
	lastSpecWrite atomic.Int64
}

// nodePlan is one reconcile's outcome under st.mu.
type nodePlan struct {
	h                  *allotHold
	added              map[netip.Prefix]string // blocks handed out now, to write
	retry              map[netip.Prefix]string // of added: blocks in doubt written again
	released           []netip.Prefix
	conflicts          []string
	dirty              map[string]bool // pools whose status changed
	oldUnmet, newUnmet map[string]unmetReason
}

func (r *allotNodeReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.ready(ctx); err != nil {
		return reconcile.Result{}, err
	}
	var obj allotv1.AllotNode
	if err := r.client.Get(ctx, req.NamespacedName, &obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if r.inDoubt(obj.Name) {
		// Blocks of an earlier write are in doubt: settle them against the object itself,
		// not the cache (which may lag the write, or the write may still land).
		if err := r.reader.Get(ctx, req.NamespacedName, &obj); err != nil {
			if apierrors.IsNotFound(err) {
				r.forget(req.Name)
				return reconcile.Result{}, nil
			}
			return reconcile.Result{}, fmt.Errorf("read AllotNode %s with blocks in doubt: %w", req.Name, err)
		}
	}
	table, err := r.poolTable(ctx, &obj)
	if err != nil {
		return reconcile.Result{}, err
	}
	p, ok := r.plan(&obj, table)
	if !ok {
		// The cache has not caught up with our own last write; its update event follows.
		return reconcile.Result{}, nil
	}
	r.report(&obj, p)
	cur, res, err := r.write(ctx, &obj, p)
	if cur == nil {
		return res, err
	}
	if d := r.statusWait(cur, p); d > 0 {
		return reconcile.Result{RequeueAfter: d}, nil
	}
	return r.writeStatus(ctx, cur, p)
}

// poolTable reads the IPPools for obj's requests: the cache's, and those it requests that the
// cache lacks as the API server has them (livePools: a pool created a moment before is not
// reported missing while the informer catches up).
func (r *allotNodeReconciler) poolTable(ctx context.Context, obj *allotv1.AllotNode) (map[string]*poolEntry, error) {
	var pools allotv1.IPPoolList
	if err := r.client.List(ctx, &pools); err != nil {
		return nil, err
	}
	cached := make(map[string]bool, len(pools.Items))
	for i := range pools.Items {
		cached[pools.Items[i].Name] = true
	}
	for _, name := range missingPools(obj.Spec.IPAM.Pools.Requested, cached) {
		if p := r.live.get(ctx, name); p != nil {
			r.log.Debug("IPPool read from the API server before the operator's watch delivered it", "pool", name, "allotNode", obj.Name)
			pools.Items = append(pools.Items, *p)
		}
	}
	return buildPoolTable(pools.Items), nil
}

// statusWait is how long the node's status write still waits (<= 0: write it now).
//
// The status after blocks were handed out, when it says only that every request is covered
// (the condition was not False and stays True), waits as a pool's counters do (counterDelay:
// StatusDelay, once more per nodesPerDelay AllotNodes), and once more if other nodes' blocks
// were still being written when it came due. It tells the agent nothing (the agent reads its
// blocks from the spec), and each write costs what a spec write costs: with the client's rate
// shared, writing it at once halved how fast nodes booting together get their blocks
// (test/scale: 100 nodes/s at 200 requests/s). A status with bad news (a pool exhausted or
// missing, conflicting blocks), or one that clears it, is written at once.
func (r *allotNodeReconciler) statusWait(cur *allotv1.AllotNode, p nodePlan) time.Duration {
	prev := meta.FindStatusCondition(cur.Status.Conditions, allotv1.ConditionPoolsFulfilled)
	good := len(p.newUnmet) == 0 && len(p.conflicts) == 0 && (prev == nil || prev.Status == metav1.ConditionTrue)
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	now, h := r.now(), p.h
	wait := r.statusDelay * time.Duration(1+len(r.st.allot)/nodesPerDelay)
	switch {
	case !good:
		h.statusDue, h.statusExtended = time.Time{}, false
		return 0
	case len(p.added) > 0 && h.statusDue.IsZero():
		h.statusDue, h.statusExtended = now.Add(wait), false
	case h.statusDue.IsZero():
		return 0
	}
	if d := h.statusDue.Sub(now); d > 0 {
		return d
	}
	if !h.statusExtended && now.Sub(time.Unix(0, r.lastSpecWrite.Load())) < r.statusDelay {
		h.statusDue, h.statusExtended = now.Add(wait), true
		return wait
	}
	h.statusDue, h.statusExtended = time.Time{}, false
	return 0
}

// plan syncs the node's hold with obj and fulfils its requests, under st.mu. ok is false
// when obj is older than what this replica last wrote.
func (r *allotNodeReconciler) plan(obj *allotv1.AllotNode, table map[string]*poolEntry) (nodePlan, bool) {
	st, name := r.st, obj.Name
	st.mu.Lock()
	defer st.mu.Unlock()
	h := st.allot[name]
	if h != nil && h.uid != obj.UID {
		// Deleted and recreated under the same name: the old object's blocks are free.
		r.releaseAllLocked(name, h)
		h = nil
	}
	if h != nil && obj.Generation < h.generation {
		return nodePlan{}, false
	}
	if h == nil {
		h = &allotHold{uid: obj.UID, blocks: map[netip.Prefix]string{}}
		st.allot[name] = h
	}
	p := nodePlan{h: h, dirty: map[string]bool{}, added: map[netip.Prefix]string{}}
	if h.doubt != nil {
		// obj is the live object (reconcile read it): blocks it does not list that the write
		// in doubt may still add are written again (plan's write), the others settle in sync.
		o := resolveDoubt(h.doubt, obj.ResourceVersion, allocatedBlocks(obj))
		for _, pool := range o.confirmed { // counted here, as the failed write did not
			r.m.allocated.WithLabelValues(kindPool, pool).Inc()
		}
		p.retry = o.retry
		maps.Copy(p.added, p.retry)
		h.doubt = nil
	}
	r.syncLocked(obj, &p)
	h.generation = obj.Generation

	p.oldUnmet = st.unmetOf(name)
	st.clearUnmet(name)
	requests := slices.Clone(obj.Spec.IPAM.Pools.Requested)
	slices.SortFunc(requests, func(a, b allotv1.PoolRequest) int { return strings.Compare(a.Pool, b.Pool) })
	for _, req := range requests {
		if msg, exhausted := r.fulfilLocked(name, h, req, table[req.Pool], p.added); msg != "" {
			st.setUnmet(req.Pool, name, unmetReason{exhausted: exhausted, message: msg})
		}
	}
	p.newUnmet = st.unmetOf(name)
	return p, true
}

// syncLocked makes the hold what obj lists: blocks it no longer lists are released, blocks it
// lists that the state lacks are reserved (or reported as conflicts with other nodes).
func (r *allotNodeReconciler) syncLocked(obj *allotv1.AllotNode, p *nodePlan) {
	st, h := r.st, p.h
	observed := allocatedBlocks(obj)
	for b, pool := range h.blocks {
		if _, retry := p.retry[b]; retry {
			continue
		}
		if q, ok := observed[b]; !ok || q != pool {
			st.set.Release(b)
			delete(h.blocks, b)
			p.released = append(p.released, b)
			p.dirty[pool] = true
			r.m.released.WithLabelValues(kindPool, pool).Inc()
		}
	}
	for _, b := range sortedKeys(observed) {
		pool := observed[b]
		if _, ok := h.blocks[b]; ok {
			continue
		}
		if err := st.set.Reserve(b); err != nil {
			p.conflicts = append(p.conflicts, fmt.Sprintf("%s (pool %q): %v", b, pool, err))
			continue
		}
		h.blocks[b] = pool
		p.dirty[pool] = true
	}
}

// report counts and records what changed: requests newly unmet (exhaustion), conflicts,
// releases; pools whose unmet requests changed get their status recomputed.
func (r *allotNodeReconciler) report(obj *allotv1.AllotNode, p nodePlan) {
	changed, cleared := unmetChanges(p.oldUnmet, p.newUnmet)
	for _, pool := range changed {
		p.dirty[pool] = true
		if u := p.newUnmet[pool]; u.exhausted {
			r.m.exhausted.WithLabelValues(kindPool, pool).Inc()
			r.event(obj, corev1.EventTypeWarning, allotv1.ReasonPoolExhausted, "Allocate", "%s", u.message)
		}
	}
	for _, pool := range cleared {
		p.dirty[pool] = true
	}
	if len(p.conflicts) > 0 {
		r.m.refusals.WithLabelValues(refusalConflict).Add(float64(len(p.conflicts)))
		r.event(obj, corev1.EventTypeWarning, allotv1.ReasonConflictingAllocation, "Allocate",
			"blocks overlap blocks of other nodes and are not counted: %s", strings.Join(p.conflicts, "; "))
	}
	if len(p.released) > 0 {
		r.log.Debug("blocks released", "allotNode", obj.Name, "blocks", p.released)
	}
}

// unmetChanges are the pools whose unmet reason is new or changed, and those no longer
// unmet. Pure.
func unmetChanges(old, cur map[string]unmetReason) (changed, cleared []string) {
	for _, pool := range keys(cur) {
		if o, ok := old[pool]; !ok || o != cur[pool] {
			changed = append(changed, pool)
		}
	}
	for _, pool := range keys(old) {
		if _, ok := cur[pool]; !ok {
			cleared = append(cleared, pool)
		}
	}
	return changed, cleared
}

// write adds the blocks handed out to spec.ipam.pools.allocated, fenced, with the
// resourceVersion read. When it fails, blocks the API server certainly did not store go
// back to the set; after an ambiguous error (writeFailed) they stay held, in doubt. cur is
// the object written (or obj when nothing was added); nil means return res, err.
func (r *allotNodeReconciler) write(ctx context.Context, obj *allotv1.AllotNode, p nodePlan) (cur *allotv1.AllotNode, res reconcile.Result, err error) {
	if len(p.added) == 0 {
		r.poolDirty.add(keys(p.dirty)...)
		return obj, reconcile.Result{}, nil
	}
	upd := obj.DeepCopy()
	addAllocations(upd, p.added)
	err = r.fence(ctx)
	if err == nil {
		err = ctx.Err() // ended before sending: certainly not written
	}
	sent := err == nil
	if sent {
		err = r.client.Update(ctx, upd)
	}
	if err != nil {
		res, err = r.writeFailed(obj, p, err, !sent || allotk8s.WriteRefused(err))
		return nil, res, err
	}
	r.st.mu.Lock()
	p.h.generation = upd.Generation
	r.st.mu.Unlock()
	r.lastSpecWrite.Store(r.now().UnixNano())
	for _, pool := range p.added {
		r.m.allocated.WithLabelValues(kindPool, pool).Inc()
		p.dirty[pool] = true
	}
	// No Event for a block handed out, as Kubernetes' node IPAM records none for a pod CIDR
	// it assigns (only its failures, CIDRNotAvailable): a cluster of thousands of nodes
	// booting would write thousands, one API write per node for what spec.ipam.pools
	// and the PoolsFulfilled condition already say. Failures still get their Events.
	r.log.Debug("blocks allocated", "allotNode", upd.Name, "blocks", allocationNote(p.added))
	r.poolDirty.add(keys(p.dirty)...)
	return upd, reconcile.Result{}, nil
}

// writeFailed settles the blocks of a failed spec write. refused (the write was never sent,
// or the API server answered before storing it: core/k8s.WriteRefused): the new blocks go
// back to the set, blocks already in doubt stay so (the earlier write may still have
// landed). Otherwise the API server may have stored the write (a 504 is sent when the
// handler's deadline passes, while the storage write may still complete; a broken
// connection says nothing either): handing its blocks to another node could give one block
// to two nodes, so they all stay held, in doubt, until a live read settles them.
func (r *allotNodeReconciler) writeFailed(obj *allotv1.AllotNode, p nodePlan, err error, refused bool) (reconcile.Result, error) {
	r.st.mu.Lock()
	if refused {
		for b := range p.added {
			if _, retry := p.retry[b]; !retry {
				r.st.set.Release(b)
				delete(p.h.blocks, b)
			}
		}
		if len(p.retry) > 0 {
			p.h.doubt = &doubtWrite{rv: obj.ResourceVersion, blocks: p.retry}
		}
	} else {
		p.h.doubt = &doubtWrite{rv: obj.ResourceVersion, blocks: maps.Clone(p.added)}
	}
	r.st.mu.Unlock()
	r.poolDirty.add(keys(p.dirty)...)
	switch {
	case apierrors.IsConflict(err):
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	case apierrors.IsNotFound(err):
		r.forget(obj.Name)
		return reconcile.Result{}, nil
	case !refused:
		r.log.Warn("spec write failed, it may have landed: its blocks stay reserved until a read shows",
			"allotNode", obj.Name, "blocks", allocationNote(p.added), "err", err)
	}
	return reconcile.Result{}, fmt.Errorf("update AllotNode %s: %w", obj.Name, err)
}

// inDoubt says whether the node holds blocks of a write in doubt.
func (r *allotNodeReconciler) inDoubt(name string) bool {
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	h := r.st.allot[name]
	return h != nil && h.doubt != nil
}

// doubtOutcome is how a live read settles a write in doubt (block -> pool in each).
type doubtOutcome struct {
	confirmed map[netip.Prefix]string // the object lists them: the write landed
	released  map[netip.Prefix]string // it does not, and it changed since: the write can no longer land
	retry     map[netip.Prefix]string // it does not, and it is unchanged: the write may still land
}

// resolveDoubt settles the blocks of write d against the live object (its resourceVersion
// liveRV, the blocks it lists). A write carries the resourceVersion it was sent against as a
// precondition, so once the object has another, a write not in it never lands. With the
// same, the write may still be in flight (or was lost): writing the same blocks again
// against that resourceVersion settles it, as whichever of the two lands first makes the
// other fail with a Conflict. Pure.
func resolveDoubt(d *doubtWrite, liveRV string, listed map[netip.Prefix]string) doubtOutcome {
	o := doubtOutcome{confirmed: map[netip.Prefix]string{}, released: map[netip.Prefix]string{}, retry: map[netip.Prefix]string{}}
	for b, pool := range d.blocks {
		switch q, ok := listed[b]; {
		case ok && q == pool:
			o.confirmed[b] = pool
		case liveRV != d.rv:
			o.released[b] = pool
		default:
			o.retry[b] = pool
		}
	}
	return o
}

// allocationNote says which blocks of which pools were handed out. Pure.
func allocationNote(added map[netip.Prefix]string) string {
	byPool := map[string][]string{}
	for _, b := range sortedKeys(added) {
		byPool[added[b]] = append(byPool[added[b]], b.String())
	}
	var notes []string
	for _, pool := range keys(byPool) {
		notes = append(notes, fmt.Sprintf("%s from pool %q", strings.Join(byPool[pool], ", "), pool))
	}
	return strings.Join(notes, "; ")
}

// writeStatus writes the operator's summary and the PoolsFulfilled condition, unless this
// replica already wrote the same (the cache lags).
func (r *allotNodeReconciler) writeStatus(ctx context.Context, cur *allotv1.AllotNode, p nodePlan) (reconcile.Result, error) {
	want := cur.Status.DeepCopy()
	nodeStatus(want, cur, p.newUnmet, p.conflicts)
	fp := statusFingerprint(want)
	r.st.mu.Lock()
	written := p.h.lastStatus == fp
	r.st.mu.Unlock()
	if equality.Semantic.DeepEqual(want, &cur.Status) || written {
		return reconcile.Result{}, nil
	}
	upd := cur.DeepCopy()
	upd.Status = *want
	if err := r.client.Status().Update(ctx, upd); err != nil {
		switch {
		case apierrors.IsConflict(err):
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		case apierrors.IsNotFound(err):
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("update AllotNode %s status: %w", cur.Name, err)
	}
	r.st.mu.Lock()
	p.h.lastStatus = fp
	r.st.mu.Unlock()
	return reconcile.Result{}, nil
}

// fulfilLocked hands out blocks of pool e to node h until request r is covered, adding them to
// added (and reserving them, and recording them in h so a concurrent pool reconcile counts
// them). It returns why the request is not met, or "".
func (rc *allotNodeReconciler) fulfilLocked(node string, h *allotHold, r allotv1.PoolRequest, e *poolEntry, added map[netip.Prefix]string) (msg string, exhausted bool) {
	needs := [2]int64{r.Needed.IPv4, r.Needed.IPv6}
	if needs[0] <= 0 && needs[1] <= 0 {
		return "", false
	}
	switch {
	case e == nil:
		return fmt.Sprintf("pool %q: no such IPPool", r.Pool), false
	case e.terminating || rc.st.terminating[r.Pool]:
		return fmt.Sprintf("pool %q is being deleted; it hands out no new blocks", r.Pool), false
	case e.disabled:
		return fmt.Sprintf("pool %q is disabled (spec.disable)", r.Pool), false
	}
	var msgs []string
	for fi, need := range needs {
		if need <= 0 {
			continue
		}
		fname := [2]string{"ipv4", "ipv6"}[fi]
		fe := e.fam[fi]
		if fe == nil {
			msgs = append(msgs, fmt.Sprintf("pool %q has no %s (spec.%s)", r.Pool, fname, fname))
			continue
		}
		if len(fe.usable) == 0 {
			msgs = append(msgs, fmt.Sprintf("pool %q has no usable %s CIDR: %s", r.Pool, fname,
				strings.Join(append(slices.Clone(fe.invalid), fe.overlaps...), "; ")))
			continue
		}
		var have int64
		count := 0
		for b, p := range h.blocks {
			if p == r.Pool && famIndex(b) == fi {
				have = satAdd(have, addrs(b))
				count++
			}
		}
		for have < need {
			if count >= maxBlocksPerPool {
				msgs = append(msgs, fmt.Sprintf("pool %q: %s request of %d addresses needs more than %d blocks", r.Pool, fname, need, maxBlocksPerPool))
				break
			}
			b, ok := rc.allocateFromLocked(fe)
			if !ok {
				exhausted = true
				msgs = append(msgs, fmt.Sprintf("pool %q is exhausted: no free /%d %s block for node %q (needs %d addresses, has %d); add CIDRs to spec.%s.cidrs",
					r.Pool, fe.mask, fname, node, need, have, fname))
				break
			}
			added[b] = r.Pool
			h.blocks[b] = r.Pool
			have = satAdd(have, addrs(b))
			count++
		}
	}
	return strings.Join(msgs, "; "), exhausted
}

func (r *allotNodeReconciler) allocateFromLocked(fe *famEntry) (netip.Prefix, bool) {
	for _, c := range fe.usable {
		b, err := r.st.set.Allocate(c, fe.mask)
		if err == nil {
			return b, true
		}
	}
	return netip.Prefix{}, false
}

// addAllocations merges blocks into spec.ipam.pools.allocated (entries sorted by pool, CIDRs
// by address).
func addAllocations(n *allotv1.AllotNode, added map[netip.Prefix]string) {
	allocs := n.Spec.IPAM.Pools.Allocated
	for _, b := range sortedKeys(added) {
		pool := added[b]
		i := slices.IndexFunc(allocs, func(a allotv1.PoolAllocation) bool { return a.Pool == pool })
		if i < 0 {
			allocs = append(allocs, allotv1.PoolAllocation{Pool: pool})
			i = len(allocs) - 1
		}
		allocs[i].CIDRs = append(allocs[i].CIDRs, b.String())
	}
	slices.SortFunc(allocs, func(a, b allotv1.PoolAllocation) int { return strings.Compare(a.Pool, b.Pool) })
	n.Spec.IPAM.Pools.Allocated = allocs
}

// nodeStatus sets the operator-owned status fields: the pools the node holds blocks of, their
// count and PoolsFulfilled. Pure.
func nodeStatus(s *allotv1.AllotNodeStatus, n *allotv1.AllotNode, unmet map[string]unmetReason, conflicts []string) {
	var names []string
	blocks := 0
	for _, a := range n.Spec.IPAM.Pools.Allocated {
		if len(a.CIDRs) > 0 {
			names = append(names, a.Pool)
			blocks += len(a.CIDRs)
		}
	}
	slices.Sort(names)
	s.PoolNames = strings.Join(names, ",")
	s.AllocatedBlocks = int32(blocks)
	c := metav1.Condition{Type: allotv1.ConditionPoolsFulfilled, ObservedGeneration: n.Generation}
	var msgs []string
	reason := allotv1.ReasonAllocated
	for _, pool := range keys(unmet) {
		msgs = append(msgs, unmet[pool].message)
		if unmet[pool].exhausted {
			reason = allotv1.ReasonPoolExhausted
		} else if reason == allotv1.ReasonAllocated {
			reason = allotv1.ReasonPoolNotFound
			if strings.Contains(unmet[pool].message, "being deleted") {
				reason = allotv1.ReasonPoolTerminating
			}
		}
	}
	if len(conflicts) > 0 {
		msgs = append(msgs, "blocks overlapping other nodes' blocks are not counted: "+strings.Join(conflicts, "; "))
		if reason == allotv1.ReasonAllocated {
			reason = allotv1.ReasonConflictingAllocation
		}
	}
	if len(msgs) == 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, allotv1.ReasonAllocated, "every request is covered by allocated blocks"
	} else {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, reason, strings.Join(msgs, "; ")
	}
	meta.SetStatusCondition(&s.Conditions, c)
}

// forget frees every block of a deleted AllotNode.
func (r *allotNodeReconciler) forget(name string) {
	st := r.st
	st.mu.Lock()
	var pools []string
	if h := st.allot[name]; h != nil {
		for _, p := range h.blocks {
			pools = append(pools, p)
		}
		r.releaseAllLocked(name, h)
	}
	for pool, m := range st.unmet {
		if _, ok := m[name]; ok {
			pools = append(pools, pool)
		}
	}
	st.clearUnmet(name)
	st.mu.Unlock()
	r.poolDirty.add(pools...)
}

func (r *allotNodeReconciler) releaseAllLocked(name string, h *allotHold) {
	for b, pool := range h.blocks {
		r.st.set.Release(b)
		r.m.released.WithLabelValues(kindPool, pool).Inc()
	}
	delete(r.st.allot, name)
}

// ippoolReconciler is the IPPool reconciler: it keeps one pool's finalizer, status (block
// counts, in-use CIDRs) and conditions, refuses deleting it while nodes hold blocks of it,
// and re-queues nodes waiting on it. decidePool computes the status from a snapshot of the
// blocks held (pure); reconcile reads, snapshots and applies.
type ippoolReconciler struct {
	client   client.Client
	st       *state
	m        *metrics
	log      *slog.Logger
	status   *statusBatch
	event    eventFunc
	nodeKick *dirtySet // AllotNodes to re-queue
	dirty    *dirtySet // pools to re-queue (this controller's source)
	ready    func(context.Context) error
}

// poolSnapshot is what the leader's state says of one pool: the blocks nodes hold of it,
// the nodes it left exhausted, and every node whose request for it is unmet.
type poolSnapshot struct {
	blocks    []heldBlock // sorted by block, then node
	exhausted []string    // sorted
	unmet     []string    // sorted
}

type heldBlock struct {
	node  string
	block netip.Prefix
}

// poolDecision is what a pool's status should be.
type poolDecision struct {
	status  *allotv1.IPPoolStatus
	events  []pendingEvent // for conditions that just turned on or changed
	release bool           // terminating and no node holds a block: remove the finalizer
}

func (r *ippoolReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.ready(ctx); err != nil {
		return reconcile.Result{}, err
	}
	var pool allotv1.IPPool
	if err := r.client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if res, done, err := ensureFinalizer(ctx, r.client, &pool, allotv1.FinalizerPoolInUse, "IPPool"); done {
		return res, err
	}
	var pools allotv1.IPPoolList
	if err := r.client.List(ctx, &pools); err != nil {
		return reconcile.Result{}, err
	}
	e := buildPoolTable(pools.Items)[pool.Name]
	if e == nil { // the cache list lags the get; try again shortly
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	snap := r.snapshot(pool.Name, pool.DeletionTimestamp != nil)
	// The cache's own objects, not copies: decidePool only reads them, and a pool's
	// reconcile (about once per StatusDelay while nodes take blocks) copied every AllotNode
	// of the cluster each time.
	var nodes allotv1.AllotNodeList
	if err := r.client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, err
	}
	d := decidePool(&pool, e, snap, nodes.Items)
	r.observe(pool.Name, d.status)
	if d.release {
		return r.release(ctx, &pool)
	}
	return r.apply(ctx, &pool, d, snap.unmet)
}

// forget: a deleted pool's CIDRs may now serve other pools, so every waiting node is
// re-queued.
func (r *ippoolReconciler) forget(name string) {
	r.st.mu.Lock()
	delete(r.st.terminating, name)
	var unmet []string
	for pool := range r.st.unmet {
		unmet = append(unmet, r.st.unmetNodes(pool)...)
	}
	r.st.mu.Unlock()
	r.nodeKick.add(unmet...)
}

// snapshot reads the pool's blocks and waiting nodes from the state (marking a terminating
// pool there first, so no node reconcile hands out of it from now on).
func (r *ippoolReconciler) snapshot(name string, terminating bool) poolSnapshot {
	var snap poolSnapshot
	st := r.st
	st.mu.Lock()
	if terminating {
		st.terminating[name] = true
	}
	for node, h := range st.allot {
		for b, p := range h.blocks {
			if p == name {
				snap.blocks = append(snap.blocks, heldBlock{node, b})
			}
		}
	}
	for n, u := range st.unmet[name] {
		if u.exhausted {
			snap.exhausted = append(snap.exhausted, n)
		}
	}
	snap.unmet = st.unmetNodes(name)
	st.mu.Unlock()
	slices.Sort(snap.exhausted)
	slices.SortFunc(snap.blocks, func(a, b heldBlock) int {
		if c := a.block.Addr().Compare(b.block.Addr()); c != 0 {
			return c
		}
		return strings.Compare(a.node, b.node)
	})
	return snap
}

// observe sets the pool's block series from its decided status.
func (r *ippoolReconciler) observe(name string, want *allotv1.IPPoolStatus) {
	for fi, fs := range []*allotv1.PoolFamilyStatus{want.IPv4, want.IPv6} {
		if fs != nil {
			r.m.blocks.WithLabelValues(kindPool, name, [2]string{"ipv4", "ipv6"}[fi]).Set(float64(fs.AllocatedBlocks))
			r.m.capacity.WithLabelValues(kindPool, name, [2]string{"ipv4", "ipv6"}[fi]).Set(float64(fs.TotalBlocks))
		}
	}
}

// release removes the finalizer of a pool being deleted that no node holds a block of.
func (r *ippoolReconciler) release(ctx context.Context, pool *allotv1.IPPool) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(pool, allotv1.FinalizerPoolInUse) {
		return reconcile.Result{}, nil
	}
	controllerutil.RemoveFinalizer(pool, allotv1.FinalizerPoolInUse)
	if err := r.client.Update(ctx, pool); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("remove finalizer of IPPool %s: %w", pool.Name, err)
	}
	r.log.Info("IPPool deleted: no node holds a block of it", "pool", pool.Name)
	return reconcile.Result{}, nil
}

// apply writes the decided status (counters batched by StatusDelay; in-use CIDRs, read by
// the admission policy, and conditions at once), its Events and refusals, and re-queues the
// nodes waiting on the pool.
func (r *ippoolReconciler) apply(ctx context.Context, pool *allotv1.IPPool, d poolDecision, unmet []string) (reconcile.Result, error) {
	want := d.status
	if !equality.Semantic.DeepEqual(want, &pool.Status) {
		urgent := !slices.Equal(want.InUseCIDRs, pool.Status.InUseCIDRs) || !sameConditions(want.Conditions, pool.Status.Conditions)
		if wait := r.status.waitAtLeast("ippool/"+pool.Name, r.counterDelay()); !urgent && wait > 0 {
			r.nodeKick.add(unmet...)
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		upd := pool.DeepCopy()
		upd.Status = *want
		if retry, err := writeStatus(ctx, r.client, upd, "IPPool "+pool.Name); retry || err != nil {
			return reconcile.Result{RequeueAfter: retryAfter(retry)}, err
		}
		r.status.written("ippool/" + pool.Name)
		emitEvents(r.m, r.event, upd, d.events)
	}
	r.nodeKick.add(unmet...)
	return reconcile.Result{}, nil
}

// nodesPerDelay is how many AllotNodes one StatusDelay of a pool's counters covers
// (counterDelay).
const nodesPerDelay = 100

// counterDelay is the least time between two counters-only status writes of a pool:
// StatusDelay, once more per nodesPerDelay AllotNodes, so that the agents receive at most
// about nodesPerDelay such events per StatusDelay. Every node's agent watches the IPPools (for
// their specs) and so receives each write: in a cluster of 5,000 nodes taking their first
// blocks, a write per second was 5,000 watch events a second that tell the nodes nothing
// (at one write per 6 s, decoding watch events, most of them these, was a third of the CPU
// of test/scale's 5,000 agents). Stretched, the counters lag by up to StatusDelay per 100
// nodes (51 s at 5,000); conditions and in-use CIDRs are still written at once.
func (r *ippoolReconciler) counterDelay() time.Duration {
	r.st.mu.Lock()
	n := len(r.st.allot)
	r.st.mu.Unlock()
	return r.status.delay * time.Duration(1+n/nodesPerDelay)
}

// decidePool computes pool's status from its table entry e, the blocks nodes hold of it and
// the AllotNodes' usage. Pure.
func decidePool(pool *allotv1.IPPool, e *poolEntry, snap poolSnapshot, nodes []allotv1.AllotNode) poolDecision {
	terminating := pool.DeletionTimestamp != nil
	use := poolCIDRUse(pool, snap.blocks)
	want := pool.Status.DeepCopy()
	want.ObservedGeneration = pool.Generation
	want.InUseCIDRs = nil
	for _, c := range sortedKeys(use.inUse) {
		want.InUseCIDRs = append(want.InUseCIDRs, c.String())
	}
	want.IPv4, want.IPv6 = nil, nil
	for fi, f := range []*allotv1.PoolFamily{pool.Spec.IPv4, pool.Spec.IPv6} {
		if f == nil && use.counts[fi] == 0 {
			continue
		}
		fs := &allotv1.PoolFamilyStatus{AllocatedBlocks: use.counts[fi]}
		if fe := e.fam[fi]; fe != nil {
			for _, c := range fe.usable {
				fs.TotalBlocks = satAdd(fs.TotalBlocks, int64(min(blockalloc.TotalBlocks(c, fe.mask), 1<<62)))
			}
		}
		if fi == 0 {
			want.IPv4 = fs
		} else {
			want.IPv6 = fs
		}
	}
	want.UsedAddresses = usedAddresses(pool.Name, nodes)
	ready, overlaps := poolReadyCondition(pool, e)
	meta.SetStatusCondition(&want.Conditions, ready)
	events := setPoolConditions(want, pool.Generation, overlaps, use.refused, snap.exhausted, terminating, use.holders, len(snap.blocks))
	return poolDecision{status: want, events: events, release: terminating && len(snap.blocks) == 0}
}

// cidrUse is where a pool's held blocks lie.
type cidrUse struct {
	inUse   map[netip.Prefix]bool
	refused map[netip.Prefix]map[string]bool // CIDR removed while in use -> nodes
	counts  [2]int64                         // blocks per family
	holders map[string]bool
}

// poolCIDRUse finds which CIDRs hold the blocks; blocks outside the spec are in CIDRs removed
// while in use (the last status' in-use CIDR that holds them, else the block itself).
func poolCIDRUse(pool *allotv1.IPPool, blocks []heldBlock) cidrUse {
	var spec []netip.Prefix
	for _, f := range []*allotv1.PoolFamily{pool.Spec.IPv4, pool.Spec.IPv6} {
		if f != nil {
			for _, s := range f.CIDRs {
				if p, err := parsePrefix(s); err == nil {
					spec = append(spec, p)
				}
			}
		}
	}
	var old []netip.Prefix
	for _, s := range pool.Status.InUseCIDRs {
		if p, err := parsePrefix(s); err == nil {
			old = append(old, p)
		}
	}
	u := cidrUse{inUse: map[netip.Prefix]bool{}, refused: map[netip.Prefix]map[string]bool{}, holders: map[string]bool{}}
	for _, hb := range blocks {
		u.counts[famIndex(hb.block)]++
		u.holders[hb.node] = true
		if c, ok := containing(spec, hb.block); ok {
			u.inUse[c] = true
			continue
		}
		c, ok := containing(old, hb.block)
		if !ok {
			c = hb.block
		}
		u.inUse[c] = true
		if u.refused[c] == nil {
			u.refused[c] = map[string]bool{}
		}
		u.refused[c][hb.node] = true
	}
	return u
}

// usedAddresses sums the pool's addresses in use that the agents report.
func usedAddresses(pool string, nodes []allotv1.AllotNode) int64 {
	var n int64
	for i := range nodes {
		for _, u := range nodes[i].Status.IPAM.Pools {
			if u.Pool != pool {
				continue
			}
			for _, f := range []*allotv1.FamilyUsage{u.IPv4, u.IPv6} {
				if f != nil {
					n = satAdd(n, f.Used)
				}
			}
		}
	}
	return n
}

// poolReadyCondition says whether the pool hands blocks out, and why not; overlaps are its
// CIDRs left out because they overlap other pools.
func poolReadyCondition(pool *allotv1.IPPool, e *poolEntry) (metav1.Condition, []string) {
	ready := metav1.Condition{Type: allotv1.ConditionReady, Status: metav1.ConditionTrue, Reason: allotv1.ReasonValid,
		Message: "blocks are handed out of this pool", ObservedGeneration: pool.Generation}
	var invalid, overlaps []string
	usable := 0
	for _, fe := range e.fam {
		if fe != nil {
			invalid = append(invalid, fe.invalid...)
			overlaps = append(overlaps, fe.overlaps...)
			usable += len(fe.usable)
		}
	}
	switch {
	case pool.DeletionTimestamp != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, allotv1.ReasonPoolTerminating, "the pool is being deleted; it hands out no new blocks"
	case pool.Spec.Disable:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, allotv1.ReasonInvalid, "the pool is disabled (spec.disable)"
	case usable == 0:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, allotv1.ReasonInvalid, "no usable CIDR: "+strings.Join(append(invalid, overlaps...), "; ")
	default:
		// The agents parse gateway and routes the same way (agent.PoolRouting) and fall
		// back to the per-block default on an error: say so where the user looks.
		for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
			spec := pool.Spec.IPv4
			if fam == policy.IPv6 {
				spec = pool.Spec.IPv6
			}
			if _, err := agent.PoolRouting(fam, spec); err != nil {
				ready.Status, ready.Reason = metav1.ConditionFalse, allotv1.ReasonInvalid
				ready.Message = err.Error() + "; pods get their block's gateway and default route instead"
				break
			}
		}
	}
	return ready, overlaps
}

// pendingEvent is an Event a decision asks for; refusal, if set, is the refusals_total
// reason it counts as.
type pendingEvent struct{ reason, action, note, refusal string }

// setPoolConditions sets the problem conditions (present only while the problem lasts) and
// returns the Events for conditions that just turned on.
func setPoolConditions(s *allotv1.IPPoolStatus, gen int64, overlaps []string, refused map[netip.Prefix]map[string]bool,
	exhausted []string, terminating bool, holders map[string]bool, nblocks int) []pendingEvent {
	var evs []pendingEvent
	set := func(typ string, on bool, reason, msg, refusal string) {
		if !on {
			meta.RemoveStatusCondition(&s.Conditions, typ)
			return
		}
		prev := meta.FindStatusCondition(s.Conditions, typ)
		if prev == nil || prev.Message != msg {
			evs = append(evs, pendingEvent{reason: typ, action: "Validate", note: msg, refusal: refusal})
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	set(allotv1.ConditionCIDROverlap, len(overlaps) > 0, allotv1.ReasonOverlap,
		"CIDRs not used because they overlap other pools: "+strings.Join(overlaps, "; "), refusalOverlap)

	var parts []string
	for _, c := range sortedKeys(refused) {
		parts = append(parts, fmt.Sprintf("%s (held by %s)", c, strings.Join(keys(refused[c]), ", ")))
	}
	set(allotv1.ConditionCIDRRemovalRefused, len(refused) > 0, allotv1.ReasonInUse,
		"removing in-use CIDRs refused: "+strings.Join(parts, "; ")+
			"; they stay reserved for this pool (no new blocks are carved from them) until the nodes release their blocks",
		refusalCIDRRemoval)

	set(allotv1.ConditionExhausted, len(exhausted) > 0, allotv1.ReasonPoolExhausted,
		fmt.Sprintf("no free block for %d node(s): %s; add CIDRs to the pool", len(exhausted), strings.Join(firstN(exhausted, 10), ", ")), "")

	set(allotv1.ConditionDeletionRefused, terminating && nblocks > 0, allotv1.ReasonInUse,
		fmt.Sprintf("deletion refused: %d node(s) still hold %d block(s) of this pool: %s; the pool is deleted once they release them (finalizer %s)",
			len(holders), nblocks, strings.Join(firstN(keys(holders), 10), ", "), allotv1.FinalizerPoolInUse),
		refusalPoolDeletion)
	return evs
}

func containing(cs []netip.Prefix, b netip.Prefix) (netip.Prefix, bool) {
	for _, c := range cs {
		if c.Bits() <= b.Bits() && c.Contains(b.Addr()) {
			return c, true
		}
	}
	return netip.Prefix{}, false
}

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), fmt.Sprintf("and %d more", len(s)-n))
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedKeys[V any](m map[netip.Prefix]V) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sortPrefixes(out)
	return out
}

// sameConditions compares conditions by type, status, reason and message.
func sameConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range a {
		o := meta.FindStatusCondition(b, c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason || o.Message != c.Message {
			return false
		}
	}
	return true
}

// statusFingerprint covers the operator-owned fields of an AllotNode status.
func statusFingerprint(s *allotv1.AllotNodeStatus) string {
	fp := fmt.Sprintf("%s|%d", s.PoolNames, s.AllocatedBlocks)
	if c := meta.FindStatusCondition(s.Conditions, allotv1.ConditionPoolsFulfilled); c != nil {
		fp += fmt.Sprintf("|%s|%s|%s|%d", c.Status, c.Reason, c.Message, c.ObservedGeneration)
	}
	return fp
}
