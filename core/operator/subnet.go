package operator

// SpiderSubnet (Spiderpool docs, "SpiderSubnet"): a workload whose pod template carries
// ipam.spidernet.io/subnet(s) gets SharedIPPools of its own, cut from the named AllotSubnet,
// sized by ipam.spidernet.io/ippool-ip-number, resized with its replicas and reclaimed with it
// (ipam.spidernet.io/ippool-reclaim). Its pods reach them through the spiderpool-priority
// policy (priority 1: the subnet annotation), which matches pools by their allot.io/subnet
// label; the pool's podAffinity (the workload's selector) and namespaceName keep other
// applications out.
//
// The record of which pool holds which addresses is the subnet's status.allocations, and every
// change of it is an update with the subnet's resourceVersion read just before: two writers
// (two operator replicas in a split brain, two workloads reconciled at once) cannot both cut
// the same addresses, the second gets a conflict and redoes its cut on the new status. The
// order of writes keeps addresses from ever being in two pools:
//
//   - grow: the subnet's allocation first, then the pool's spec.ips;
//   - shrink: the pool's spec.ips first, then, of the addresses taken out, those no claim
//     holds are given back to the subnet (a held one stays allocated until freed);
//   - reclaim: the pool is deleted, and its allocation dropped only once the pool is gone
//     (its finalizer holds it while claims of it exist).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/allot-ipam/allot/core/addrset"
	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/sharedpool"
	"github.com/allot-ipam/allot/sdk/policy"
)

const (
	// DefaultSubnetResync is how often every subnet's allocations are checked against the
	// workloads (deleted workloads whose pools to reclaim, pools still draining).
	DefaultSubnetResync = 10 * time.Second
	// sweepKey is the work-queue key of a pass over every subnet.
	sweepKey = "sweep"
	// subnetWriteAttempts bounds the retries of one status update on conflicts.
	subnetWriteAttempts = 20
)

// errSubnetExhausted: the subnet has too few free addresses for a pool's growth.
var errSubnetExhausted = errors.New("subnet exhausted")

// subnetCtl is one term's SpiderSubnet controller: the reconciler of AllotSubnets and the
// auto pools cut from them. Its decisions are pure (cutAddresses, shrinkPlan, autoPool); the
// steps around them read from the API server and write with resourceVersions.
type subnetCtl struct {
	c      client.Client // cache-backed: workloads; writes
	r      client.Reader // the API server itself: subnets, pools, claims
	log    *slog.Logger
	event  eventFunc
	q      workqueue.TypedRateLimitingInterface[string]
	resync time.Duration
}

// newSubnetCtl makes the SpiderSubnet controller, or nil when the API server does not serve
// AllotSubnet.
func newSubnetCtl(t *term) (*subnetCtl, error) {
	ok, err := crdServed(t.opts.RESTConfig, "allotsubnets")
	if err != nil {
		return nil, fmt.Errorf("operator: subnets: discovery: %w", err)
	}
	if !ok {
		t.log.Info("subnets: AllotSubnet CRD not installed; auto pools are off")
		return nil, nil
	}
	return &subnetCtl{
		c: t.client, r: t.reader, log: t.log, event: t.event, resync: t.opts.SharedPools.SubnetResync,
		q: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
	}, nil
}

// Setup adds the controller to the term's manager (a leader-only runnable on the manager's
// informers).
func (s *subnetCtl) Setup(mgr ctrl.Manager) error {
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return s.run(ctx, func(ctx context.Context, o client.Object) (cache.Informer, error) {
			return mgr.GetCache().GetInformer(ctx, o)
		})
	}))
}

// run is the controller's runnable: informers on the workloads, subnets and auto
// pools feed one work queue of application IDs (and sweeps); two workers drain it.
func (s *subnetCtl) run(ctx context.Context, informers informerFunc) error {
	defer s.q.ShutDown()
	if err := s.watchApps(ctx, informers); err != nil {
		return err
	}
	if err := s.watchSubnets(ctx, informers); err != nil {
		return err
	}
	if err := s.watchAutoPools(ctx, informers); err != nil {
		return err
	}
	done := make(chan struct{})
	for range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			for s.work(ctx) {
			}
		}()
	}
	t := time.NewTicker(s.resync)
	defer t.Stop()
	s.q.Add(sweepKey)
	for {
		select {
		case <-ctx.Done():
			s.q.ShutDown()
			<-done
			<-done
			return nil
		case <-t.C:
			s.q.Add(sweepKey)
		}
	}
}

