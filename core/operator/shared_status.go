package operator

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"k8s.io/client-go/util/workqueue"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/sharedpool"
	"github.com/allot-ipam/allot/sdk/policy"
)

// indexClaimPool indexes cached AddressClaims by spec.pool (exact, unlike the label, which is
// hashed for long names).
const indexClaimPool = "spec.pool"

func newSharedPoolStatus(t *term, m *sharedMetrics) *sharedPoolStatus {
	return &sharedPoolStatus{client: t.client, reader: t.reader, log: t.log, m: m, status: t.status, event: t.event,
		delay: t.opts.StatusDelay, dirty: newDirtySet(t.opts.StatusDelay), lastFP: map[string]string{}}
}

// Setup registers the SharedIPPool controller: a pool's own events, and through its dirty
// set those of its claims, of the reservations and of every other pool.
func (r *sharedPoolStatus) Setup(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &allotv1.AddressClaim{}, indexClaimPool,
		func(o client.Object) []string { return []string{o.(*allotv1.AddressClaim).Spec.Pool} }); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(r.dirty.run)); err != nil {
		return err
	}
	// A claim changes one pool's counts: batched through the dirty set, so a burst of
	// allocations costs one status write per StatusDelay.
	claimEvents := handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.dirty.add(claimPool(e.Object))
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.dirty.add(claimPool(e.ObjectNew))
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.dirty.add(claimPool(e.Object))
		},
	}
	// Reservations change every pool's total; a pool created, changed or deleted may start or
	// end another pool's conflict.
	all := func(ctx context.Context) {
		var pools allotv1.SharedIPPoolList
		if err := r.client.List(ctx, &pools); err != nil {
			return
		}
		names := make([]string, 0, len(pools.Items))
		for i := range pools.Items {
			names = append(names, pools.Items[i].Name)
		}
		r.dirty.add(names...)
	}
	allEvents := handler.Funcs{
		CreateFunc: func(ctx context.Context, _ event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all(ctx)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
				all(ctx)
			}
		},
		DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all(ctx)
		},
	}
	return ctrl.NewControllerManagedBy(mgr).Named("allot-sharedippool").
		For(&allotv1.SharedIPPool{}).
		Watches(&allotv1.SharedIPPool{}, allEvents).
		Watches(&allotv1.ReservedIP{}, allEvents).
		Watches(&allotv1.AddressClaim{}, claimEvents).
		WatchesRawSource(r.dirty.source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(quiet(r.reconcile))
}

func claimPool(o client.Object) string {
	if c, ok := o.(*allotv1.AddressClaim); ok {
		return c.Spec.Pool
	}
	return ""
}

// heldClaim is one claim of a pool, parsed.
type heldClaim struct {
	addr netip.Addr
	who  string // namespace/pod (interface)
}

// sharedPoolStatus is the SharedIPPool reconciler: it keeps one pool's finalizer, status counts
// and conditions. The desired status is decided by decideSharedPool, a pure function of the
// pool, every pool (conflicts), the reservations and the pool's claims; reconcile reads those,
// and applies the decision (finalizer, status write, Events, series).
type sharedPoolStatus struct {
	client client.Client
	reader client.Reader
	log    *slog.Logger
	m      *sharedMetrics
	status *statusBatch
	event  eventFunc
	delay  time.Duration // StatusDelay: requeue while the cache lags a claim's deletion
	dirty  *dirtySet     // pools to re-queue (batched by StatusDelay)

	mu     sync.Mutex
	lastFP map[string]string // each pool's last written status, so a lagging cache does not write again
}

// sharedPoolDecision is what a pool's status should be.
type sharedPoolDecision struct {
	status  *allotv1.SharedIPPoolStatus
	events  []pendingEvent // for conditions that just turned on or changed
	release bool           // terminating and no claim left: remove the finalizer
}

