package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// On-demand informers.
//
// The informers of the node's pods, of the namespaces and of the Node serve two things only:
// the pod context of a CNI ADD (PodContext: the pod's and namespace's annotations and labels,
// the Node's labels) and the reclaim of addresses whose pod is gone (reclaim.go). A node
// that has served no ADD and holds no allocation needs neither, so the agent starts them
// with its first ADD, or when it finds an allocation with a pod in its store (a restart),
// instead of at start. Each is a watch the API server keeps open per node; in a cluster
// that boots, thousands of nodes open them at once while they wait for their first blocks,
// and a node that never runs a pod (control-plane nodes, nodes kept for host-network
// workloads) never opens them. Until they have synced, the readers fall back to a live read
// as they do before the agent's first sync (PodContext) or do nothing (reclaim: a pod the
// cache has not seen is not gone).
//
// In kubernetes mode (PodCIDRs) the Node informer carries the node's blocks and starts with
// the agent.

// errOnDemandNotSynced: the on-demand informers have not synced (or not started) yet.
var errOnDemandNotSynced = errors.New("pod informers not synced yet")

// onDemand is the state of the on-demand informers.
type onDemand struct {
	once   sync.Once
	synced atomic.Bool
	// running is closed by Run once the cache may start informers; ctx is Run's.
	running chan struct{}
	ctx     context.Context
}

// isOnDemand reports whether obj's informer starts on demand.
func (a *Agent) isOnDemand(obj client.Object) bool {
	switch obj.(type) {
	case *corev1.Pod, *corev1.Namespace:
		return true
	case *corev1.Node:
		return a.opts.PodCIDRs == nil
	}
	return false
}

// onDemandKinds are the kinds whose informers start on demand.
func (a *Agent) onDemandKinds() []client.Object {
	var out []client.Object
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.Namespace{}, &corev1.Node{}} {
		if a.isOnDemand(obj) {
			out = append(out, obj)
		}
	}
	return out
}

// wantPodInformers starts the on-demand informers, once; it does not wait for them.
func (a *Agent) wantPodInformers() {
	a.onDemand.once.Do(func() { go a.startOnDemand() })
}

// startOnDemand starts the on-demand informers once Run has started, marks them synced once
// they are, and then looks for addresses to reclaim.
func (a *Agent) startOnDemand() {
	<-a.onDemand.running
	ctx := a.onDemand.ctx
	var synced []toolscache.InformerSynced
	for _, obj := range a.onDemandKinds() {
		inf, err := a.cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			a.log.Error("starting an informer", "kind", fmt.Sprintf("%T", obj), "err", err)
			return
		}
		if h, ok := a.handlerFor(obj); ok {
			if _, err := inf.AddEventHandler(h); err != nil {
				a.log.Error("adding an event handler", "kind", fmt.Sprintf("%T", obj), "err", err)
				return
			}
		}
		synced = append(synced, inf.HasSynced)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	a.onDemand.synced.Store(true)
	a.log.Debug("pod, namespace and Node informers synced", "node", a.opts.NodeName)
	a.kickReclaim()
}

// onDemandSynced reports whether the on-demand informers have synced.
func (a *Agent) onDemandSynced() bool { return a.onDemand.synced.Load() }