// informerFunc gets the term's shared informer for a kind.
type informerFunc func(context.Context, client.Object) (cache.Informer, error)

// watchApps queues the application of every workload event.
func (s *subnetCtl) watchApps(ctx context.Context, informers informerFunc) error {
	enqueueApp := func(o any) {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		obj, ok := o.(client.Object)
		if !ok {
			return
		}
		if a, ok := appOf(obj); ok {
			s.q.Add(a.id())
		}
	}
	for _, kind := range appKinds {
		inf, err := informers(ctx, newAppObject(kind))
		if err != nil {
			return fmt.Errorf("subnets: informer for %s: %w", kind, err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    enqueueApp,
			UpdateFunc: func(_, o any) { enqueueApp(o) },
			DeleteFunc: enqueueApp,
		}); err != nil {
			return fmt.Errorf("subnets: event handler for %s: %w", kind, err)
		}
	}
	return nil
}

// watchSubnets sweeps when a subnet changed (or is new): the sweep writes its counts and
// re-checks its pools.
func (s *subnetCtl) watchSubnets(ctx context.Context, informers informerFunc) error {
	subInf, err := informers(ctx, &allotv1.AllotSubnet{})
	if err != nil {
		return fmt.Errorf("subnets: informer for AllotSubnet: %w", err)
	}
	sweep := func(any) { s.q.Add(sweepKey) }
	_, err = subInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: sweep, UpdateFunc: func(o, n any) {
			if oo, ok := o.(*allotv1.AllotSubnet); ok {
				if nn, ok := n.(*allotv1.AllotSubnet); ok && oo.Generation == nn.Generation {
					return // our own status write
				}
			}
			sweep(n)
		}, DeleteFunc: sweep,
	})
	return err
}

// watchAutoPools queues the application of an auto pool that changed or went away (its last
// claim freed).
func (s *subnetCtl) watchAutoPools(ctx context.Context, informers informerFunc) error {
	poolInf, err := informers(ctx, &allotv1.SharedIPPool{})
	if err != nil {
		return fmt.Errorf("subnets: informer for SharedIPPool: %w", err)
	}
	byPool := func(o any) {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		if p, ok := o.(*allotv1.SharedIPPool); ok && p.Labels[allotv1.LabelAutoPool] == "true" {
			if id := p.Annotations[allotv1.AnnotationAutoPoolApp]; id != "" {
				s.q.Add(id)
			}
		}
	}
	_, err = poolInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: byPool,
		UpdateFunc: func(o, n any) {
			// Status writes (every claim changes the counts) are not the application's
			// business; spec edits and the start of a deletion are.
			oo, ok1 := o.(*allotv1.SharedIPPool)
			nn, ok2 := n.(*allotv1.SharedIPPool)
			if ok1 && ok2 && oo.Generation == nn.Generation && (oo.DeletionTimestamp == nil) == (nn.DeletionTimestamp == nil) {
				return
			}
			byPool(n)
		},
		DeleteFunc: byPool,
	})
	return err
}

// work handles one key; false when the queue is shut down.
func (s *subnetCtl) work(ctx context.Context) bool {
	key, quit := s.q.Get()
	if quit {
		return false
	}
	defer s.q.Done(key)
	var err error
	var again time.Duration
	if key == sweepKey {
		err = s.sweep(ctx)
	} else {
		again, err = s.reconcileApp(ctx, key)
	}
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("subnets: reconcile failed; retrying", "key", key, "err", err)
		s.q.AddRateLimited(key)
	case again > 0:
		s.q.Forget(key)
		s.q.AddAfter(key, again)
	default:
		s.q.Forget(key)
	}
	return true
}

