package operator

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
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

// written records that key's status was just written.
func (b *statusBatch) written(key string) {
	b.mu.Lock()
	b.last[key] = b.now()
	b.mu.Unlock()
}

// eventFunc records an Event about obj (operator.event: notes cut to the API's limit).
type eventFunc func(obj runtime.Object, typ, reason, action, format string, args ...any)