func (r *sharedPoolStatus) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Name == "" {
		return reconcile.Result{}, nil
	}
	var pool allotv1.SharedIPPool
	if err := r.client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if res, done, err := ensureFinalizer(ctx, r.client, &pool, allotv1.FinalizerSharedPoolInUse, "SharedIPPool"); done {
		return res, err
	}
	var pools allotv1.SharedIPPoolList
	if err := r.client.List(ctx, &pools); err != nil {
		return reconcile.Result{}, err
	}
	var rips allotv1.ReservedIPList
	if err := r.client.List(ctx, &rips); err != nil {
		return reconcile.Result{}, err
	}
	var claims allotv1.AddressClaimList
	if err := r.client.List(ctx, &claims, client.MatchingFields{indexClaimPool: pool.Name}); err != nil {
		return reconcile.Result{}, err
	}
	d := decideSharedPool(&pool, pools.Items, rips.Items, claims.Items)
	r.observe(pool.Name, d.status)
	if d.release {
		return r.release(ctx, &pool)
	}
	return r.apply(ctx, &pool, d)
}

// forget drops a deleted pool's series and fingerprint.
func (r *sharedPoolStatus) forget(name string) {
	for _, f := range []string{"ipv4", "ipv6"} {
		r.m.allocated.DeleteLabelValues(name, f)
		r.m.total.DeleteLabelValues(name, f)
	}
	r.mu.Lock()
	delete(r.lastFP, name)
	r.mu.Unlock()
}

// observe sets the pool's series from its decided status.
func (r *sharedPoolStatus) observe(name string, want *allotv1.SharedIPPoolStatus) {
	for fam, fs := range map[string]*allotv1.SharedFamilyStatus{"ipv4": want.IPv4, "ipv6": want.IPv6} {
		if fs != nil {
			r.m.allocated.WithLabelValues(name, fam).Set(float64(fs.AllocatedIPs))
			r.m.total.WithLabelValues(name, fam).Set(float64(fs.TotalIPs))
		}
	}
}

// apply writes the decided status (counters batched by StatusDelay, conditions at once) and
// its Events.
func (r *sharedPoolStatus) apply(ctx context.Context, pool *allotv1.SharedIPPool, d sharedPoolDecision) (reconcile.Result, error) {
	name, want := pool.Name, d.status
	fp := sharedStatusFingerprint(want)
	r.mu.Lock()
	written := r.lastFP[name] == fp
	r.mu.Unlock()
	if equality.Semantic.DeepEqual(want, &pool.Status) || written {
		return reconcile.Result{}, nil
	}
	// Counters may wait (one write per StatusDelay while pods come and go); conditions may not.
	urgent := !sameConditions(want.Conditions, pool.Status.Conditions) || want.ObservedGeneration != pool.Status.ObservedGeneration
	if wait := r.status.wait("sharedippool/" + name); !urgent && wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	upd := pool.DeepCopy()
	upd.Status = *want
	if retry, err := writeStatus(ctx, r.client, upd, "SharedIPPool "+name); retry || err != nil {
		return reconcile.Result{RequeueAfter: retryAfter(retry)}, err
	}
	r.status.written("sharedippool/" + name)
	r.mu.Lock()
	r.lastFP[name] = fp
	r.mu.Unlock()
	for _, ev := range d.events {
		r.event(upd, corev1.EventTypeWarning, ev.reason, ev.action, "%s", ev.note)
	}
	return reconcile.Result{}, nil
}