// sweep writes every subnet's counts and queues every application holding an allocation, so
// pools of deleted workloads are reclaimed even if their deletion was missed. The subnets are
// listed from the informer cache (a sweep every SubnetResync must not poll the API server;
// one the cache lacks yet comes with its add event) and each is read live before its write.
func (s *subnetCtl) sweep(ctx context.Context) error {
	var subs allotv1.AllotSubnetList
	if err := s.c.List(ctx, &subs); err != nil {
		return fmt.Errorf("list AllotSubnets: %w", err)
	}
	for i := range subs.Items {
		sub := &subs.Items[i]
		for _, a := range sub.Status.Allocations {
			if a.Application != "" {
				s.q.Add(a.Application)
			}
		}
		if err := s.updateStatus(ctx, sub.Name, func(*allotv1.AllotSubnet) (bool, error) { return false, nil }); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// reconcileApp fits the auto pools of one application to what it asks for now, and retires
// those it no longer asks for. It returns when to look again (a shrink or reclaim waiting on
// pods to free addresses).
func (s *subnetCtl) reconcileApp(ctx context.Context, id string) (time.Duration, error) {
	kind, ns, name, ok := parseAppID(id)
	if !ok {
		return 0, nil
	}
	a, err := s.app(ctx, kind, ns, name)
	if err != nil {
		return 0, fmt.Errorf("get %s: %w", id, err)
	}
	var wants []poolWant
	if a != nil {
		if wants, err = a.wants(); err != nil {
			// Keep what the application has: a typo in an annotation must not reclaim its
			// addresses. The Event tells the user what to fix.
			s.event(a.Obj, corev1.EventTypeWarning, "InvalidSubnetAnnotation", "FitAutoPool", "%s %s: %v", kind, id, err)
			return 0, nil
		}
	}
	var again time.Duration
	wanted := map[string]bool{}
	for _, w := range wants {
		if err := s.adopt(ctx, a, &w); err != nil {
			return 0, err
		}
		wanted[w.Pool] = true
		wait, err := s.fit(ctx, a, w)
		if errors.Is(err, errSubnetExhausted) {
			s.event(a.Obj, corev1.EventTypeWarning, "SubnetExhausted", "FitAutoPool", "%v", err)
			again = s.resync
			continue
		}
		if err != nil {
			return 0, err
		}
		if wait && (again == 0 || s.resync < again) {
			again = s.resync
		}
	}
	wait, err := s.retireUnwanted(ctx, id, wanted)
	if err != nil {
		return 0, err
	}
	if wait {
		again = s.resync
	}
	return again, nil
}

// app reads the application; nil when it is gone, being deleted, or not an application.
func (s *subnetCtl) app(ctx context.Context, kind, ns, name string) (*app, error) {
	obj := newAppObject(kind)
	err := s.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	case obj.GetDeletionTimestamp() != nil:
		return nil, nil
	}
	if got, ok := appOf(obj); ok {
		return &got, nil
	}
	return nil, nil
}

// retireUnwanted reclaims (or keeps) the pools of allocations of application id it no longer
// asks for; wait is true while one is still draining.
func (s *subnetCtl) retireUnwanted(ctx context.Context, id string, wanted map[string]bool) (wait bool, err error) {
	var subs allotv1.AllotSubnetList
	if err := s.r.List(ctx, &subs); err != nil {
		return false, fmt.Errorf("list AllotSubnets: %w", err)
	}
	for i := range subs.Items {
		for _, al := range subs.Items[i].Status.Allocations {
			if al.Application != id || wanted[al.Pool] {
				continue
			}
			w, err := s.retire(ctx, subs.Items[i].Name, al)
			if err != nil {
				return false, err
			}
			wait = wait || w
		}
	}
	return wait, nil
}

// fit makes the pool w hold exactly w.Size addresses of its subnet, keeping those it has.
// wait is true when addresses to give back are still held by pods (the shrink finishes later).
func (s *subnetCtl) fit(ctx context.Context, a *app, w poolWant) (wait bool, err error) {
	if ok, wait, err := s.canFit(ctx, a, w); !ok {
		return wait, err
	}
	held, err := s.grow(ctx, w, a.id())
	if err != nil {
		return false, err
	}
	if held.Size() <= w.Size {
		return false, s.ensurePool(ctx, a, w, held)
	}
	return s.shrink(ctx, a, w, held)
}

// canFit checks that w's subnet has its family and that its pool, if it exists, is an auto
// pool not being deleted; if not, ok is false and the application waits (wait) or is told by
// an Event.
func (s *subnetCtl) canFit(ctx context.Context, a *app, w poolWant) (ok, wait bool, err error) {
	var sub allotv1.AllotSubnet
	if err := s.r.Get(ctx, client.ObjectKey{Name: w.Subnet}, &sub); err != nil {
		if apierrors.IsNotFound(err) {
			s.event(a.Obj, corev1.EventTypeWarning, "SubnetNotFound", "FitAutoPool",
				"%s: pod template annotation names AllotSubnet %q for %s of interface %s, which does not exist", a.id(), w.Subnet, w.Family, w.Interface)
			return false, true, nil
		}
		return false, false, fmt.Errorf("get AllotSubnet %s: %w", w.Subnet, err)
	}
	if subnetFamily(&sub, w.Family) == nil {
		s.event(a.Obj, corev1.EventTypeWarning, "SubnetFamilyMissing", "FitAutoPool",
			"%s: AllotSubnet %q has no spec.%s, but the annotation asks for an %s pool", a.id(), w.Subnet, w.Family, w.Family.Label())
		return false, false, nil
	}
	// An existing pool of that name that the operator did not make is not taken over.
	var pool allotv1.SharedIPPool
	err = s.r.Get(ctx, client.ObjectKey{Name: w.Pool}, &pool)
	switch {
	case err == nil && pool.Labels[allotv1.LabelAutoPool] != "true":
		s.event(a.Obj, corev1.EventTypeWarning, "PoolNameTaken", "FitAutoPool",
			"%s: SharedIPPool %q exists and was not made for this application; it is left alone", a.id(), w.Pool)
		return false, false, nil
	case err == nil && pool.DeletionTimestamp != nil:
		return false, true, nil // being reclaimed; a new one is cut once it is gone
	case err != nil && !apierrors.IsNotFound(err):
		return false, false, fmt.Errorf("get SharedIPPool %s: %w", w.Pool, err)
	}
	return true, false, nil
}

// shrink gives back addresses no claim holds, the highest first, after the pool no longer
// lists them. wait is true when addresses to give back are still held by pods.
func (s *subnetCtl) shrink(ctx context.Context, a *app, w poolWant, held addrset.Set) (wait bool, err error) {
	claimed, err := s.claimed(ctx, w.Pool, w.Family)
	if err != nil {
		return false, err
	}
	drop, keep := shrinkPlan(held, claimed, w.Size)
	if err := s.ensurePool(ctx, a, w, keep); err != nil {
		return false, err
	}
	// Claims made between the first read and the pool's update (an agent with the old
	// pool) keep their addresses allocated.
	if claimed, err = s.claimed(ctx, w.Pool, w.Family); err != nil {
		return false, err
	}
	give := drop.Subtract(claimed)
	if err := s.updateStatus(ctx, w.Subnet, func(sub *allotv1.AllotSubnet) (bool, error) {
		i := allocIndex(sub, w.Pool)
		if i < 0 {
			return false, nil
		}
		cur, err := addrset.Parse("status.allocations.ips", w.Family, sub.Status.Allocations[i].IPs)
		if err != nil {
			return false, err
		}
		sub.Status.Allocations[i].IPs = cur.Subtract(give).Strings()
		return true, nil
	}); err != nil {
		return false, err
	}
	return held.Size()-give.Size() > w.Size, nil
}

// shrinkPlan splits held into the addresses to drop (the highest that no claim holds, as
// many as exceed size) and those the pool keeps. Pure.
func shrinkPlan(held, claimed addrset.Set, size uint64) (drop, keep addrset.Set) {
	drop = top(held.Subtract(claimed), held.Size()-min(size, held.Size()))
	return drop, held.Subtract(drop)
}

// cutAddresses grows cur to size addresses with the lowest of free; need is how many it
// lacked, ok false when free has fewer. Pure.
func cutAddresses(cur, free addrset.Set, size uint64) (out addrset.Set, need uint64, ok bool) {
	need = size - min(cur.Size(), size)
	if free.Size() < need {
		return cur, need, false
	}
	return cur.Union(bottom(free, need)), need, true
}

// grow makes the subnet's allocation for w.Pool hold at least w.Size addresses and returns
// it. The new addresses are the lowest free ones.
func (s *subnetCtl) grow(ctx context.Context, w poolWant, appID string) (addrset.Set, error) {
	var out addrset.Set
	err := s.updateStatus(ctx, w.Subnet, func(sub *allotv1.AllotSubnet) (bool, error) {
		i := allocIndex(sub, w.Pool)
		cur := addrset.FromRanges(w.Family, nil)
		if i >= 0 {
			al := &sub.Status.Allocations[i]
			if al.Family != string(w.Family) {
				return false, fmt.Errorf("AllotSubnet %s: status.allocations[%d] of pool %q is %s, not %s", sub.Name, i, w.Pool, al.Family, w.Family)
			}
			var err error
			if cur, err = addrset.Parse(fmt.Sprintf("status.allocations[%d].ips", i), w.Family, al.IPs); err != nil {
				return false, fmt.Errorf("AllotSubnet %s: %w", sub.Name, err)
			}
		}
		out = cur
		if cur.Size() >= w.Size && i >= 0 {
			return false, nil
		}
		free, err := s.free(ctx, sub, w.Family, w.Pool)
		if err != nil {
			return false, err
		}
		if i < 0 && len(w.Existing) > 0 {
			if cur, free, err = seedAdopted(w, free); err != nil {
				return false, err
			}
		}
		cut, need, ok := cutAddresses(cur, free, w.Size)
		if !ok {
			return false, fmt.Errorf("%w: AllotSubnet %q has %d free %s addresses; pool %q of %s needs %d more",
				errSubnetExhausted, sub.Name, free.Size(), w.Family.Label(), w.Pool, appID, need)
		}
		out = cut
		if i < 0 {
			sub.Status.Allocations = append(sub.Status.Allocations, allotv1.SubnetAllocation{
				Pool: w.Pool, Family: string(w.Family), Application: appID, Interface: w.Interface})
			i = len(sub.Status.Allocations) - 1
		}
		sub.Status.Allocations[i].IPs = out.Strings()
		sub.Status.Allocations[i].Application = appID
		return true, nil
	})
	return out, err
}

// free is what the subnet may still cut for fam: its usable addresses minus every
// allocation, the addresses of other SharedIPPools of the same subnet (made by hand, or
// imported without an allocation) than pool and the reserved addresses.
func (s *subnetCtl) free(ctx context.Context, sub *allotv1.AllotSubnet, fam policy.Family, pool string) (addrset.Set, error) {
	var rl allotv1.ReservedIPList
	if err := s.r.List(ctx, &rl); err != nil {
		return addrset.Set{}, fmt.Errorf("list ReservedIPs: %w", err)
	}
	reserved, _ := sharedpool.ReservedFrom(rl.Items)
	f, err := resolveSubnet(sub, fam, reserved)
	if err != nil {
		return addrset.Set{}, err
	}
	free := f.Usable
	mine := map[string]bool{pool: true}
	for i, al := range sub.Status.Allocations {
		mine[al.Pool] = true
		if al.Family != string(fam) {
			continue
		}
		set, err := addrset.Parse(fmt.Sprintf("status.allocations[%d].ips", i), fam, al.IPs)
		if err != nil {
			return addrset.Set{}, fmt.Errorf("AllotSubnet %s: %w", sub.Name, err)
		}
		free = free.Subtract(set)
	}
	var pools allotv1.SharedIPPoolList
	if err := s.r.List(ctx, &pools); err != nil {
		return addrset.Set{}, fmt.Errorf("list SharedIPPools: %w", err)
	}
	for i := range pools.Items {
		p := &pools.Items[i]
		if mine[p.Name] {
			continue
		}
		r, err := sharedpool.Resolve(p, sharedpool.Reserved{})
		if err != nil {
			continue
		}
		if g := r.Get(fam); g != nil && g.Subnet.Overlaps(f.Subnet) {
			free = free.Subtract(g.Configured)
		}
	}
	return free, nil
}

// resolveSubnet parses one family of a subnet as a pool spanning all of it would be.
func resolveSubnet(sub *allotv1.AllotSubnet, fam policy.Family, reserved sharedpool.Reserved) (*sharedpool.ResolvedFamily, error) {
	sf := subnetFamily(sub, fam)
	if sf == nil {
		return nil, fmt.Errorf("AllotSubnet %s: spec.%s is not set", sub.Name, fam)
	}
	p := &allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: sub.Name}}
	pf := &allotv1.SharedPoolFamily{Subnet: sf.Subnet, IPs: sf.IPs, ExcludeIPs: sf.ExcludeIPs, Gateway: sf.Gateway, Routes: sf.Routes}
	if fam == policy.IPv4 {
		p.Spec.IPv4 = pf
	} else {
		p.Spec.IPv6 = pf
	}
	r, err := sharedpool.Resolve(p, reserved)
	if err != nil {
		return nil, fmt.Errorf("AllotSubnet %s: %s", sub.Name, strings.TrimPrefix(err.Error(), fmt.Sprintf("SharedIPPool %q: ", sub.Name)))
	}
	return r.Get(fam), nil
}

