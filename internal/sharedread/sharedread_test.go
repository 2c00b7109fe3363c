package sharedread

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestWindow: within the window a key is read once, found or not; after it, once more; each
// key has its own read; keys past the window are forgotten when a new read begins.
func TestWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &Reads[string, int]{Window: time.Second, Now: func() time.Time { return now }}
	var reads int
	get := func(key string, want, wantReads int) {
		t.Helper()
		v, ok := r.Get(context.Background(), key, func() int { reads++; return reads })
		if !ok || v != want || reads != wantReads {
			t.Fatalf("Get(%s) = %d, %v after %d reads; want %d after %d", key, v, ok, reads, want, wantReads)
		}
	}
	get("a", 1, 1)
	get("b", 2, 2)
	now = now.Add(r.Window / 2)
	get("a", 1, 2)
	now = now.Add(r.Window)
	get("a", 3, 3)
	if n := r.Len(); n != 1 {
		t.Fatalf("keys remembered: %d, want only a (b's read is older than the window)", n)
	}
	r.Reset(time.Hour)
	get("a", 4, 4)
}

// TestShareInFlight: callers that come while a read is in flight wait for it and share its
// result; one whose context ends first gets ok false.
func TestShareInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &Reads[string, int]{Window: time.Second}
		gate := make(chan struct{})
		var reads atomic.Int32
		var wg sync.WaitGroup
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, ok := r.Get(context.Background(), "k", func() int { reads.Add(1); <-gate; return 7 })
				if !ok || v != 7 {
					t.Errorf("Get = %d, %v; want 7, true", v, ok)
				}
			}()
		}
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, ok := r.Get(ctx, "k", func() int { t.Error("a second read"); return 0 }); ok {
			t.Error("Get with an ended context while the read is in flight: ok")
		}
		close(gate)
		wg.Wait()
		if n := reads.Load(); n != 1 {
			t.Fatalf("%d reads, want 1", n)
		}
	})
}
