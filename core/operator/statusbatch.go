package operator

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// statusBatch spaces counters-only status writes: at most one per key (kind/name) per delay,
// so a burst of allocations costs one status write, not one per block or claim. Conditions
// are written at once; callers decide which writes are urgent.
type statusBatch struct {
	delay time.Duration
	now   func() time.Time

	mu   sync.Mutex
	last map[string]time.Time
}

func newStatusBatch(delay time.Duration) *statusBatch {
	return &statusBatch{delay: delay, now: time.Now, last: map[string]time.Time{}}
}

// wait is how long a counters-only status write of key must still wait (<= 0: none).
func (b *statusBatch) wait(key string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.delay - b.now().Sub(b.last[key])
}

// waitAtLeast is wait with the batch's delay raised to d (when longer).
func (b *statusBatch) waitAtLeast(key string, d time.Duration) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(b.delay, d) - b.now().Sub(b.last[key])
}

// written records that key's status was just written.
func (b *statusBatch) written(key string) {
	b.mu.Lock()
	b.last[key] = b.now()
	b.mu.Unlock()
}

// eventFunc records an Event about obj (operator.event: notes cut to the API's limit).
type eventFunc func(obj runtime.Object, typ, reason, action, format string, args ...any)

// writeStatus writes upd's status. A conflict or a deleted object is a race the reconcile
// lost, not a failure: retry asks for another run after conflictRetry.
func writeStatus(ctx context.Context, c client.Client, upd client.Object, what string) (retry bool, err error) {
	if err := c.Status().Update(ctx, upd); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("update %s status: %w", what, err)
	}
	return false, nil
}

// retryAfter is the requeue delay of a status write that lost a race (none otherwise).
func retryAfter(retry bool) time.Duration {
	if retry {
		return conflictRetry
	}
	return 0
}

// emitEvents records the Events of a written status, counting the refusals among them.
func emitEvents(m *metrics, event eventFunc, obj runtime.Object, events []pendingEvent) {
	for _, ev := range events {
		if ev.refusal != "" {
			m.refusals.WithLabelValues(ev.refusal).Inc()
		}
		event(obj, corev1.EventTypeWarning, ev.reason, ev.action, "%s", ev.note)
	}
}