func subnetFamily(sub *allotv1.AllotSubnet, fam policy.Family) *allotv1.SubnetFamily {
	if fam == policy.IPv4 {
		return sub.Spec.IPv4
	}
	return sub.Spec.IPv6
}

func allocIndex(sub *allotv1.AllotSubnet, pool string) int {
	return slices.IndexFunc(sub.Status.Allocations, func(a allotv1.SubnetAllocation) bool { return a.Pool == pool })
}

// bottom is the n lowest addresses of s; top the n highest.
func bottom(s addrset.Set, n uint64) addrset.Set {
	if n == 0 {
		return addrset.FromRanges(s.Family(), nil)
	}
	first, _ := s.Nth(0)
	last, ok := s.Nth(n - 1)
	if !ok {
		return s
	}
	return s.Intersect(addrset.FromRanges(s.Family(), []addrset.Range{{From: first, To: last}}))
}

func top(s addrset.Set, n uint64) addrset.Set {
	size := s.Size()
	if n == 0 {
		return addrset.FromRanges(s.Family(), nil)
	}
	if n >= size {
		return s
	}
	first, _ := s.Nth(size - n)
	last, _ := s.Nth(size - 1)
	return s.Intersect(addrset.FromRanges(s.Family(), []addrset.Range{{From: first, To: last}}))
}

