package operator

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

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

func (op *operator) setupSharedStatus(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &allotv1.AddressClaim{}, indexClaimPool,
		func(o client.Object) []string { return []string{o.(*allotv1.AddressClaim).Spec.Pool} }); err != nil {
		return err
	}
	sh := op.shared
	sh.dirty = newDirtySet(op.opts.StatusDelay)
	if err := mgr.Add(manager.RunnableFunc(sh.dirty.run)); err != nil {
		return err
	}
	// A claim changes one pool's counts: batched through the dirty set, so a burst of
	// allocations costs one status write per StatusDelay.
	claimEvents := handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			sh.dirty.add(claimPool(e.Object))
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			sh.dirty.add(claimPool(e.ObjectNew))
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			sh.dirty.add(claimPool(e.Object))
		},
	}
	// Reservations change every pool's total; a pool created, changed or deleted may start or
	// end another pool's conflict.
	all := func(ctx context.Context) {
		var pools allotv1.SharedIPPoolList
		if err := op.client.List(ctx, &pools); err != nil {
			return
		}
		names := make([]string, 0, len(pools.Items))
		for i := range pools.Items {
			names = append(names, pools.Items[i].Name)
		}
		sh.dirty.add(names...)
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
		WatchesRawSource(sh.dirty.source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(quiet(op.reconcileSharedPool))
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

// reconcileSharedPool keeps one SharedIPPool's finalizer, status counts and conditions.
func (op *operator) reconcileSharedPool(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Name == "" {
		return reconcile.Result{}, nil
	}
	name := req.Name
	sh := op.shared
	var pool allotv1.SharedIPPool
	if err := op.client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			for _, f := range []string{"ipv4", "ipv6"} {
				sh.m.allocated.DeleteLabelValues(name, f)
				sh.m.total.DeleteLabelValues(name, f)
			}
			op.statusMu.Lock()
			delete(sh.lastFP, name)
			op.statusMu.Unlock()
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	terminating := pool.DeletionTimestamp != nil
	if res, done, err := op.ensureFinalizer(ctx, &pool, allotv1.FinalizerSharedPoolInUse, "SharedIPPool"); done {
		return res, err
	}
	var pools allotv1.SharedIPPoolList
	if err := op.client.List(ctx, &pools); err != nil {
		return reconcile.Result{}, err
	}
	var rips allotv1.ReservedIPList
	if err := op.client.List(ctx, &rips); err != nil {
		return reconcile.Result{}, err
	}
	var claims allotv1.AddressClaimList
	if err := op.client.List(ctx, &claims, client.MatchingFields{indexClaimPool: name}); err != nil {
		return reconcile.Result{}, err
	}
	held := make([]heldClaim, 0, len(claims.Items))
	for i := range claims.Items {
		c := &claims.Items[i]
		a, err := netip.ParseAddr(c.Spec.IP)
		if err != nil {
			continue // the CRD refuses it
		}
		h := c.Spec.Holder
		held = append(held, heldClaim{addr: a.Unmap(), who: fmt.Sprintf("%s/%s (%s)", h.Namespace, h.Pod, h.Interface)})
	}
	slices.SortFunc(held, func(a, b heldClaim) int { return a.addr.Compare(b.addr) })

	reserved, _ := sharedpool.ReservedFrom(rips.Items) // bad ReservedIPs: refused by the webhook, reported by the agents
	conflict := sharedpool.Conflicts(pools.Items)[name]
	res, rerr := sharedpool.Resolve(&pool, reserved)

	want := pool.Status.DeepCopy()
	want.ObservedGeneration = pool.Generation
	want.IPv4, want.IPv6 = nil, nil
	var exhausted, removed []string
	for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
		var fs *allotv1.SharedFamilyStatus
		var f *sharedpool.Family
		if res != nil {
			f = res.Get(fam)
		}
		spec := pool.Spec.IPv4
		if fam == policy.IPv6 {
			spec = pool.Spec.IPv6
		}
		n := 0
		for _, h := range held {
			if h.addr.Is4() == (fam == policy.IPv4) {
				n++
			}
		}
		if spec == nil && n == 0 {
			continue
		}
		fs = &allotv1.SharedFamilyStatus{AllocatedIPs: int64(n)}
		if f != nil {
			fs.TotalIPs = sat64(f.Usable.Size())
			inUsable := 0
			var gone []string
			for _, h := range held {
				if h.addr.Is4() != (fam == policy.IPv4) {
					continue
				}
				if f.Usable.Contains(h.addr) {
					inUsable++
				}
				if !f.Configured.Contains(h.addr) {
					gone = append(gone, h.addr.String()+" held by "+h.who)
				}
			}
			if f.Usable.Size()-uint64(inUsable) == 0 {
				exhausted = append(exhausted, fmt.Sprintf("%s: %d of %d addresses in use", fam, inUsable, f.Usable.Size()))
			}
			removed = append(removed, gone...)
		}
		if fam == policy.IPv4 {
			want.IPv4 = fs
		} else {
			want.IPv6 = fs
		}
		sh.m.allocated.WithLabelValues(name, string(fam)).Set(float64(fs.AllocatedIPs))
		sh.m.total.WithLabelValues(name, string(fam)).Set(float64(fs.TotalIPs))
	}

	gen := pool.Generation
	ready := metav1.Condition{Type: allotv1.ConditionReady, Status: metav1.ConditionTrue, Reason: allotv1.ReasonValid,
		Message: "addresses are handed out of this pool", ObservedGeneration: gen}
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
	meta.SetStatusCondition(&want.Conditions, ready)
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
	set(allotv1.ConditionExhausted, len(exhausted) > 0 && !terminating && rerr == nil && conflict == "", allotv1.ReasonPoolExhausted,
		"no free address: "+strings.Join(exhausted, "; ")+"; add addresses to the pool")
	holders := map[string]bool{}
	for _, h := range held {
		holders[h.who] = true
	}
	set(allotv1.ConditionDeletionRefused, terminating && len(held) > 0, allotv1.ReasonInUse,
		fmt.Sprintf("deletion waits: %d address(es) still held by %s; the pool is deleted once they are freed (finalizer %s)",
			len(held), strings.Join(firstN(keys(holders), 10), ", "), allotv1.FinalizerSharedPoolInUse))
	if len(removed) > 0 {
		if prev := meta.FindStatusCondition(pool.Status.Conditions, allotv1.ConditionReady); prev == nil || prev.Message != ready.Message {
			evs = append(evs, pendingEvent{reason: allotv1.ReasonAddressRemovalRefused, action: "Validate", note: ready.Message})
		}
	}

	if terminating && len(held) == 0 {
		return op.releaseSharedPool(ctx, &pool)
	}
	fp := sharedStatusFingerprint(want)
	op.statusMu.Lock()
	written := sh.lastFP[name] == fp
	op.statusMu.Unlock()
	if equality.Semantic.DeepEqual(want, &pool.Status) || written {
		return reconcile.Result{}, nil
	}
	// Counters may wait (one write per StatusDelay while pods come and go); conditions may not.
	urgent := !sameConditions(want.Conditions, pool.Status.Conditions) || want.ObservedGeneration != pool.Status.ObservedGeneration
	if wait := op.statusWait("sharedippool/" + name); !urgent && wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	upd := pool.DeepCopy()
	upd.Status = *want
	if err := op.client.Status().Update(ctx, upd); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("update SharedIPPool %s status: %w", name, err)
	}
	op.statusWritten("sharedippool/" + name)
	op.statusMu.Lock()
	sh.lastFP[name] = fp
	op.statusMu.Unlock()
	for _, ev := range evs {
		op.event(upd, corev1.EventTypeWarning, ev.reason, ev.action, "%s", ev.note)
	}
	return reconcile.Result{}, nil
}

// releaseSharedPool removes the finalizer of a pool being deleted once no claim of it is
// left, asking the API server itself (not the cache) so a claim created a moment ago keeps
// the pool.
func (op *operator) releaseSharedPool(ctx context.Context, pool *allotv1.SharedIPPool) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(pool, allotv1.FinalizerSharedPoolInUse) {
		return reconcile.Result{}, nil
	}
	var live allotv1.AddressClaimList
	if err := op.reader.List(ctx, &live, client.MatchingLabels{allotv1.LabelClaimPool: allotk8s.LabelValue(pool.Name)}); err != nil {
		return reconcile.Result{}, err
	}
	for i := range live.Items {
		if live.Items[i].Spec.Pool == pool.Name {
			// The cache lags; its event re-queues the pool.
			return reconcile.Result{RequeueAfter: op.opts.StatusDelay}, nil
		}
	}
	controllerutil.RemoveFinalizer(pool, allotv1.FinalizerSharedPoolInUse)
	if err := op.client.Update(ctx, pool); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("remove finalizer of SharedIPPool %s: %w", pool.Name, err)
	}
	op.log.Info("SharedIPPool deleted: no address of it is held", "pool", pool.Name)
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
