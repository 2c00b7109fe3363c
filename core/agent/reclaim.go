package agent

import (
	"context"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/ipam"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// Reclaiming addresses of pods that no longer exist.
//
// The runtime normally frees a pod's addresses with CNI DEL. When it does not (the node
// rebooted, allotd was down during the DEL, the runtime lost its state), the agent compares
// the allocations in its store with the pods of its node: an allocation whose pod (same
// namespace, name and UID) is gone is freed. To never free the address of a live pod:
//
//   - it runs only after the pod informer has synced (a pod the cache has not seen yet
//     is not "gone"); an allocation with a pod starts that informer (ondemand.go);
//   - the cache only holds this node's pods, which are the only pods this node's
//     allocations can belong to;
//   - an allocation is freed only after its pod has looked gone for ReclaimGrace, and the
//     allocation is itself older than ReclaimGrace (a pod the runtime is wiring right now may
//     reach the cache late);
//   - the API server itself confirms (a live read: NotFound, or another UID under that
//     name); if it cannot be asked, nothing is freed.
//
// Allocations without a pod UID (not made for a Kubernetes pod) are never touched.

func (a *Agent) kickReclaim() {
	select {
	case a.reclaim <- struct{}{}:
	default:
	}
}

func (a *Agent) reclaimLoop(ctx context.Context) {
	tick := time.NewTicker(a.opts.ReclaimInterval)
	defer tick.Stop()
	var wake *time.Timer
	wakeC := func() <-chan time.Time {
		if wake == nil {
			return nil
		}
		return wake.C
	}
	for {
		next := a.reclaimOnce(ctx)
		if wake != nil {
			wake.Stop()
			wake = nil
		}
		if !next.IsZero() {
			wake = time.NewTimer(max(next.Sub(a.opts.Now()), 0) + 10*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			if wake != nil {
				wake.Stop()
			}
			return
		case <-tick.C:
		case <-a.reclaim:
		case <-wakeC():
		}
	}
}

// reclaimOnce frees the allocations whose pod is gone and returns when to look again for
// allocations still within their grace period (zero: none).
func (a *Agent) reclaimOnce(ctx context.Context) time.Time {
	m := a.m.Load()
	if m == nil || !a.synced.Load() {
		return time.Time{}
	}
	allocs, err := m.Allocations(ctx)
	if err != nil || !a.podsKnown(allocs) {
		return time.Time{}
	}
	now := a.opts.Now()
	var next time.Time
	seen := map[api.Owner]bool{}
	for _, al := range allocs {
		key, gone := a.podGone(ctx, al)
		if !gone {
			continue
		}
		seen[al.Owner] = true
		a.mu.Lock()
		since, ok := a.stale[al.Owner]
		if !ok {
			since = now
			a.stale[al.Owner] = now
		}
		a.mu.Unlock()
		if due := reclaimDue(since, al.Created, a.opts.ReclaimGrace); now.Before(due) {
			if next.IsZero() || due.Before(next) {
				next = due
			}
			continue
		}
		a.reclaimConfirmed(ctx, m, al, key)
	}
	a.mu.Lock()
	for o := range a.stale {
		if !seen[o] {
			delete(a.stale, o)
		}
	}
	a.mu.Unlock()
	return next
}

// podsKnown reports whether the pod informer can tell which pods of allocs are gone: it has
// synced, or no allocation has a pod. An allocation with a pod starts it (ondemand.go), and
// its sync calls the reclaim again.
func (a *Agent) podsKnown(allocs []api.Allocation) bool {
	if a.onDemandSynced() {
		return true
	}
	for _, al := range allocs {
		if al.Pod.Name != "" && al.Pod.UID != "" {
			a.wantPodInformers()
			return false
		}
	}
	return true
}

// podGone tells whether the informer cache knows the pod of al no more (a pod of the same
// name with another UID is another pod); an allocation without a pod is never gone.
func (a *Agent) podGone(ctx context.Context, al api.Allocation) (types.NamespacedName, bool) {
	key := types.NamespacedName{Namespace: al.Pod.Namespace, Name: al.Pod.Name}
	if al.Pod.Name == "" || al.Pod.UID == "" {
		return key, false
	}
	var pod corev1.Pod
	err := a.cache.Get(ctx, key, &pod)
	if err == nil && string(pod.UID) == al.Pod.UID {
		return key, false // alive
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return key, false // the cache cannot say: not gone
	}
	return key, true
}

// reclaimDue is when an allocation created at created, whose pod was first seen gone at
// since, is freed: a grace after both.
func reclaimDue(since, created time.Time, grace time.Duration) time.Time {
	due := since.Add(grace)
	if c := created.Add(grace); c.After(due) {
		due = c
	}
	return due
}

// reclaimConfirmed frees al once the API server confirms its pod (key) is gone.
func (a *Agent) reclaimConfirmed(ctx context.Context, m *ipam.Manager, al api.Allocation, key types.NamespacedName) {
	var pod corev1.Pod
	err := a.liveGet(ctx, key, &pod)
	if err == nil && string(pod.UID) == al.Pod.UID {
		a.mu.Lock()
		delete(a.stale, al.Owner)
		a.mu.Unlock()
		return
	}
	if err != nil && !apierrors.IsNotFound(err) {
		a.log.Debug("reclaim: API server not reachable; nothing freed", "pod", key, "err", err)
		return
	}
	if err := m.Release(ctx, &api.ReleaseRequest{Owner: al.Owner}); err != nil {
		a.log.Warn("reclaim: freeing the addresses of a deleted pod", "owner", al.Owner.String(), "pod", key, "err", err)
		return
	}
	a.metrics.reclaimed.Inc()
	a.log.Info("reclaimed the addresses of a pod that no longer exists", "owner", al.Owner.String(), "pod", key, "uid", al.Pod.UID, "ips", ipsOf(al))
	a.mu.Lock()
	delete(a.stale, al.Owner)
	a.mu.Unlock()
}

func ipsOf(al api.Allocation) []string {
	out := make([]string, len(al.IPs))
	for i, ip := range al.IPs {
		out[i] = ip.Address
	}
	return out
}
