// Package sharedread shares one read of a key among every caller that needs it within a
// window: callers that come while the read is in flight wait for it, and callers that come
// after it, until the window has passed since it began, take its result without reading
// again. It bounds what a miss costs the API server (the agent's and the operator's live
// reads of IPPools their informers have not delivered) to one read per key per window,
// found or not (a negative cache), however many callers miss.
package sharedread

import (
	"context"
	"sync"
	"time"
)

// Reads is the last read of each key. The zero value is not usable: set Window.
type Reads[K comparable, V any] struct {
	// Window is how long a read answers later callers, from when it began.
	Window time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu   sync.Mutex
	last map[K]*read[V]
}

type read[V any] struct {
	start time.Time
	done  chan struct{}
	v     V
}

// Get returns the result of key's read begun less than Window ago, waiting for it if it is
// in flight, or runs read itself (on this goroutine) and shares its result. ok is false
// when ctx ended before the result was there.
func (r *Reads[K, V]) Get(ctx context.Context, key K, read func() V) (v V, ok bool) {
	now := r.now()
	r.mu.Lock()
	cur := r.last[key]
	mine := cur == nil || now.Sub(cur.start) >= r.Window
	if mine {
		r.forgetOld(now)
		cur = newRead[V](now)
		r.last[key] = cur
	}
	r.mu.Unlock()
	if mine {
		cur.v = read()
		close(cur.done)
	}
	select {
	case <-cur.done:
		return cur.v, true
	case <-ctx.Done():
		return v, false
	}
}

func newRead[V any](start time.Time) *read[V] {
	return &read[V]{start: start, done: make(chan struct{})}
}

// forgetOld drops the reads older than the window (keys no longer asked for); r.mu is held.
func (r *Reads[K, V]) forgetOld(now time.Time) {
	if r.last == nil {
		r.last = map[K]*read[V]{}
	}
	for k, old := range r.last {
		if now.Sub(old.start) >= r.Window {
			delete(r.last, k)
		}
	}
}

// Reset forgets every read and answers later callers for window from then on.
func (r *Reads[K, V]) Reset(window time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last, r.Window = nil, window
}

// Len is the number of keys whose last read is remembered.
func (r *Reads[K, V]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.last)
}

func (r *Reads[K, V]) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