// decideSharedPool computes pool's status from the cluster's pools (conflicts), the
// ReservedIPs and the pool's claims. Pure: no client, no clock.
func decideSharedPool(pool *allotv1.SharedIPPool, pools []allotv1.SharedIPPool, rips []allotv1.ReservedIP,
	claims []allotv1.AddressClaim) sharedPoolDecision {
	held := heldClaims(claims)
	reserved, _ := sharedpool.ReservedFrom(rips) // bad ReservedIPs: refused by the webhook, reported by the agents
	conflict := sharedpool.Conflicts(pools)[pool.Name]
	res, rerr := sharedpool.Resolve(pool, reserved)
	terminating := pool.DeletionTimestamp != nil

	want := pool.Status.DeepCopy()
	want.ObservedGeneration = pool.Generation
	want.IPv4, want.IPv6 = nil, nil
	var exhausted, removed []string
	for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
		var f *sharedpool.ResolvedFamily
		if res != nil {
			f = res.Get(fam)
		}
		fs, full, gone := sharedFamilyStatus(fam, poolFamily(pool, fam) != nil, f, held)
		if full != "" {
			exhausted = append(exhausted, full)
		}
		removed = append(removed, gone...)
		if fam == policy.IPv4 {
			want.IPv4 = fs
		} else {
			want.IPv6 = fs
		}
	}
	ready := sharedReadyCondition(pool, terminating, rerr, conflict, removed)
	meta.SetStatusCondition(&want.Conditions, ready)
	if terminating || rerr != nil || conflict != "" {
		exhausted = nil // Exhausted only of a pool that hands addresses out
	}
	evs := setSharedConditions(want, pool.Generation, conflict, exhausted, terminating, held)
	if len(removed) > 0 {
		if prev := meta.FindStatusCondition(pool.Status.Conditions, allotv1.ConditionReady); prev == nil || prev.Message != ready.Message {
			evs = append(evs, pendingEvent{reason: allotv1.ReasonAddressRemovalRefused, action: "Validate", note: ready.Message})
		}
	}
	return sharedPoolDecision{status: want, events: evs, release: terminating && len(held) == 0}
}

// heldClaims parses claims, sorted by address; a claim whose address does not parse (the CRD
// refuses it) is left out.
func heldClaims(claims []allotv1.AddressClaim) []heldClaim {
	held := make([]heldClaim, 0, len(claims))
	for i := range claims {
		c := &claims[i]
		a, err := netip.ParseAddr(c.Spec.IP)
		if err != nil {
			continue
		}
		h := c.Spec.Holder
		held = append(held, heldClaim{addr: a.Unmap(), who: fmt.Sprintf("%s/%s (%s)", h.Namespace, h.Pod, h.Interface)})
	}
	slices.SortFunc(held, func(a, b heldClaim) int { return a.addr.Compare(b.addr) })
	return held
}

// sharedFamilyStatus counts one family: nil when the pool has no such family and no claim of
// it. exhausted describes a full family; removed lists held addresses no longer configured.
func sharedFamilyStatus(fam policy.Family, specified bool, f *sharedpool.ResolvedFamily, held []heldClaim) (
	fs *allotv1.SharedFamilyStatus, exhausted string, removed []string) {
	n := 0
	for _, h := range held {
		if h.addr.Is4() == (fam == policy.IPv4) {
			n++
		}
	}
	if !specified && n == 0 {
		return nil, "", nil
	}
	fs = &allotv1.SharedFamilyStatus{AllocatedIPs: int64(n)}
	if f == nil {
		return fs, "", nil
	}
	fs.TotalIPs = sat64(f.Usable.Size())
	inUsable := 0
	for _, h := range held {
		if h.addr.Is4() != (fam == policy.IPv4) {
			continue
		}
		if f.Usable.Contains(h.addr) {
			inUsable++
		}
		if !f.Configured.Contains(h.addr) {
			removed = append(removed, h.addr.String()+" held by "+h.who)
		}
	}
	if f.Usable.Size()-uint64(inUsable) == 0 {
		exhausted = fmt.Sprintf("%s: %d of %d addresses in use", fam, inUsable, f.Usable.Size())
	}
	return fs, exhausted, removed
}

// sharedReadyCondition says whether the pool hands addresses out, and why not.
func sharedReadyCondition(pool *allotv1.SharedIPPool, terminating bool, rerr error, conflict string, removed []string) metav1.Condition {
	ready := metav1.Condition{Type: allotv1.ConditionReady, Status: metav1.ConditionTrue, Reason: allotv1.ReasonValid,
		Message: "addresses are handed out of this pool", ObservedGeneration: pool.Generation}
	switch {
	case terminating:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, allotv1.ReasonPoolTerminating, "the pool is being deleted; it hands out no new addresses"
	case rerr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, allotv1.ReasonInvalid, rerr.Error()
	case conflict != "":
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, allotv1.ReasonOverlap, "the pool hands out nothing: "+conflict
	case pool.Spec.Disable:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, allotv1.ReasonInvalid, "the pool is disabled (spec.disable); addresses in use stay"
	case len(removed) > 0:
		// Still Ready: the pool hands out its other addresses. The claims stay; the agents
		// never hand the removed addresses out again once they are freed.
		ready.Reason = allotv1.ReasonAddressRemovalRefused
		ready.Message = fmt.Sprintf("addresses were removed from the spec while pods hold them; they stay held until freed: %s",
			strings.Join(firstN(removed, 10), ", "))
	}
	return ready
}

