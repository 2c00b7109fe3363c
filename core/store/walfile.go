package store

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The write-ahead log on disk: two segment files beside the store file, written one at a
// time by the committer and checkpointed into bbolt one at a time (see doc.go).

var (
	walIDKey  = []byte("wal_id")  // meta: the id every segment of this file's log carries
	walSeqKey = []byte("wal_seq") // meta: the last frame checkpointed into the file
)

const (
	// walSegments is the number of segment files: one takes writes while the other is
	// checkpointed.
	walSegments = 2
	// walGrowChunk is how far ahead of its frames a segment is extended with zeros, so
	// that frames overwrite allocated blocks and their fdatasync flushes data without a
	// metadata update (one per chunk, not one per frame).
	walGrowChunk = 1 << 20
	// defaultCheckpointBytes is how full the active segment gets before it is frozen and
	// checkpointed.
	defaultCheckpointBytes = 2 << 20
	// defaultCheckpointInterval bounds how long a write stays in the log alone when few
	// come (the file is then current for `allotd store check` within a second).
	defaultCheckpointInterval = time.Second
)

// WALPaths returns the write-ahead log's segment files of the store at path.
func WALPaths(path string) []string {
	out := make([]string, walSegments)
	for i := range out {
		out[i] = fmt.Sprintf("%s.wal%d", path, i)
	}
	return out
}

// walIO is how the committer reaches the segment files; the power-cut test records
// what it writes and syncs.
type walIO interface {
	WriteAt(seg int, b []byte, off int64) error
	Sync(seg int) error
	Truncate(seg int, size int64) error
}

// walFiles is the real walIO.
type walFiles []*os.File

func (w walFiles) WriteAt(seg int, b []byte, off int64) error {
	_, err := w[seg].WriteAt(b, off)
	return err
}

func (w walFiles) Truncate(seg int, size int64) error { return w[seg].Truncate(size) }