// claimed are the addresses of fam that claims of pool hold, read from the API server.
func (s *subnetCtl) claimed(ctx context.Context, pool string, fam policy.Family) (addrset.Set, error) {
	var cl allotv1.AddressClaimList
	if err := s.r.List(ctx, &cl, client.MatchingLabels{allotv1.LabelClaimPool: allotk8s.LabelValue(pool)}); err != nil {
		return addrset.Set{}, fmt.Errorf("list AddressClaims of %s: %w", pool, err)
	}
	var rs []addrset.Range
	for _, c := range cl.Items {
		if c.Spec.Pool != pool {
			continue
		}
		a, err := netip.ParseAddr(c.Spec.IP)
		if err != nil || (fam == policy.IPv4) != a.Unmap().Is4() {
			continue
		}
		rs = append(rs, addrset.Range{From: a.Unmap(), To: a.Unmap()})
	}
	return addrset.FromRanges(fam, rs), nil
}

// ensurePool creates or updates the application's pool to hold ips, with the subnet's
// gateway and routes (Spiderpool: an IPPool inherits them from its subnet).
func (s *subnetCtl) ensurePool(ctx context.Context, a *app, w poolWant, ips addrset.Set) error {
	for attempt := 0; attempt < subnetWriteAttempts; attempt++ {
		var sub allotv1.AllotSubnet
		if err := s.r.Get(ctx, client.ObjectKey{Name: w.Subnet}, &sub); err != nil {
			return fmt.Errorf("get AllotSubnet %s: %w", w.Subnet, err)
		}
		sf := subnetFamily(&sub, w.Family)
		if sf == nil {
			return fmt.Errorf("AllotSubnet %s: spec.%s is not set", w.Subnet, w.Family)
		}
		var pool allotv1.SharedIPPool
		err := s.r.Get(ctx, client.ObjectKey{Name: w.Pool}, &pool)
		if apierrors.IsNotFound(err) {
			pool = allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: w.Pool}}
		} else if err != nil {
			return fmt.Errorf("get SharedIPPool %s: %w", w.Pool, err)
		}
		want := autoPool(&pool, sf, a, w, ips)
		if pool.ResourceVersion == "" {
			err = s.c.Create(ctx, want)
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err == nil {
				s.log.Info("subnets: auto pool created", "pool", w.Pool, "subnet", w.Subnet, "application", a.id(), "ips", ips.Strings())
			}
			return wrapPoolErr(err, "create", w.Pool)
		}
		if equality.Semantic.DeepEqual(want.Spec, pool.Spec) && equality.Semantic.DeepEqual(want.ObjectMeta, pool.ObjectMeta) {
			return nil
		}
		err = s.c.Update(ctx, want)
		if apierrors.IsConflict(err) {
			continue
		}
		if err == nil {
			s.log.Info("subnets: auto pool resized", "pool", w.Pool, "application", a.id(), "ips", ips.Strings())
		}
		return wrapPoolErr(err, "update", w.Pool)
	}
	return fmt.Errorf("SharedIPPool %s kept changing", w.Pool)
}