// setSharedConditions sets the problem conditions (present only while the problem lasts) and
// returns the Events of those that turned on or changed.
func setSharedConditions(want *allotv1.SharedIPPoolStatus, gen int64, conflict string, exhausted []string,
	terminating bool, held []heldClaim) []pendingEvent {
	var evs []pendingEvent
	set := func(typ string, on bool, reason, msg string) {
		if !on {
			meta.RemoveStatusCondition(&want.Conditions, typ)
			return
		}
		if prev := meta.FindStatusCondition(want.Conditions, typ); prev == nil || prev.Message != msg {
			evs = append(evs, pendingEvent{reason: typ, action: "Validate", note: msg})
		}
		meta.SetStatusCondition(&want.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	set(allotv1.ConditionAddressConflict, conflict != "", allotv1.ReasonOverlap,
		conflict+"; the older pool keeps its addresses, this one hands out nothing until the overlap is removed")
	set(allotv1.ConditionExhausted, len(exhausted) > 0, allotv1.ReasonPoolExhausted,
		"no free address: "+strings.Join(exhausted, "; ")+"; add addresses to the pool")
	holders := map[string]bool{}
	for _, h := range held {
		holders[h.who] = true
	}
	set(allotv1.ConditionDeletionRefused, terminating && len(held) > 0, allotv1.ReasonInUse,
		fmt.Sprintf("deletion waits: %d address(es) still held by %s; the pool is deleted once they are freed (finalizer %s)",
			len(held), strings.Join(firstN(keys(holders), 10), ", "), allotv1.FinalizerSharedPoolInUse))
	return evs
}

// releaseSharedPool removes the finalizer of a pool being deleted once no claim of it is
// left, asking the API server itself (not the cache) so a claim created a moment ago keeps
// the pool.
func (r *sharedPoolStatus) release(ctx context.Context, pool *allotv1.SharedIPPool) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(pool, allotv1.FinalizerSharedPoolInUse) {
		return reconcile.Result{}, nil
	}
	var live allotv1.AddressClaimList
	if err := r.reader.List(ctx, &live, client.MatchingLabels{allotv1.LabelClaimPool: allotk8s.LabelValue(pool.Name)}); err != nil {
		return reconcile.Result{}, err
	}
	for i := range live.Items {
		if live.Items[i].Spec.Pool == pool.Name {
			// The cache lags; its event re-queues the pool.
			return reconcile.Result{RequeueAfter: r.delay}, nil
		}
	}
	controllerutil.RemoveFinalizer(pool, allotv1.FinalizerSharedPoolInUse)
	if err := r.client.Update(ctx, pool); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("remove finalizer of SharedIPPool %s: %w", pool.Name, err)
	}
	r.log.Info("SharedIPPool deleted: no address of it is held", "pool", pool.Name)
	return reconcile.Result{}, nil
}

// sharedStatusFingerprint covers the operator-owned fields of a SharedIPPool status.
func sharedStatusFingerprint(s *allotv1.SharedIPPoolStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", s.ObservedGeneration)
	for _, f := range []*allotv1.SharedFamilyStatus{s.IPv4, s.IPv6} {
		if f == nil {
			b.WriteString("|-")
		} else {
			fmt.Fprintf(&b, "|%d/%d", f.AllocatedIPs, f.TotalIPs)
		}
	}
	cs := slices.Clone(s.Conditions)
	slices.SortFunc(cs, func(a, b metav1.Condition) int { return strings.Compare(a.Type, b.Type) })
	for _, c := range cs {
		fmt.Fprintf(&b, "|%s=%s/%s/%s/%d", c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration)
	}
	return b.String()
}

func sat64(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}
