package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// op is one queued write. The committer sends exactly one value on result.
type op struct {
	key, value []byte
	del        bool
	// bucket is where key lives: nil means the records bucket (the node state is in meta).
	bucket []byte
	result chan error // buffered (1): the committer never blocks on a caller that left
}

// opPool recycles ops with their result channels: one of each per write was a good part
// of a durable allocation's garbage. An op goes back only once its caller has received
// its result, so the committer, which answers an op last, holds no use of it by then.
// Each Store has its own (Store.ops): a channel made inside a testing/synctest bubble
// must not be used outside it, and a process-wide pool handed one test's channels to
// the next.
type opPool struct{ p sync.Pool }

func (p *opPool) get() *op {
	if o, ok := p.p.Get().(*op); ok {
		return o
	}
	return &op{result: make(chan error, 1)}
}

func (p *opPool) put(o *op) { p.p.Put(o) }

// submit enqueues a pooled copy of w and waits until the transaction that carries it
// has committed (or failed), or ctx ends.
func (s *Store) submit(ctx context.Context, w op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := s.ops.get()
	w.result = o.result
	*o = w

	// Hold mu shared while sending so Close cannot close the queue under us.
	// The committer never takes mu, so a full queue drains and this cannot
	// deadlock with Close.
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	if err := s.failure(); err != nil {
		s.mu.RUnlock()
		return err
	}
	select {
	case s.queue <- o:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err() // never queued: certainly not written
	}
	s.mu.RUnlock()

	select {
	case err := <-o.result:
		*o = op{result: o.result}
		s.ops.put(o)
		return err
	case <-ctx.Done():
		// o stays with the committer, which will still answer it: not pooled again.
		// Queued: it may still commit. FIFO order means any later op from
		// this caller is applied after it, so the caller can repair.
		return ctx.Err()
	}
}

// commitLoop is the single writer. It blocks for the first op, then takes
// whatever else is already queued (up to maxBatch): ops that arrive during a
// commit's fsync pile up in the queue and form the next batch, so the batch
// size adapts to load with no added latency when idle.
//
// Under a closed-loop load (N callers, each waiting for its answer before its
// next write, as CNI runtimes and allot-cni are) that alone settles into two
// alternating half-size batches: the callers answered by one commit come back
// while the next is already running. So after a commit the loop expects the
// callers it just answered to return, and waits for them (see gather) before
// committing: one commit then carries all N writes instead of N/2, which
// nearly doubles throughput when fsync dominates. A lone caller never waits:
// its expected batch is itself.
func (s *Store) commitLoop() {
	defer close(s.done)
	defer s.finish()
	batch := make([]*op, 0, s.maxBatch)
	var timer *time.Timer
	tick := time.NewTicker(s.ckptInterval)
	defer tick.Stop()
	expect := 0 // writes expected in the next batch
	for {
		var first *op
		var ok bool
		select {
		case first, ok = <-s.queue:
		case <-tick.C:
			// A quiet store's writes move into the file too, not only a busy one's.
			if !s.ckptBusy.Load() {
				s.freeze()
			}
			continue
		}
		if !ok {
			return
		}
		batch = append(batch[:0], first)
		open := s.drain(&batch)
		if open && len(batch) < expect {
			if timer == nil {
				timer = time.NewTimer(time.Hour)
				timer.Stop()
			}
			open = s.gather(&batch, min(expect, s.maxBatch), timer)
		}
		s.commit(batch)
		// Those just answered, plus those that queued up meanwhile.
		expect = len(batch) + len(s.queue)
		clear(batch) // drop references to values already answered
		if !open {
			return
		}
	}
}

// finish stops the checkpointer once the committer is done and checkpoints the rest.
func (s *Store) finish() {
	close(s.stopping)
	close(s.ckptJobs)
	<-s.ckptExit
	s.flush()
}

// drain appends every op already queued, without waiting. It reports false if
// the queue was closed.
func (s *Store) drain(batch *[]*op) bool {
	for len(*batch) < s.maxBatch {
		select {
		case o, ok := <-s.queue:
			if !ok {
				return false
			}
			*batch = append(*batch, o)
		default:
			return true
		}
	}
	return true
}

// gatherCommits bounds gather's wait, in durations of the last commit.
//
// The callers a commit answered come back only after the CPU has served each of them
// again (answer, next request, manager, store), so on a busy node they take about as
// long as their commit did, or longer: bounded by half a commit, the wait ended before
// most of them were back, and 32 closed-loop callers made commits of 10 to 18. Every
// commit saved is an fdatasync (some 45 µs of CPU with its wake-ups on the development
// machine) and a round of wake-ups shared by more writes: at two commits, 32 callers make
// commits of about 26 and each durable allocation takes some 10% less CPU
// (BenchmarkAPIAllocate). A caller that is expected but does not come back (a burst that
// ended) costs the batch at most two commits' time, once.
const gatherCommits = 2

// gather waits for more ops until the batch reaches target or the group
// delay passes. The delay is bounded by gatherCommits times the last commit's
// duration and by Options.MaxGroupDelay.
func (s *Store) gather(batch *[]*op, target int, timer *time.Timer) bool {
	d := min(gatherCommits*time.Duration(s.stats.lastCommit.Load()), s.maxGroupDelay)
	if d <= 0 {
		return true
	}
	timer.Reset(d)
	defer timer.Stop()
	for len(*batch) < target {
		select {
		case o, ok := <-s.queue:
			if !ok {
				return false
			}
			*batch = append(*batch, o)
		case <-timer.C:
			return true
		}
	}
	return true
}