// autoPool is pool (as read, or new: no resourceVersion) as application a's pool w holding
// ips of the subnet family sf should be. Pure.
func autoPool(pool *allotv1.SharedIPPool, sf *allotv1.SubnetFamily, a *app, w poolWant, ips addrset.Set) *allotv1.SharedIPPool {
	fam := &allotv1.SharedPoolFamily{Subnet: sf.Subnet, IPs: ips.Strings(), Gateway: sf.Gateway, Routes: slices.Clone(sf.Routes)}
	if old := poolFamily(pool, w.Family); old != nil {
		// An adopted pool's exclusions stay (the operator's own pools have none).
		fam.ExcludeIPs = slices.Clone(old.ExcludeIPs)
	}
	want := pool.DeepCopy()
	if want.Labels == nil {
		want.Labels = map[string]string{}
	}
	if want.Annotations == nil {
		want.Annotations = map[string]string{}
	}
	want.Labels[allotv1.LabelSubnet] = allotk8s.LabelValue(w.Subnet)
	want.Labels[allotv1.LabelAutoPool] = "true"
	want.Annotations[allotv1.AnnotationAutoPoolApp] = a.id()
	want.Annotations[allotv1.AnnotationAutoPoolAppUID] = string(a.UID)
	want.Annotations[allotv1.AnnotationAutoPoolInterface] = w.Interface
	want.Annotations[allotv1.AnnotationAutoPoolReclaim] = fmt.Sprint(w.Reclaim)
	want.Spec.IPv4, want.Spec.IPv6 = nil, nil
	if w.Family == policy.IPv4 {
		want.Spec.IPv4 = fam
	} else {
		want.Spec.IPv6 = fam
	}
	// The pool belongs to the application: only its pods, in its namespace.
	want.Spec.PodAffinity = a.Selector.DeepCopy()
	want.Spec.NamespaceName = []string{a.Namespace}
	if pool.ResourceVersion == "" {
		// Born with the shared-pool finalizer, so that a pool reclaimed right after its
		// creation still waits for its claims to be freed.
		controllerutil.AddFinalizer(want, allotv1.FinalizerSharedPoolInUse)
	}
	return want
}

