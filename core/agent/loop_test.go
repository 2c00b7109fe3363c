package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// calls records the times fn was called.
type calls struct {
	mu    sync.Mutex
	times []time.Time
}

func (c *calls) add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.times = append(c.times, time.Now())
	return len(c.times)
}

func (c *calls) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.times)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLoopDebouncesBursts(t *testing.T) {
	l := newLoop(50*time.Millisecond, time.Hour)
	var c calls
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.run(ctx, func(context.Context) (time.Time, error) { c.add(); return time.Time{}, nil })
	waitFor(t, "the first call", func() bool { return c.n() == 1 })
	// A burst of 1000 triggers within the debounce window: one or two calls, not 1000.
	for range 1000 {
		l.Trigger()
	}
	waitFor(t, "the burst's call", func() bool { return c.n() >= 2 })
	time.Sleep(200 * time.Millisecond)
	if n := c.n(); n > 3 {
		t.Fatalf("%d calls for one burst", n)
	}
	// Nothing more without a trigger.
	before := c.n()
	time.Sleep(150 * time.Millisecond)
	if c.n() != before {
		t.Fatal("called without a trigger")
	}
}

func TestLoopRetriesWithBackoff(t *testing.T) {
	l := newLoop(0, time.Hour)
	l.minBackoff, l.maxBackoff = 5*time.Millisecond, 40*time.Millisecond
	var c calls
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.run(ctx, func(context.Context) (time.Time, error) {
		if c.add() < 6 {
			return time.Time{}, errors.New("api server down")
		}
		return time.Time{}, nil
	})
	waitFor(t, "recovery", func() bool { return c.n() >= 6 })
	c.mu.Lock()
	gaps := make([]time.Duration, 0, 5)
	for i := 1; i < len(c.times); i++ {
		gaps = append(gaps, c.times[i].Sub(c.times[i-1]))
	}
	c.mu.Unlock()
	// Backoff doubles: 5, 10, 20, 40, 40 ms (at least; timers may fire late).
	for i, min := range []time.Duration{5, 10, 20, 40, 40} {
		if gaps[i] < min*time.Millisecond {
			t.Fatalf("gap %d = %v, want >= %v (gaps %v)", i, gaps[i], min*time.Millisecond, gaps)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if n := c.n(); n != 6 {
		t.Fatalf("called %d times after success, want 6", n)
	}
}

func TestLoopCallsAgainAtRequestedTime(t *testing.T) {
	l := newLoop(0, time.Hour)
	var c calls
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	go l.run(ctx, func(context.Context) (time.Time, error) {
		if c.add() == 1 {
			return start.Add(60 * time.Millisecond), nil
		}
		return time.Time{}, nil
	})
	waitFor(t, "the second call", func() bool { return c.n() == 2 })
	if d := time.Since(start); d < 60*time.Millisecond {
		t.Fatalf("called again after %v, want >= 60ms", d)
	}
}

func TestLoopStopsWithContext(t *testing.T) {
	l := newLoop(time.Millisecond, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx, func(context.Context) (time.Time, error) { return time.Time{}, nil }); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("loop did not stop")
	}
}