// commit appends batch to the log as one frame, syncs it and answers every op with the
// same outcome. Only then does the batch enter the overlay that reads see, and the
// checkpoint that moves it into the bbolt file comes later, off this path.
func (s *Store) commit(batch []*op) {
	if err := s.failure(); err != nil {
		answer(batch, err)
		return
	}
	start := time.Now()
	written, err := s.wal.append(batch)
	if err != nil {
		s.stats.errors.Add(1)
		seg := s.walPaths[s.wal.cur]
		if !written {
			// Nothing was synced and nothing answered: the next frame takes the same place
			// and number, so whatever part of this one reached the file is overwritten or,
			// if the process dies first, a torn tail that replay ignores. A full disk or a
			// file system turned read-only fails here, and the store goes on.
			werr := fmt.Errorf("batch of %d ops not written: write to %s: %w", len(batch), seg, diskErr(err))
			s.log.Error("store log write failed; nothing written, later writes will try again", "ops", len(batch), "cause", DiskCause(err), "err", err)
			answer(batch, werr)
			return
		}
		// A failed fsync may have dropped the dirty pages: the frame may or may not be
		// on disk, so memory and disk can no longer be trusted to agree. Stop writing:
		// the daemon restarts and rebuilds its memory from what the disk holds.
		ferr := fmt.Errorf("%w: sync of %d ops to %s: %w", ErrFailed, len(batch), seg, diskErr(err))
		s.setFailure(ferr)
		s.log.Error("store log sync failed; refusing further writes", "ops", len(batch), "err", err)
		answer(batch, fmt.Errorf("outcome unknown: %w", ferr))
		return
	}
	s.applyOverlay(batch)
	s.stats.record(len(batch), time.Since(start))
	answer(batch, nil)
	if s.wal.off >= s.ckptBytes && !s.ckptBusy.Load() {
		s.freeze()
	}
}

// notCommitted reports whether the current meta page (the one bbolt reads, with the
// higher valid transaction ID) still names a transaction older than txid: then the
// failed commit of txid never reached the meta page and nothing of it counts.
func (s *Store) notCommitted(txid int) bool {
	cur := -1
	err := s.db.View(func(tx *bolt.Tx) error {
		cur = tx.ID()
		return nil
	})
	return err == nil && cur >= 0 && cur < txid
}

func answer(batch []*op, err error) {
	for _, o := range batch {
		o.result <- err
	}
}

func (s *Store) failure() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failed
}

func (s *Store) setFailure(err error) {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	if s.failed == nil {
		s.failed = err
	}
}

// Stats is a snapshot of the committer's counters, for metrics.
type Stats struct {
	Batches       uint64        // committed transactions
	Ops           uint64        // operations in committed transactions
	Errors        uint64        // failed transactions
	LastBatchSize int           // operations in the latest committed transaction
	MaxBatchSize  int           // largest committed transaction so far
	LastCommit    time.Duration // latest commit: write + fsync
	TotalCommit   time.Duration // sum over all commits (TotalCommit/Batches is the mean)
	Queued        int           // operations waiting for a transaction now
	// Checkpoints counts the log's checkpoints into the bbolt file, and CheckpointTime
	// their total duration.
	Checkpoints    uint64
	CheckpointTime time.Duration
}

// AvgBatchSize returns Ops/Batches, or 0 before the first commit.
func (st Stats) AvgBatchSize() float64 {
	if st.Batches == 0 {
		return 0
	}
	return float64(st.Ops) / float64(st.Batches)
}

type statsCounters struct {
	batches, ops, errors atomic.Uint64
	lastBatch, maxBatch  atomic.Int64
	lastCommit, total    atomic.Int64 // nanoseconds
	checkpoints          atomic.Uint64
	checkpointTime       atomic.Int64 // nanoseconds
}

func (c *statsCounters) checkpoint(d time.Duration) {
	c.checkpoints.Add(1)
	c.checkpointTime.Add(int64(d))
}

func (c *statsCounters) record(n int, d time.Duration) {
	c.batches.Add(1)
	c.ops.Add(uint64(n))
	c.lastBatch.Store(int64(n))
	if int64(n) > c.maxBatch.Load() { // only the committer writes
		c.maxBatch.Store(int64(n))
	}
	c.lastCommit.Store(int64(d))
	c.total.Add(int64(d))
}

// Stats returns the current counters. Safe to call at any time, also after
// Close.
func (s *Store) Stats() Stats {
	return Stats{
		Batches:        s.stats.batches.Load(),
		Ops:            s.stats.ops.Load(),
		Errors:         s.stats.errors.Load(),
		LastBatchSize:  int(s.stats.lastBatch.Load()),
		MaxBatchSize:   int(s.stats.maxBatch.Load()),
		LastCommit:     time.Duration(s.stats.lastCommit.Load()),
		TotalCommit:    time.Duration(s.stats.total.Load()),
		Queued:         len(s.queue),
		Checkpoints:    s.stats.checkpoints.Load(),
		CheckpointTime: time.Duration(s.stats.checkpointTime.Load()),
	}
}
