package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// UnusableError says why a file cannot be opened as a store. Error names the file and
// the damage; what to do about it is the caller's to say (allotd prints the commands).
type UnusableError struct {
	Path string
	// Problem is the first damage found, with a count of the others.
	Problem string
	// Report is the full inspection, nil when the damage was found another way (a
	// panic inside bbolt).
	Report *Report
	// Err is the underlying cause: ErrSchema for a file of another schema version.
	Err error
}

func (e *UnusableError) Error() string {
	return fmt.Sprintf("store file %s is unusable: %s", e.Path, e.Problem)
}

func (e *UnusableError) Unwrap() error { return e.Err }

// Is makes every UnusableError match ErrUnusable.
func (e *UnusableError) Is(target error) bool { return target == ErrUnusable }

func unusable(rep *Report) *UnusableError {
	e := &UnusableError{Path: rep.Path, Problem: rep.Summary(), Report: rep}
	if rep.Foreign {
		e.Problem = "not an allot store: " + e.Problem
	}
	if rep.Schema != 0 && rep.Schema != schemaVersion {
		e.Err = ErrSchema
	}
	return e
}

// DiskCause names, in words an operator acts on, the file-system condition behind err
// ("no space left on device", "read-only file system"), or "" when err is another kind.
// core/ipam and allotd use it to say why a write failed.
func DiskCause(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return "no space left on device"
	case errors.Is(err, syscall.EDQUOT):
		return "disk quota exceeded"
	case errors.Is(err, syscall.EROFS):
		return "read-only file system"
	case errors.Is(err, syscall.EIO):
		return "I/O error"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return "permission denied"
	}
	return ""
}

// diskErr prefixes err with its DiskCause when its text does not already say it (bbolt
// formats some errors with %s, which keeps the words but drops the chain, and the
// reverse happens too).
func diskErr(err error) error {
	if c := DiskCause(err); c != "" && !strings.Contains(err.Error(), c) {
		return fmt.Errorf("%s: %w", c, err)
	}
	return err
}

// lockedOpen opens path and takes bbolt's flock on it (exclusive, or shared for
// read-only use), waiting at most timeout. bbolt takes the same lock again on the
// descriptor we hand it, which flock allows, so the file is under lock from before the
// check until Close. If the path was replaced while we waited (compact renames a new
// file over it), the descriptor is of the old file: start again with the new one.
func lockedOpen(path string, flag int, exclusive bool, timeout time.Duration) (*os.File, error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(timeout)
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(path, flag, 0o600)
		if err != nil {
			return nil, fmt.Errorf("store: open %s: %w", path, diskErr(err))
		}
		for {
			err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
			if err != syscall.EWOULDBLOCK || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("store: %s is locked by another process (waited %s): %w", path, timeout, ErrLocked)
		}
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("store: lock %s: %w", path, err)
		}
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return f, nil
		}
		_ = f.Close()
		if attempt == 10 {
			return nil, fmt.Errorf("store: %s keeps being replaced while opening it", path)
		}
	}
}

// openChecked opens an existing store file with bbolt after checking it: the check
// runs on the locked descriptor bbolt then uses (its OpenFile hook), so nothing can
// change the file between the check and bbolt's first read.
func openChecked(path string, bo *bolt.Options) (*bolt.DB, error) {
	o := *bo
	o.OpenFile = func(name string, flag int, _ os.FileMode) (*os.File, error) {
		// Never let bbolt create the file: a missing file here was deleted under us,
		// and a fresh store must come from createIfMissing, complete.
		f, err := lockedOpen(name, flag&^os.O_CREATE, !o.ReadOnly, o.Timeout)
		if err != nil {
			return nil, err
		}
		if rep := inspectOpen(f, name, false); !rep.OK() {
			_ = f.Close()
			return nil, unusable(rep)
		}
		return f, nil
	}
	var db *bolt.DB
	err := safely(path, func() (err error) {
		db, err = bolt.Open(path, 0o600, &o)
		return err
	})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("store: %s is locked by another process (waited %s): %w", path, o.Timeout, ErrLocked)
		}
		if errors.Is(err, ErrLocked) || errors.Is(err, ErrUnusable) || errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("store: open %s: %w", path, diskErr(err))
		}
		// Anything else bbolt refuses (a version or checksum it disagrees with)
		// is damage too.
		return nil, &UnusableError{Path: path, Problem: err.Error(), Err: err}
	}
	return db, nil
}

