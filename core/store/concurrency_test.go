package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestConcurrentPutsAndDeletes runs 64 goroutines × 200 operations against a
// durable store and checks the final state and that group commit batched.
func TestConcurrentPutsAndDeletes(t *testing.T) {
	const workers, perWorker = 64, 200
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "allot.db")
	// Real fsync: that is what makes batches form.
	s := openTest(t, path, Options{})

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				// Each worker puts its owners and deletes every third
				// one right after, so both kinds of op interleave.
				r := testRecord(fmt.Sprintf("w%02d-%03d", w, i), "eth0", w*perWorker+i)
				if err := s.Put(ctx, r); err != nil {
					errs <- err
					return
				}
				if i%3 == 0 {
					if err := s.Delete(ctx, r.Owner); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	// A reader runs alongside the writer (paced: a List decodes every
	// record, and a busy loop of them would only starve the writers' CPU).
	stop := make(chan struct{})
	var rg sync.WaitGroup
	rg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := s.List(ctx); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(stop)
	rg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := workers * (perWorker - (perWorker+2)/3)
	if len(list) != want {
		t.Fatalf("List has %d records, want %d", len(list), want)
	}
	for i := 1; i < len(list); i++ {
		if list[i-1].Owner.Compare(list[i].Owner) >= 0 {
			t.Fatalf("List not sorted at %d: %s >= %s", i, list[i-1].Owner, list[i].Owner)
		}
	}
	st := s.Stats()
	totalOps := uint64(workers * (perWorker + (perWorker+2)/3))
	if st.Ops != totalOps {
		t.Fatalf("Stats.Ops = %d, want %d", st.Ops, totalOps)
	}
	t.Logf("batches %d, ops %d, avg batch %.1f, max batch %d, mean commit %s",
		st.Batches, st.Ops, st.AvgBatchSize(), st.MaxBatchSize, meanCommit(st))
	if st.AvgBatchSize() <= 1 {
		t.Fatalf("average batch size %.2f: group commit did not batch", st.AvgBatchSize())
	}
}

func meanCommit(st Stats) time.Duration {
	if st.Batches == 0 {
		return 0
	}
	return st.TotalCommit / time.Duration(st.Batches)
}

// TestFIFODurability: Put(A) then Delete(A) by the same goroutine leaves
// nothing after reopen, also when the Put's wait was abandoned (ctx) and the
// two ops might share a batch.
func TestFIFODurability(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "allot.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := testRecord(fmt.Sprintf("fifo-%03d", i), "eth0", i)
			// Put without waiting for it (cancelled while queued or
			// committing), then Delete: FIFO must apply the Delete last.
			pctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.Put(pctx, r) }()
			if i%2 == 0 {
				cancel()
			}
			perr := <-done
			cancel()
			if perr != nil && !isCanceled(perr) {
				t.Errorf("Put: %v", perr)
			}
			if err := s.Delete(ctx, r.Owner); err != nil {
				t.Errorf("Delete: %v", err)
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, path, Options{})
	list, err := s2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("after Put+Delete and reopen, %d records remain (first %s)", len(list), list[0].Owner)
	}
}

func isCanceled(err error) bool { return errors.Is(err, context.Canceled) }
