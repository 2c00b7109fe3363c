package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// dsFollower keeps, while the agent runs, what its DaemonSet looks like, so that the stop
// decision of cni.uninstall auto needs no read at stop time. It has to: `helm uninstall`
// deletes the agent's ServiceAccount, Role and bindings right after the DaemonSet, before
// the kubelet stops the agent, so every request made at stop is refused; a watch opened
// earlier keeps delivering events (the API server authorizes a watch when it starts).
type dsFollower struct {
	mu sync.Mutex
	// name and uid are the agent's Pod's controller, learnt at start.
	name string
	uid  types.UID
	// synced: the watch has listed once; seen: the DaemonSet was in a list or an event.
	synced, seen bool
	// deleted: a delete event; deleting: a deletion timestamp; other: another UID.
	deleted, deleting bool
	other             types.UID
	// changed is closed, and replaced, at every change.
	changed chan struct{}
}

func newDSFollower() *dsFollower { return &dsFollower{changed: make(chan struct{})} }

// owner records the DaemonSet the agent's Pod belongs to.
func (f *dsFollower) owner(name string, uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.name, f.uid = name, uid
	f.notify()
}

func (f *dsFollower) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// observe takes a DaemonSet from the watch (added or updated).
func (f *dsFollower) observe(obj any) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = true
	f.deleting = m.DeletionTimestamp != nil
	if m.UID != f.uid {
		f.other = m.UID
	} else {
		f.other = ""
	}
	f.notify()
}

// gone takes a delete from the watch (an event, or the object missing from a relist).
func (f *dsFollower) gone(any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = true
	f.notify()
}

// listed marks the first list done: a DaemonSet missing from it is gone.
func (f *dsFollower) listed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.synced = true
	f.notify()
}

// verdict says whether the watch has established that the DaemonSet is gone, with why; false
// means "not established" (present, or not known yet), never "keep" for sure.
func (f *dsFollower) verdict() (bool, string, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.name == "":
	case f.deleted:
		return true, fmt.Sprintf("DaemonSet %s was deleted (seen by the agent's watch)", f.name), f.changed
	case f.other != "":
		return true, fmt.Sprintf("DaemonSet %s was deleted and created again (UID %s, the Pod's is %s; seen by the agent's watch)", f.name, f.other, f.uid), f.changed
	case f.deleting:
		return true, fmt.Sprintf("DaemonSet %s is being deleted (seen by the agent's watch)", f.name), f.changed
	case f.synced && !f.seen:
		return true, fmt.Sprintf("DaemonSet %s does not exist (the agent's watch found none)", f.name), f.changed
	}
	return false, "", f.changed
}

// wait waits up to d for the watch to establish that the DaemonSet is gone.
func (f *dsFollower) wait(ctx context.Context, d time.Duration) (bool, string) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		gone, why, changed := f.verdict()
		if gone {
			return true, why
		}
		select {
		case <-changed:
		case <-timer.C:
			return false, ""
		case <-ctx.Done():
			return false, ""
		}
	}
}

// follow learns the agent's DaemonSet from its Pod (retrying while the API server does not
// answer) and watches it until ctx ends. Nothing here is fatal: without it the stop decision
// falls back to reads at stop time.
func (f *dsFollower) follow(ctx context.Context, r ownerReader, mc metadata.Interface, namespace, pod string, log *slog.Logger) {
	var ds metav1.OwnerReference
	for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
		p, err := r.Pod(ctx, namespace, pod)
		if err == nil {
			ref := metav1.GetControllerOfNoCopy(p)
			if gv, _ := schema.ParseGroupVersion(refAPIVersion(ref)); ref == nil || ref.Kind != "DaemonSet" || gv.Group != "apps" {
				log.Warn("cni.uninstall auto: the agent's Pod is not controlled by a DaemonSet; it will keep the network configuration at every stop", "pod", namespace+"/"+pod)
				return
			}
			ds = *ref
			break
		}
		log.Warn("cni.uninstall auto: reading the agent's own Pod", "pod", namespace+"/"+pod, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
	f.owner(ds.Name, ds.UID)
	inf := metadatainformer.NewFilteredMetadataInformer(mc, daemonSetsResource, namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) {
			// The chart's Role names the DaemonSet (resourceNames): a list or watch is
			// authorized only with this field selector.
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ds.Name).String()
		}).Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    f.observe,
		UpdateFunc: func(_, n any) { f.observe(n) },
		DeleteFunc: f.gone,
	})
	if err != nil {
		log.Warn("cni.uninstall auto: watching the agent's DaemonSet", "err", err)
		return
	}
	go func() {
		// The handler's own sync (not the informer's): "absent" must mean the first list's
		// objects have reached observe.
		if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			f.listed()
			log.Debug("cni.uninstall auto: following the agent's DaemonSet", "daemonset", namespace+"/"+ds.Name)
		}
	}()
	inf.Run(ctx.Done())
}

func refAPIVersion(ref *metav1.OwnerReference) string {
	if ref == nil {
		return ""
	}
	return ref.APIVersion
}
