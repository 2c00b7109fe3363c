package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
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

// The loop's tests run under testing/synctest: its debounce, backoff and wake timers run on
// the bubble's simulated clock, so the gaps are exact and a second of waiting is instant.
// sleep (in the bubble) advances that clock; synctest.Wait lets the loop settle first.

func TestLoopDebouncesBursts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLoop(50*time.Millisecond, time.Hour)
		var c calls
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go l.run(ctx, func(context.Context) (time.Time, error) { c.add(); return time.Time{}, nil })
		sleep(60 * time.Millisecond)
		if n := c.n(); n != 1 {
			t.Fatalf("%d calls after the first debounce, want 1", n)
		}
		// A burst of 1000 triggers within the debounce window: one call, not 1000.
		for range 1000 {
			l.Trigger()
		}
		sleep(60 * time.Millisecond)
		if n := c.n(); n != 2 {
			t.Fatalf("%d calls after one burst, want 2", n)
		}
		// Nothing more without a trigger.
		sleep(time.Minute)
		if n := c.n(); n != 2 {
			t.Fatalf("called without a trigger: %d calls", n)
		}
	})
}

func TestLoopRetriesWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
		sleep(time.Minute)
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.times) != 6 {
			t.Fatalf("called %d times, want 6 (5 failures, then success and no more)", len(c.times))
		}
		// Backoff doubles up to its bound: 5, 10, 20, 40, 40 ms.
		for i, want := range []time.Duration{5, 10, 20, 40, 40} {
			if gap := c.times[i+1].Sub(c.times[i]); gap != want*time.Millisecond {
				t.Fatalf("gap %d = %v, want %v", i, gap, want*time.Millisecond)
			}
		}
	})
}

func TestLoopCallsAgainAtRequestedTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
		sleep(time.Minute)
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.times) != 2 || c.times[1].Sub(start) != 60*time.Millisecond {
			t.Fatalf("called at %v, want at start and 60ms later", c.times)
		}
	})
}

func TestLoopStopsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLoop(time.Millisecond, time.Hour)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { l.run(ctx, func(context.Context) (time.Time, error) { return time.Time{}, nil }); close(done) }()
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("loop did not stop")
		}
	})
}

// sleep advances a synctest bubble's clock by d once every goroutine in it has settled.
func sleep(d time.Duration) {
	synctest.Wait()
	time.Sleep(d) // sleep: in a synctest bubble: simulated time, instant
	synctest.Wait()
}

// An IPPool update wakes the node loop only when it changes what the agent reads: the
// operator's status (counter) writes reach every node and must not cost each a sync.
func TestPoolChanged(t *testing.T) {
	base := &v1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 3}}
	status := base.DeepCopy()
	status.Status.IPv4 = &v1alpha1.PoolFamilyStatus{AllocatedBlocks: 7}
	spec := base.DeepCopy()
	spec.Generation = 4
	now := metav1.Now()
	deleting := base.DeepCopy()
	deleting.DeletionTimestamp = &now
	for _, c := range []struct {
		name string
		cur  *v1alpha1.IPPool
		want bool
	}{{"status only", status, false}, {"spec", spec, true}, {"deleting", deleting, true}} {
		if got := poolChanged(base, c.cur); got != c.want {
			t.Errorf("%s: poolChanged = %v, want %v", c.name, got, c.want)
		}
	}
	if !poolChanged(toolscache.DeletedFinalStateUnknown{}, base) {
		t.Error("an update of an unexpected type must wake the loop")
	}
}
