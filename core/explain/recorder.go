package explain

import (
	"container/list"
	"sync"

	"github.com/allot-ipam/allot/core/api"
)

// DefaultCapacity is how many pod interfaces a Recorder remembers: a node runs at most a few
// hundred pods (the kubelet's default maxPods is 110), so a few thousand keeps every pod's
// last ADD with room for churn, at a few kilobytes each.
const DefaultCapacity = 4096

// key is one pod interface: the pod (namespace/name) or, outside Kubernetes, the container.
type key struct {
	pod, container, ifName string
}

func keyOf(o api.Owner, p api.PodRef) key {
	if p.Name != "" {
		return key{pod: p.Namespace + "/" + p.Name, ifName: o.IfName}
	}
	return key{container: o.ContainerID, ifName: o.IfName}
}

type record struct {
	k     key
	meta  Meta
	trace *Trace
	err   error
}

// Recorder keeps the last trace of each pod interface, least recently recorded dropped first.
type Recorder struct {
	mu    sync.Mutex
	cap   int
	order *list.List // of *record, most recent first
	byKey map[key]*list.Element
}

// NewRecorder returns a recorder of at most capacity entries (DefaultCapacity if <= 0).
func NewRecorder(capacity int) *Recorder {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Recorder{cap: capacity, order: list.New(), byKey: map[key]*list.Element{}}
}

func (r *Recorder) put(rec *record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.byKey[rec.k]; ok {
		el.Value = rec
		r.order.MoveToFront(el)
		return
	}
	r.byKey[rec.k] = r.order.PushFront(rec)
	for r.order.Len() > r.cap {
		old := r.order.Remove(r.order.Back()).(*record)
		delete(r.byKey, old.k)
	}
}

// find returns the records of the pod (or, without a pod name, the container) narrowed to
// owner's interface when it names one, most recent first.
func (r *Recorder) find(p api.PodRef, o api.Owner) []*record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*record
	for el := r.order.Front(); el != nil; el = el.Next() {
		rec := el.Value.(*record)
		if matches(rec, p, o) {
			out = append(out, rec)
		}
	}
	return out
}

func matches(rec *record, p api.PodRef, o api.Owner) bool {
	m := rec.meta
	if p.Name != "" && (m.Pod.Namespace != p.Namespace || m.Pod.Name != p.Name) {
		return false
	}
	if p.UID != "" && m.Pod.UID != p.UID {
		return false
	}
	if o.ContainerID != "" && m.Owner.ContainerID != o.ContainerID {
		return false
	}
	return o.IfName == "" || m.Owner.IfName == o.IfName
}

// Len is how many interfaces are remembered.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.order.Len()
}
