package store

import (
	"fmt"
	"time"
)

// walPipeline is how many frames may be written and not yet synced at once. While one
// frame's fdatasync runs, the committer writes the next batch as a frame of its own and
// starts its fdatasync (staggered, see stagger), so a write waits for about one
// fdatasync rather than for the rest of the one in flight and then its own; on ext4 two
// concurrent fdatasyncs of one file took about as long as one alone. Answers go out in
// frame order, each once its own fdatasync and every earlier frame's have returned.
//
// Replay depends on the bound: a frame is written only once the frame walPipeline
// before it is synced, so an intact frame more than walPipeline past a missing one
// proves the missing one was synced, and the log is damaged (chainFrames).
const walPipeline = 2

// flight is a frame written to the log whose fdatasync is running.
type flight struct {
	batch []*op
	start time.Time
	done  chan error // the fdatasync's outcome
}

// commitLoop is the single writer. It blocks for the first op, then takes whatever
// else is already queued (up to maxBatch) and writes it as one frame; ops that arrive
// while frames are being synced pile up in the queue and form the next frame, so the
// batch size adapts to load with no added latency when idle. Up to walPipeline frames
// are synced at once (above).
//
// Under a closed-loop load (N callers, each waiting for its answer before its next
// write, as CNI runtimes and allot-cni are), when no frame is in flight, the loop
// expects the callers it just answered to return and waits for them (see gather)
// before writing, so one frame carries them all. A lone caller never waits: its
// expected batch is itself.
func (s *Store) commitLoop() {
	defer close(s.done)
	defer s.finish()
	c := committer{s: s, expectTimer: time.NewTimer(time.Hour)}
	c.expectTimer.Stop()
	c.staggerTimer = time.NewTimer(time.Hour)
	c.staggerTimer.Stop()
	tick := time.NewTicker(s.ckptInterval)
	defer tick.Stop()
	for c.step(tick.C) {
	}
	for len(c.flights) > 0 {
		c.land(<-c.flights[0].done)
	}
}

// committer is commitLoop's state.
type committer struct {
	s       *Store
	flights []*flight // in frame order
	spare   [][]*op   // batches answered, for reuse
	expect  int       // writes expected in the next batch
	// freezing holds back new frames until those in flight are answered, so that a
	// checkpoint can switch segments (freeze needs every written frame in the overlay).
	freezing     bool
	expectTimer  *time.Timer
	staggerTimer *time.Timer
}

// step waits for the next event: a frame's sync returning, an op to write (when a
// frame may be written), or the checkpoint tick. It reports false once the queue is
// closed.
func (c *committer) step(tick <-chan time.Time) bool {
	var synced <-chan error
	if len(c.flights) > 0 {
		synced = c.flights[0].done
	}
	var queue <-chan *op
	var staggered <-chan time.Time
	if len(c.flights) < walPipeline && !c.freezing {
		if wait := c.stagger(); wait > 0 {
			c.staggerTimer.Reset(wait)
			staggered = c.staggerTimer.C
		} else {
			queue = c.s.queue
		}
	}
	select {
	case <-staggered:
	case err := <-synced:
		c.land(err)
	case first, ok := <-queue:
		if !ok {
			return false
		}
		return c.launch(first)
	case <-tick:
		// A quiet store's writes move into the file too, not only a busy one's.
		c.freezing = !c.s.ckptBusy.Load()
	}
	c.staggerTimer.Stop()
	c.maybeFreeze()
	return true
}

// stagger returns how long to wait before writing the next frame while others are in
// flight: until the newest has run half the last commit's duration. Syncs then start
// half a commit apart, each carrying the writes of half a commit, instead of a frame of
// the first write to come back trailing each full one (twice the fdatasyncs, each with
// its CPU cost, for no shorter wait).
func (c *committer) stagger() time.Duration {
	if len(c.flights) == 0 {
		return 0
	}
	half := time.Duration(c.s.stats.lastCommit.Load()) / 2
	return half - time.Since(c.flights[len(c.flights)-1].start)
}