// safely runs fn, turning a panic, or a memory fault reading the mapped file, into an
// *UnusableError. The defensive walk should leave bbolt nothing to trip on; this is the
// second line, for damage the walk does not model.
func safely(path string, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = &UnusableError{Path: path, Problem: fmt.Sprintf("bbolt failed reading it: %v", r)}
		}
	}()
	return fn()
}

// createIfMissing creates a new, complete store file at path if there is none: bbolt's
// header pages and allot's buckets are written to a temporary file, synced and renamed
// into place, so a crash never leaves an empty or half-initialised file at path (which
// Open would then refuse as truncated). It reports whether it created the file.
func createIfMissing(path string, bo *bolt.Options) (bool, error) {
	if _, err := os.Lstat(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		if err != nil {
			return false, fmt.Errorf("store: stat %s: %w", path, diskErr(err))
		}
		return false, nil
	}
	tmp := fmt.Sprintf("%s.new-%d", path, os.Getpid())
	_ = os.Remove(tmp) // left by a crash of an earlier process with our PID
	db, err := bolt.Open(tmp, 0o600, bo)
	if err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("store: create %s: %w", tmp, diskErr(err))
	}
	err = initSchema(db)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil && !bo.NoSync {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("store: create %s: %w", path, diskErr(err))
	}
	return true, nil
}

// InspectOptions configure Inspect, Salvage and Compact.
type InspectOptions struct {
	// LockTimeout is how long to wait for a running allotd to release the file; 0
	// means DefaultLockTimeout. These tools never run beside a daemon.
	LockTimeout time.Duration
	// NoSync writes Salvage's new file without fsync. Tests only.
	NoSync bool
}

func (o InspectOptions) timeout() time.Duration {
	if o.LockTimeout <= 0 {
		return DefaultLockTimeout
	}
	return o.LockTimeout
}

// Inspect reads the store file at path without changing it and reports its damage and
// every readable record, with the writes its write-ahead log holds beyond it applied
// (Report.Logged). It takes the file's lock (shared), so it fails with ErrLocked
// while a daemon has the store open. A file that is sound to the defensive walk is also
// given to bbolt's own consistency check (Tx.Check).
func Inspect(ctx context.Context, path string, opts InspectOptions) (*Report, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := lockedOpen(path, os.O_RDONLY, false, opts.timeout())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rep := inspectOpen(f, path, true)
	if rep.OK() && !rep.Fresh {
		rep.Problems = append(rep.Problems, boltCheck(path, opts.timeout())...)
	}
	if !rep.OK() {
		scanPages(f, rep.Size, rep)
	}
	applyLog(rep)
	return rep, nil
}

// boltCheck runs bbolt's Tx.Check on a file the walk found sound, read-only.
func boltCheck(path string, timeout time.Duration) []string {
	var problems []string
	err := safely(path, func() error {
		db, err := openChecked(path, &bolt.Options{ReadOnly: true, Timeout: timeout})
		if err != nil {
			return err
		}
		defer db.Close()
		return db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				problems = append(problems, "bbolt check: "+err.Error())
			}
			return nil
		})
	})
	if err != nil {
		problems = append(problems, "bbolt check: "+err.Error())
	}
	return problems
}

