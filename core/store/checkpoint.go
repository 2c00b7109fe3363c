package store

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Checkpoints move the log's writes into the bbolt file, off the committer's path: the
// committer freezes the active overlay and switches segments between two frames, and the
// checkpointer writes the frozen overlay into the file in one transaction together with
// the number of the last frame it holds (meta "wal_seq"). Once that transaction is
// synced the frozen segment's frames are in the file, so the segment may be written
// again, and replay skips frames up to wal_seq.

// ckptJob is a frozen overlay and the last frame it holds.
type ckptJob struct {
	entries overlay
	seq     uint64
}

// freeze hands the active overlay to the checkpointer and moves the log to the other
// segment. Only the committer calls it, between frames, when no checkpoint runs.
func (s *Store) freeze() {
	s.ovMu.Lock()
	if len(s.active) == 0 {
		s.ovMu.Unlock()
		return
	}
	job := ckptJob{entries: s.active, seq: s.wal.seq}
	s.frozen, s.active = s.active, overlay{}
	s.ovMu.Unlock()
	s.ckptBusy.Store(true)
	s.wal.switchSegment()
	s.ckptJobs <- job
}

// checkpointLoop runs checkpoints one at a time. A clean failure (nothing reached the
// file: a full disk) is retried after a pause, the frozen overlay still serving reads and
// the log still holding its frames; a failure with unknown outcome stops writes
// (ErrFailed), as a failed commit always did.
func (s *Store) checkpointLoop() {
	defer close(s.ckptExit)
	for job := range s.ckptJobs {
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
			err := s.checkpoint(job)
			if err == nil || s.failure() != nil {
				break
			}
			select {
			case <-time.After(pause):
				continue
			case <-s.stopping:
			}
			break // closing: the log keeps the frames for the next Open
		}
	}
}

// checkpoint writes job into the file. On success the frozen overlay is dropped and the
// committer may reuse its segment.
func (s *Store) checkpoint(job ckptJob) error {
	start := time.Now()
	tx, err := s.db.Begin(true)
	if err != nil {
		return s.checkpointFailed(job, fmt.Errorf("begin transaction: %w", err))
	}
	for _, k := range sortedKeys(job.entries) {
		e := job.entries[k]
		kind := walPut
		switch {
		case k[0] == tagMeta && e.del:
			kind = walMetaDelete
		case k[0] == tagMeta:
			kind = walMetaPut
		case e.del:
			kind = walDelete
		}
		if err = applyWALOp(tx, kind, []byte(k[1:]), e.value); err != nil {
			break
		}
	}
	if err == nil {
		err = putWALSeq(tx, job.seq)
	}
	if err != nil {
		_ = tx.Rollback()
		return s.checkpointFailed(job, err)
	}
	txid := tx.ID()
	if err := s.commitTx(tx); err != nil {
		if !s.notCommitted(txid) {
			// As for any commit whose meta page was written: memory and disk may disagree.
			ferr := fmt.Errorf("%w: checkpoint of %d keys to %s: %w", ErrFailed, len(job.entries), s.path, diskErr(err))
			s.setFailure(ferr)
			s.log.Error("store checkpoint failed; refusing further writes", "keys", len(job.entries), "err", err)
			return ferr
		}
		return s.checkpointFailed(job, fmt.Errorf("commit to %s: %w", s.path, diskErr(err)))
	}
	s.ovMu.Lock()
	s.frozen = nil
	s.ovMu.Unlock()
	s.stats.checkpoint(time.Since(start))
	if s.afterCheckpoint != nil {
		s.afterCheckpoint()
	}
	s.ckptBusy.Store(false)
	return nil
}

// sortedKeys returns the overlay's keys in bbolt's order. Put in that order, each key
// lands at or near the end of the node the previous one went to: in the map's random
// order every insert shifted the rest of its node and searched from the root afresh
// (BenchmarkCheckpoint).
func sortedKeys(ov overlay) []string {
	keys := make([]string, 0, len(ov))
	for k := range ov {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (s *Store) checkpointFailed(job ckptJob, err error) error {
	s.stats.errors.Add(1)
	s.log.Error("store checkpoint failed before its meta page; the log keeps the writes and the checkpoint is tried again",
		"keys", len(job.entries), "through_frame", job.seq, "cause", DiskCause(err), "err", err)
	return err
}

// flush checkpoints what the log holds beyond the file, when the store closes: the
// committer has exited and the checkpointer with it. Writes stay in the log if it fails.
func (s *Store) flush() {
	if s.failure() != nil || s.ckptBusy.Load() {
		return // a checkpoint that did not finish: its frames wait in the log
	}
	s.ovMu.Lock()
	job := ckptJob{entries: s.active, seq: s.wal.seq}
	s.frozen, s.active = s.active, overlay{}
	s.ovMu.Unlock()
	if len(job.entries) > 0 {
		s.ckptBusy.Store(true)
		_ = s.checkpoint(job)
	}
}

// walSeq reads the checkpointed frame from the file, for tests and diagnostics.
func (s *Store) walSeq() uint64 {
	var seq uint64
	_ = s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(metaBucket).Get(walSeqKey); len(v) == 8 {
			seq = binary.LittleEndian.Uint64(v)
		}
		return nil
	})
	return seq
}