func wrapPoolErr(err error, verb, pool string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s SharedIPPool %s: %w", verb, pool, err)
}

// retire handles a pool its application no longer asks for: a reclaimed pool is deleted and
// its allocation dropped once it is gone; a kept one (ippool-reclaim "false") stays with its
// addresses. wait is true while a deleted pool is still draining.
func (s *subnetCtl) retire(ctx context.Context, subnet string, al allotv1.SubnetAllocation) (wait bool, err error) {
	poolName := al.Pool
	var pool allotv1.SharedIPPool
	err = s.r.Get(ctx, client.ObjectKey{Name: poolName}, &pool)
	switch {
	case apierrors.IsNotFound(err):
		// Claims of a pool that is gone (made before its finalizer, or forced) still hold
		// their addresses: the allocation stays until the collector frees them.
		held, err := s.claimed(ctx, poolName, policy.Family(al.Family))
		if err != nil {
			return false, err
		}
		if !held.Empty() {
			return true, nil
		}
		return false, s.updateStatus(ctx, subnet, func(sub *allotv1.AllotSubnet) (bool, error) {
			i := allocIndex(sub, poolName)
			if i < 0 {
				return false, nil
			}
			sub.Status.Allocations = slices.Delete(sub.Status.Allocations, i, i+1)
			s.log.Info("subnets: allocation returned", "subnet", subnet, "pool", poolName)
			return true, nil
		})
	case err != nil:
		return false, fmt.Errorf("get SharedIPPool %s: %w", poolName, err)
	case pool.Labels[allotv1.LabelAutoPool] != "true":
		return false, nil
	case pool.DeletionTimestamp != nil:
		return true, nil
	case pool.Annotations[allotv1.AnnotationAutoPoolReclaim] == "false":
		return false, nil
	}
	pre := client.Preconditions{UID: &pool.UID, ResourceVersion: &pool.ResourceVersion}
	if err := s.c.Delete(ctx, &pool, pre); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return true, nil
		}
		return false, fmt.Errorf("delete SharedIPPool %s: %w", poolName, err)
	}
	s.log.Info("subnets: auto pool reclaimed", "pool", poolName, "subnet", subnet)
	return true, nil
}