// Salvage copies every record Inspect can read from the store file src into a new
// store file dst, which must not exist; src is never modified. The report lists what
// was lost (Report.Lost) and what was recovered from pages outside the tree
// (Report.Recovered, also copied). Put dst in place of src only with allotd stopped.
func Salvage(ctx context.Context, src, dst string, opts InspectOptions) (*Report, error) {
	if _, err := os.Lstat(dst); err == nil {
		return nil, fmt.Errorf("store: salvage: %s exists; choose a new file (salvage never overwrites)", dst)
	}
	rep, err := Inspect(ctx, src, opts)
	if err != nil {
		return nil, err
	}
	if err := writeNew(ctx, dst, append(slices.Clone(rep.Records), rep.Recovered...), opts.NoSync); err != nil {
		return rep, fmt.Errorf("store: salvage into %s: %w", dst, err)
	}
	return rep, nil
}

// writeNew creates the store file path (which must not exist) holding recs.
func writeNew(ctx context.Context, path string, recs []Record, noSync bool) error {
	s, err := Open(ctx, path, Options{NoSync: noSync})
	if err != nil {
		return err
	}
	const chunk = 4096 // bounds one transaction's dirty pages
	for len(recs) > 0 && err == nil {
		n := min(chunk, len(recs))
		err = s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(recordsBucket)
			for _, r := range recs[:n] {
				k, v, err := encodeRecord(r)
				if err != nil {
					return err
				}
				if err := b.Put(k, v); err != nil {
					return fmt.Errorf("key %q: %w", keyName(k), err)
				}
			}
			return nil
		})
		recs = recs[n:]
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

// CompactResult is what Compact did.
type CompactResult struct {
	Before, After int64 // file sizes in bytes
}

// Compact rewrites the store file at path without its free pages (bbolt.Compact) and
// renames the result over it. It holds the file's exclusive lock throughout, so it
// fails with ErrLocked while a daemon runs, and a daemon started meanwhile waits and
// then opens the new file (Open notices the rename). A damaged file is refused: salvage
// it first.
func Compact(ctx context.Context, path string, opts InspectOptions) (CompactResult, error) {
	var res CompactResult
	if err := ctx.Err(); err != nil {
		return res, err
	}
	bo := &bolt.Options{Timeout: opts.timeout(), FreelistType: defaultTuning.freelist, NoFreelistSync: defaultTuning.noFreelistSync}
	src, err := openChecked(path, bo)
	if err != nil {
		return res, err
	}
	defer src.Close()
	if st, err := os.Stat(path); err == nil {
		res.Before = st.Size()
	}
	tmp := path + ".compact"
	_ = os.Remove(tmp) // ours, from an interrupted compact: we hold the store's lock
	dst, err := bolt.Open(tmp, 0o600, bo)
	if err != nil {
		return res, fmt.Errorf("store: compact: create %s: %w", tmp, diskErr(err))
	}
	err = safely(path, func() error { return bolt.Compact(dst, src, 64<<20) })
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return res, fmt.Errorf("store: compact %s: %w", path, diskErr(err))
	}
	if st, err := os.Stat(path); err == nil {
		res.After = st.Size()
	}
	return res, nil
}

// MoveAside renames the store file at path to path.corrupt-<UTC timestamp> (with a
// counter if that exists), and its write-ahead log's segments to match, and returns the
// new name. The damaged file is kept for
// diagnosis and salvage; it is never deleted.
func MoveAside(path string, now time.Time) (string, error) {
	base := path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	to := base
	for i := 1; ; i++ {
		if _, err := os.Lstat(to); errors.Is(err, os.ErrNotExist) {
			break
		}
		to = fmt.Sprintf("%s-%d", base, i)
	}
	if err := os.Rename(path, to); err != nil {
		return "", fmt.Errorf("store: move %s aside: %w", path, diskErr(err))
	}
	// The log goes with its file: its frames hold acknowledged writes the file may lack,
	// and beside a new file at path they would be refused.
	for i, seg := range WALPaths(path) {
		if err := os.Rename(seg, WALPaths(to)[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("store: move %s aside: %w", seg, diskErr(err))
		}
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("store: move %s aside: sync directory: %w", path, err)
	}
	return to, nil
}
