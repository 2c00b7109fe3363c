package operator

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// dirtySet collects object names to re-queue, and sends them to a controller after delay (so
// a burst of allocations costs one pool status write, not one per block).
type dirtySet struct {
	delay time.Duration
	mu    sync.Mutex
	names map[string]struct{}
	kick  chan struct{}
	out   chan event.TypedGenericEvent[string]
}

func newDirtySet(delay time.Duration) *dirtySet {
	return &dirtySet{
		delay: delay,
		names: map[string]struct{}{},
		kick:  make(chan struct{}, 1),
		out:   make(chan event.TypedGenericEvent[string], 1024),
	}
}

func (d *dirtySet) add(names ...string) {
	if len(names) == 0 {
		return
	}
	d.mu.Lock()
	for _, n := range names {
		d.names[n] = struct{}{}
	}
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *dirtySet) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.kick:
		}
		if d.delay > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(d.delay):
			}
		}
		d.mu.Lock()
		names := make([]string, 0, len(d.names))
		for n := range d.names {
			names = append(names, n)
		}
		clear(d.names)
		d.mu.Unlock()
		slices.Sort(names)
		for _, n := range names {
			select {
			case d.out <- event.TypedGenericEvent[string]{Object: n}:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// source feeds the names to a controller as reconcile requests.
func (d *dirtySet) source() source.Source {
	return source.TypedChannel[string, reconcile.Request](d.out, handler.TypedFuncs[string, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[string], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(reconcile.Request{NamespacedName: nameKey(e.Object)})
		},
	})
}

func nameKey(name string) types.NamespacedName { return types.NamespacedName{Name: name} }