// updateStatus applies f to the subnet read from the API server, recomputes the counts and
// conditions, and writes the status with that resourceVersion, redoing all of it on a
// conflict: the optimistic concurrency that keeps two cuts from overlapping.
func (s *subnetCtl) updateStatus(ctx context.Context, name string, f func(*allotv1.AllotSubnet) (bool, error)) error {
	for attempt := 0; attempt < subnetWriteAttempts; attempt++ {
		var sub allotv1.AllotSubnet
		if err := s.r.Get(ctx, client.ObjectKey{Name: name}, &sub); err != nil {
			return fmt.Errorf("get AllotSubnet %s: %w", name, err)
		}
		before := sub.Status.DeepCopy()
		if _, err := f(&sub); err != nil {
			return err
		}
		slices.SortFunc(sub.Status.Allocations, func(a, b allotv1.SubnetAllocation) int { return strings.Compare(a.Pool, b.Pool) })
		subnetCounts(&sub)
		if equality.Semantic.DeepEqual(before, &sub.Status) {
			return nil
		}
		err := s.c.Status().Update(ctx, &sub)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("update AllotSubnet %s status: %w", name, err)
		}
		return nil
	}
	return fmt.Errorf("AllotSubnet %s: status kept changing (%d conflicts)", name, subnetWriteAttempts)
}

// subnetCounts writes the per-family totals, the allocated counts and the Ready condition.
func subnetCounts(sub *allotv1.AllotSubnet) {
	sub.Status.ObservedGeneration = sub.Generation
	ready := metav1.Condition{Type: allotv1.ConditionReady, Status: metav1.ConditionTrue, Reason: allotv1.ReasonValid,
		Message: "pools can be cut from this subnet", ObservedGeneration: sub.Generation}
	var problems []string
	for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
		dst := &sub.Status.IPv4
		if fam == policy.IPv6 {
			dst = &sub.Status.IPv6
		}
		if subnetFamily(sub, fam) == nil {
			*dst = nil
			continue
		}
		st := &allotv1.SubnetFamilyStatus{}
		if f, err := resolveSubnet(sub, fam, sharedpool.Reserved{}); err == nil {
			st.TotalIPs = clampInt64(f.Usable.Size())
		} else {
			problems = append(problems, err.Error())
		}
		var n uint64
		for _, al := range sub.Status.Allocations {
			if al.Family != string(fam) {
				continue
			}
			if set, err := addrset.Parse("ips", fam, al.IPs); err == nil {
				n += set.Size()
			}
		}
		st.AllocatedIPs = clampInt64(n)
		*dst = st
	}
	if len(problems) > 0 {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, allotv1.ReasonInvalid, strings.Join(problems, "; ")
	}
	meta.SetStatusCondition(&sub.Status.Conditions, ready)
}

func clampInt64(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}