// launch writes first and whatever else is queued as one frame and starts its sync. It
// reports false if the queue was closed.
func (c *committer) launch(first *op) bool {
	s := c.s
	batch := c.batch()
	batch = append(batch, first)
	open := s.drain(&batch)
	if open && len(c.flights) == 0 && len(batch) < c.expect {
		open = s.gather(&batch, min(c.expect, s.maxBatch), c.expectTimer)
	}
	if err := s.failure(); err != nil {
		answer(batch, err)
		return open
	}
	start := time.Now()
	if err := s.wal.write(batch); err != nil {
		s.writeFailed(batch, err)
		return open
	}
	f := &flight{batch: batch, start: start, done: make(chan error, 1)}
	c.flights = append(c.flights, f)
	if s.wal.noSync {
		f.done <- nil
	} else {
		seg := s.wal.cur
		go func() { f.done <- s.wal.io.Sync(seg) }()
	}
	return open
}

// batch returns an empty batch to fill, reusing one already answered.
func (c *committer) batch() []*op {
	if n := len(c.spare); n > 0 {
		b := c.spare[n-1]
		c.spare = c.spare[:n-1]
		return b
	}
	return make([]*op, 0, c.s.maxBatch)
}

// land answers the oldest frame in flight, whose sync returned err. Only then does its
// batch enter the overlay that reads see; the checkpoint that moves it into the bbolt
// file comes later, off this path.
func (c *committer) land(err error) {
	s := c.s
	f := c.flights[0]
	c.flights[0] = nil
	c.flights = c.flights[1:]
	switch {
	case err != nil:
		// A failed fsync may have dropped the dirty pages: the frame may or may not be
		// on disk, so memory and disk can no longer be trusted to agree. Stop writing:
		// the daemon restarts and rebuilds its memory from what the disk holds.
		s.stats.errors.Add(1)
		ferr := fmt.Errorf("%w: sync of %d ops to %s: %w", ErrFailed, len(f.batch), s.walPaths[s.wal.cur], diskErr(err))
		s.setFailure(ferr)
		s.log.Error("store log sync failed; refusing further writes", "ops", len(f.batch), "err", err)
		answer(f.batch, fmt.Errorf("outcome unknown: %w", ferr))
	case s.failure() != nil:
		// An earlier frame's sync failed: this one may be on disk without it.
		answer(f.batch, fmt.Errorf("outcome unknown: %w", s.failure()))
	default:
		s.applyOverlay(f.batch)
		s.stats.record(len(f.batch), time.Since(f.start))
		answer(f.batch, nil)
	}
	// Those just answered, plus those that queued up meanwhile.
	c.expect = len(f.batch) + len(s.queue)
	clear(f.batch) // drop references to values already answered
	c.spare = append(c.spare, f.batch[:0])
	if s.wal.off >= s.ckptBytes && !s.ckptBusy.Load() {
		c.freezing = true
	}
}

// maybeFreeze starts a checkpoint once one is wanted and no frame is in flight.
func (c *committer) maybeFreeze() {
	if !c.freezing || len(c.flights) > 0 {
		return
	}
	c.freezing = false
	if !c.s.ckptBusy.Load() {
		c.s.freeze()
	}
}

// writeFailed answers a batch whose frame could not be written. Nothing was synced and
// nothing answered: the next frame takes the same place and number, so whatever part of
// this one reached the file is overwritten or, if the process dies first, a torn tail
// that replay ignores. A full disk or a file system turned read-only fails here, and the
// store goes on.
func (s *Store) writeFailed(batch []*op, err error) {
	s.stats.errors.Add(1)
	seg := s.walPaths[s.wal.cur]
	werr := fmt.Errorf("batch of %d ops not written: write to %s: %w", len(batch), seg, diskErr(err))
	s.log.Error("store log write failed; nothing written, later writes will try again", "ops", len(batch), "cause", DiskCause(err), "err", err)
	answer(batch, werr)
}
