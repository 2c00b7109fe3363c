package agent

import (
	"context"
	"time"
)

// loop runs a sync function after every burst of triggers. The first trigger of a burst
// starts a short wait (the debounce) so that one call covers every change of the burst: a
// storm of CNI ADDs costs a few writes of the node object, not one per ADD. A failed call is
// retried after a backoff doubling from minBackoff to maxBackoff; the function may also ask
// to be called again at a given time (a block due for release); resync calls it regularly
// even without a trigger.
type loop struct {
	trigger    chan struct{}
	debounce   time.Duration
	minBackoff time.Duration
	maxBackoff time.Duration
	resync     time.Duration
}

func newLoop(debounce, resync time.Duration) *loop {
	return &loop{
		trigger:    make(chan struct{}, 1),
		debounce:   debounce,
		minBackoff: 100 * time.Millisecond,
		maxBackoff: 10 * time.Second,
		resync:     resync,
	}
}

// Trigger asks for a call soon. It never blocks.
func (l *loop) Trigger() {
	select {
	case l.trigger <- struct{}{}:
	default:
	}
}

// run calls fn until ctx ends. fn returns the time it wants to be called again at (zero:
// no wish) and its error.
func (l *loop) run(ctx context.Context, fn func(context.Context) (time.Time, error)) {
	wake := time.NewTimer(0) // a first call at once
	defer wake.Stop()
	resync := l.resync
	if resync <= 0 {
		resync = time.Hour
	}
	tick := time.NewTicker(resync)
	defer tick.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.trigger:
		case <-wake.C:
		case <-tick.C:
		}
		if l.debounce > 0 {
			t := time.NewTimer(l.debounce)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		// Triggers that arrived during the wait are covered by this call.
		select {
		case <-l.trigger:
		default:
		}
		next, err := fn(ctx)
		if ctx.Err() != nil {
			return
		}
		var in time.Duration
		switch {
		case err != nil:
			backoff = min(max(backoff*2, l.minBackoff), l.maxBackoff)
			in = backoff
		case !next.IsZero():
			backoff = 0
			in = max(time.Until(next), 0)
		default:
			backoff = 0
			in = -1
		}
		wake.Stop()
		select { // drain a fire that raced with Stop
		case <-wake.C:
		default:
		}
		if in >= 0 {
			wake.Reset(in)
		}
	}
}
