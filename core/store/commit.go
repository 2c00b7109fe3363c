package store

import (
	"context"
	"fmt"
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

// submit enqueues o and waits until the transaction that carries it has
// committed (or failed), or ctx ends.
func (s *Store) submit(ctx context.Context, o *op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o.result = make(chan error, 1)

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
		return err
	case <-ctx.Done():
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
	batch := make([]*op, 0, s.maxBatch)
	var timer *time.Timer
	expect := 0 // writes expected in the next batch
	for {
		first, ok := <-s.queue
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

// gather waits for more ops until the batch reaches target or the group
// delay passes. The delay is bounded by half the last commit's duration (and
// by Options.MaxGroupDelay), so waiting can never cost more than it can save.
func (s *Store) gather(batch *[]*op, target int, timer *time.Timer) bool {
	d := min(time.Duration(s.stats.lastCommit.Load())/2, s.maxGroupDelay)
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

// commit applies batch in order in one bbolt transaction and answers every op
// with the same outcome: bbolt transactions are atomic, so either all ops of
// the batch are on disk or none is (for errors before Commit); see below for
// errors from Commit itself.
func (s *Store) commit(batch []*op) {
	if err := s.failure(); err != nil {
		answer(batch, err)
		return
	}
	start := time.Now()
	tx, err := s.begin(batch)
	if err != nil {
		answer(batch, err)
		return
	}
	txid := tx.ID()
	if err := s.commitTx(tx); err != nil {
		s.stats.errors.Add(1)
		if s.notCommitted(txid) {
			// bbolt writes the batch's pages into free space, syncs, and only then
			// writes the meta page that makes them part of the file. The meta page
			// still names an older transaction, so nothing of this batch is in
			// the database and the pages it wrote are free again: a clean failure,
			// as from a full disk or a file system turned read-only. The store goes
			// on, and the next batch succeeds once space (or write access) returns.
			werr := fmt.Errorf("batch of %d ops not written: commit to %s: %w", len(batch), s.path, diskErr(err))
			s.log.Error("store commit failed before its meta page; nothing written, later writes will try again", "ops", len(batch), "cause", DiskCause(err), "err", err)
			answer(batch, werr)
			return
		}
		// A failed Commit after the meta page was written (its fsync failed) may
		// have left the batch on disk, or not, and Linux may have dropped the dirty
		// pages after a failed fsync. Memory and disk can no longer be trusted
		// to agree, so stop writing: the daemon restarts and rebuilds its
		// memory from what is actually on disk.
		ferr := fmt.Errorf("%w: commit of %d ops to %s: %w", ErrFailed, len(batch), s.path, diskErr(err))
		s.setFailure(ferr)
		s.log.Error("store commit failed; refusing further writes", "ops", len(batch), "err", err)
		answer(batch, fmt.Errorf("outcome unknown: %w", ferr))
		return
	}
	s.stats.record(len(batch), time.Since(start))
	answer(batch, nil)
}

// begin opens a write transaction and applies the batch in arrival order. On
// error the transaction is rolled back (nothing written) and the error is
// wrapped for the callers.
func (s *Store) begin(batch []*op) (*bolt.Tx, error) {
	tx, err := s.db.Begin(true)
	if err != nil {
		s.stats.errors.Add(1)
		return nil, fmt.Errorf("batch of %d ops not written: begin transaction: %w", len(batch), err)
	}
	fail := func(err error) (*bolt.Tx, error) {
		_ = tx.Rollback()
		s.stats.errors.Add(1)
		s.log.Error("store batch failed before commit", "ops", len(batch), "err", err)
		return nil, fmt.Errorf("batch of %d ops not written: %w", len(batch), err)
	}
	records := tx.Bucket(recordsBucket)
	for _, o := range batch {
		b := records
		if o.bucket != nil {
			b = tx.Bucket(o.bucket)
		}
		if o.del {
			err = b.Delete(o.key)
		} else {
			err = b.Put(o.key, o.value)
		}
		if err != nil {
			return fail(fmt.Errorf("key %q: %w", keyName(o.key), err))
		}
	}
	if s.beforeCommit != nil {
		if err := s.beforeCommit(tx); err != nil {
			return fail(err)
		}
	}
	return tx, nil
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
		Batches:       s.stats.batches.Load(),
		Ops:           s.stats.ops.Load(),
		Errors:        s.stats.errors.Load(),
		LastBatchSize: int(s.stats.lastBatch.Load()),
		MaxBatchSize:  int(s.stats.maxBatch.Load()),
		LastCommit:    time.Duration(s.stats.lastCommit.Load()),
		TotalCommit:   time.Duration(s.stats.total.Load()),
		Queued:        len(s.queue),
	}
}