func (w walFiles) Sync(seg int) error {
	// fdatasync: the segment's blocks are allocated when it is created, so a write
	// changes no metadata that reading it back needs.
	for {
		err := syscall.Fdatasync(int(w[seg].Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

func (w walFiles) close() error {
	var errs []error
	for _, f := range w {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// walWriter is the committer's end of the log.
type walWriter struct {
	io     walIO
	noSync bool
	cur    int                // the segment taking writes
	off    int64              // where the next frame goes in it
	seq    uint64             // the last frame written
	size   [walSegments]int64 // how far each segment is allocated
	buf    []byte
}

// append writes batch as the next frame and syncs it. written tells whether the write
// itself succeeded: a failed write leaves the frame unacknowledged and the next one
// goes to the same place under the same sequence number, while a failed sync leaves
// the outcome unknown.
func (w *walWriter) append(batch []*op) (written bool, err error) {
	w.buf = appendFrame(w.buf[:0], w.seq+1, batch)
	w.grow(int64(len(w.buf)))
	if err := w.io.WriteAt(w.cur, w.buf, w.off); err != nil {
		// Whatever part of the frame was written is rewritten from here next time.
		w.size[w.cur] = min(w.size[w.cur], w.off)
		return false, err
	}
	w.off += int64(len(w.buf))
	w.size[w.cur] = max(w.size[w.cur], w.off)
	w.seq++
	if w.noSync {
		return true, nil
	}
	return true, w.io.Sync(w.cur)
}

// grow extends the current segment with zeros when n more bytes would pass its end. It
// is an optimisation only: if the zeros do not fit (a nearly full disk), the frame's own
// write extends the file, and only that write's outcome counts.
//
// Without fsync (NoSync) there is nothing to spare, so nothing is written ahead: a test that
// runs thousands of stores in one process (test/scale) would otherwise write a chunk of zeros
// for each, gigabytes that the disk's writeback then makes every writer on the machine wait for.
func (w *walWriter) grow(n int64) {
	end := w.size[w.cur]
	if w.noSync || w.off+n <= end {
		return
	}
	zeros := walZeros
	if need := w.off + n - end; need > int64(len(zeros)) {
		zeros = make([]byte, need) // a frame larger than a chunk
	}
	if err := w.io.WriteAt(w.cur, zeros, end); err != nil {
		// Give back what part of the zeros did fit: on a full disk the frame needs it.
		_ = w.io.Truncate(w.cur, end)
		return
	}
	w.size[w.cur] = end + int64(len(zeros))
}

// walZeros is the chunk grow writes; never written to.
var walZeros = make([]byte, walGrowChunk)

// switchSegment starts writing at the head of the other segment, whose frames must all
// be checkpointed.
func (w *walWriter) switchSegment() {
	w.cur = (w.cur + 1) % walSegments
	w.off = walHeaderSize
}

// walMeta reads (creating the id on a file that has none) the log's id and checkpoint.
func walMeta(db *bolt.DB) (id [walIDSize]byte, seq uint64, err error) {
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(metaBucket)
		raw := meta.Get(walIDKey)
		if raw == nil {
			if _, err := rand.Read(id[:]); err != nil {
				return err
			}
			return meta.Put(walIDKey, id[:])
		}
		if len(raw) != walIDSize {
			return fmt.Errorf("meta key %q has %d bytes, want %d: %w", walIDKey, len(raw), walIDSize, ErrSchema)
		}
		copy(id[:], raw)
		if v := meta.Get(walSeqKey); v != nil {
			if len(v) != 8 {
				return fmt.Errorf("meta key %q has %d bytes, want 8: %w", walSeqKey, len(v), ErrSchema)
			}
			seq = binary.LittleEndian.Uint64(v)
		}
		return nil
	})
	return id, seq, err
}

// removeStaleWAL removes segments left beside a store file that Open has just created:
// they belong to a file that is gone (deleted, or moved aside without them), and their
// frames alone are not a store.
func removeStaleWAL(paths []string, logger interface{ Warn(string, ...any) }) error {
	for _, p := range paths {
		err := os.Remove(p)
		if err == nil {
			logger.Warn("store file created new: removed the write-ahead log of the file that was there before", "segment", p)
			continue
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove write-ahead log of a former store file: %w", diskErr(err))
		}
	}
	return nil
}

// readWAL reads the segments at paths (missing ones are skipped) and returns the frames
// after checkpoint, in order. A segment of another store file, a damaged header, or a
// damaged frame that newer frames follow is an error naming the segment and offset; a
// torn tail (nothing intact after it) is not, since its frame was never acknowledged.
func readWAL(paths []string, id [walIDSize]byte, checkpoint uint64) ([]walFrame, error) {
	scans, err := scanWAL(paths, &id)
	if err != nil {
		return nil, err
	}
	return chainFrames(scans, checkpoint)
}

// scanWAL scans the segments at paths (missing ones are skipped), which must carry id
// unless it is nil.
func scanWAL(paths []string, id *[walIDSize]byte) ([]segmentScan, error) {
	var scans []segmentScan
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read write-ahead log: %w", diskErr(err))
		}
		got, err := parseWALHeader(data)
		if err != nil {
			return nil, &WALError{Path: p, Reason: err.Error()}
		}
		if id != nil && got != *id {
			return nil, &WALError{Path: p, Reason: fmt.Sprintf("belongs to another store file (id %x, the store file's is %x); "+
				"if that file is gone for good, remove the log's segments", got, *id)}
		}
		sc, err := scanSegment(p, data)
		if err != nil {
			return nil, err
		}
		scans = append(scans, sc)
	}
	return scans, nil
}

// chainFrames returns the frames after checkpoint, which must follow each other from
// checkpoint+1, and refuses a log in which an intact frame newer than the chain's end
// exists: that frame was written after the chain's last one was synced, so the frame
// missing in between was acknowledged and is damaged.
func chainFrames(scans []segmentScan, checkpoint uint64) ([]walFrame, error) {
	type located struct {
		walFrame
		sc *segmentScan
	}
	var chain []located
	for i := range scans {
		for _, f := range scans[i].run {
			if f.seq > checkpoint {
				chain = append(chain, located{f, &scans[i]})
			}
		}
	}
	slices.SortFunc(chain, func(a, b located) int { return cmpUint(a.seq, b.seq) })
	last := checkpoint
	for _, f := range chain {
		if f.seq != last+1 {
			return nil, &WALError{Path: f.sc.path, Offset: f.off, Seq: f.seq,
				Reason: fmt.Sprintf("the frame before it (%d) is missing or damaged; the store file holds frames up to %d", f.seq-1, checkpoint)}
		}
		last = f.seq
	}
	for i := range scans {
		for _, f := range scans[i].orphans {
			if f.seq > last {
				p, end := scans[i].path, scans[i].end
				if len(chain) > 0 {
					p, end = chain[len(chain)-1].sc.path, chain[len(chain)-1].sc.end
				}
				return nil, &WALError{Path: p, Offset: end, Seq: last + 1,
					Reason: fmt.Sprintf("frame missing or damaged, but frame %d (%s offset %d) was written after it", f.seq, scans[i].path, f.off)}
			}
		}
	}
	out := make([]walFrame, len(chain))
	for i, f := range chain {
		out[i] = f.walFrame
	}
	return out, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// replayWAL applies frames to the file in one transaction and records the last as
// checkpointed.
func replayWAL(db *bolt.DB, frames []walFrame) error {
	if len(frames) == 0 {
		return nil
	}
	return db.Update(func(tx *bolt.Tx) error {
		for _, f := range frames {
			for _, o := range f.ops {
				if err := applyWALOp(tx, o.kind, o.key, o.value); err != nil {
					return fmt.Errorf("replay frame %d: %w", f.seq, err)
				}
			}
		}
		return putWALSeq(tx, frames[len(frames)-1].seq)
	})
}

func putWALSeq(tx *bolt.Tx, seq uint64) error {
	return tx.Bucket(metaBucket).Put(walSeqKey, binary.LittleEndian.AppendUint64(nil, seq))
}

// applyWALOp applies one op to the file.
func applyWALOp(tx *bolt.Tx, kind byte, key, value []byte) error {
	b := tx.Bucket(recordsBucket)
	if kind == walMetaPut || kind == walMetaDelete {
		b = tx.Bucket(metaBucket)
	}
	var err error
	if kind == walDelete || kind == walMetaDelete {
		err = b.Delete(key)
	} else {
		err = b.Put(key, value)
	}
	if err != nil {
		return fmt.Errorf("key %q: %w", keyName(key), err)
	}
	return nil
}

// openSegments opens the segment files for writing, creating missing ones (in a
// temporary file renamed into place, so a segment file always has its header).
func openSegments(paths []string, id [walIDSize]byte, noSync bool) (walFiles, error) {
	files := make(walFiles, len(paths))
	created := false
	for i, p := range paths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			if err := createSegment(p, id, noSync); err != nil {
				_ = files.close()
				return nil, err
			}
			created = true
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0o600)
		if err != nil {
			_ = files.close()
			return nil, fmt.Errorf("open write-ahead log: %w", diskErr(err))
		}
		files[i] = f
	}
	if created && !noSync {
		if err := syncDir(filepath.Dir(paths[0])); err != nil {
			_ = files.close()
			return nil, fmt.Errorf("create write-ahead log: %w", diskErr(err))
		}
	}
	return files, nil
}

func createSegment(path string, id [walIDSize]byte, noSync bool) error {
	tmp := fmt.Sprintf("%s.new-%d", path, os.Getpid())
	err := os.WriteFile(tmp, appendWALHeader(nil, id), 0o600)
	if err == nil && !noSync {
		err = syncFile(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("create write-ahead log %s: %w", path, diskErr(err))
	}
	return nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
