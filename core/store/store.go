package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("store: closed")
	// ErrLocked means another process holds the database file.
	ErrLocked = errors.New("store: locked by another process")
	// ErrInvalid is matched by every *FieldError: the caller passed a bad
	// owner or record; nothing was written.
	ErrInvalid = errors.New("store: invalid input")
	// ErrCorrupt is matched by every *CorruptError: a record on disk cannot
	// be decoded.
	ErrCorrupt = errors.New("store: corrupt record")
	// ErrSchema means the file was written by an incompatible build.
	ErrSchema = errors.New("store: unsupported schema")
	// ErrUnusable is matched by every *UnusableError: the file cannot be opened as
	// a store (damaged, truncated, foreign, or of another schema).
	ErrUnusable = errors.New("store: file unusable")
	// ErrFailed means an earlier commit failed in a way that leaves the
	// outcome on disk unknown; the store refuses further writes and the
	// daemon should restart (and so rebuild its memory from disk).
	ErrFailed = errors.New("store: failed")
)

// schemaVersion is the layout of the file: bucket names, key encoding and
// record version. Stored in the meta bucket under schemaKey as decimal text.
const schemaVersion = 1

var (
	metaBucket    = []byte("meta")
	recordsBucket = []byte("records")
	schemaKey     = []byte("schema")
)

// Defaults for Options.
const (
	DefaultMaxBatch = 1024
	// DefaultMaxGroupDelay caps the wait for expected writers; in practice
	// the wait is bounded by twice the last commit's duration, below it.
	DefaultMaxGroupDelay = time.Millisecond
	DefaultLockTimeout   = 2 * time.Second
)

// Owner identifies an allocation: one interface of one container. It is the
// key of a record, and the CNI idempotency key.
type Owner struct {
	ContainerID string
	IfName      string
}

// String returns "containerID/ifname".
func (o Owner) String() string { return o.ContainerID + "/" + o.IfName }

// Compare orders owners by container ID, then interface name: the order of
// List.
func (o Owner) Compare(p Owner) int {
	switch {
	case o.ContainerID < p.ContainerID:
		return -1
	case o.ContainerID > p.ContainerID:
		return 1
	case o.IfName < p.IfName:
		return -1
	case o.IfName > p.IfName:
		return 1
	}
	return 0
}

// Pod is the Kubernetes pod an allocation belongs to, if known.
type Pod struct {
	Namespace, Name, UID string
}

// Address is one allocated address.
type Address struct {
	Pool string
	// Prefix is the address with the pool's prefix length (10.0.0.7/24), not
	// the masked network.
	Prefix  netip.Prefix
	Gateway netip.Addr // optional; zero when there is none
}

// Record is everything the daemon must remember about one allocation.
type Record struct {
	Owner     Owner
	Network   string // CNI network name
	Pod       Pod
	Addresses []Address
	Created   time.Time
}

// Options configure Open. The zero value is the production setting.
type Options struct {
	// NoSync skips fsync. Tests and benchmarks only: an acknowledged write
	// can be lost on power failure (not on a process crash), and the log may
	// then hold a frame that reached the disk after one that did not, which
	// Open refuses as damage.
	NoSync bool
	// MaxBatch caps the number of operations in one transaction; 0 means
	// DefaultMaxBatch.
	MaxBatch int
	// MaxGroupDelay bounds how long the committer waits for writers it
	// expects back before committing (see commitLoop); 0 means
	// DefaultMaxGroupDelay, negative disables waiting.
	MaxGroupDelay time.Duration
	// LockTimeout is how long Open waits for another process to release the
	// file; 0 means DefaultLockTimeout.
	LockTimeout time.Duration
	// Logger receives store events; nil discards them.
	Logger *slog.Logger

	// tuning overrides bbolt settings; benchmarks use it to measure the
	// chosen defaults against the alternatives.
	tuning *boltTuning
	// The log's checkpoint size and interval (defaults in walfile.go), and a wrapper of
	// its file access: tests set them.
	checkpointBytes    int64
	checkpointInterval time.Duration
	walIO              func(walFiles) walIO
}

// boltTuning holds the bbolt settings we chose by measurement (see doc.go).
type boltTuning struct {
	freelist       bolt.FreelistType
	noFreelistSync bool
}

var defaultTuning = boltTuning{freelist: bolt.FreelistMapType, noFreelistSync: true}

// Store is a durable map from Owner to Record. It is safe for concurrent use.
type Store struct {
	path     string
	db       *bolt.DB
	log      *slog.Logger
	maxBatch int
	ops      opPool
	// maxGroupDelay caps gather's wait; <= 0 disables it.
	maxGroupDelay time.Duration

	// mu guards closed and the send side of queue: writers hold it shared
	// while enqueuing so Close (exclusive) never closes the channel under a
	// sender.
	mu     sync.RWMutex
	closed bool
	queue  chan *op
	done   chan struct{} // closed when the committer has exited

	// failed is set (once) by the committer after a commit error whose
	// outcome on disk is unknown.
	failMu sync.Mutex
	failed error

	stats statsCounters

	// The write-ahead log (walfile.go): the committer's writer, the segment files, and
	// how full a segment gets (or how long a write waits) before a checkpoint.
	wal          walWriter
	walFiles     walFiles
	walPaths     []string
	ckptBytes    int64
	ckptInterval time.Duration

	// The overlay (overlay.go), guarded by ovMu.
	ovMu           sync.RWMutex
	active, frozen overlay

	// The checkpointer (checkpoint.go): ckptBusy is set while a checkpoint runs (its
	// segment may not be written), stopping ends its retries when the store closes.
	ckptBusy atomic.Bool
	ckptJobs chan ckptJob
	ckptExit chan struct{}
	stopping chan struct{}

	// commitTx commits a checkpoint's transaction; tests replace it to inject a
	// failure inside Commit.
	commitTx func(*bolt.Tx) error
	// afterCheckpoint, when set by tests, runs after each checkpoint is committed.
	afterCheckpoint func()
}

// Open opens (creating if needed) the store at path. The directory is created
// with mode 0700 and the file with 0600. If another process holds the file,
// Open fails after Options.LockTimeout with an error matching ErrLocked.
//
// Before bbolt reads the file, Open walks its pages defensively (see inspect.go):
// a damaged, truncated or foreign file, or one of another schema version, fails
// with an *UnusableError (ErrUnusable) naming the file and the damage, never
// with a panic. Open does not decode records; call List to rebuild memory (and
// Check to find every bad record).
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	opts, err := opts.withDefaults(path)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	logger = logger.With("component", "store", "path", path)
	db, created, err := openDB(path, opts)
	if err != nil {
		return nil, err
	}
	w, files, err := openWAL(path, db, created, opts, logger)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	s := &Store{
		path:          path,
		db:            db,
		log:           logger,
		maxBatch:      opts.MaxBatch,
		maxGroupDelay: opts.MaxGroupDelay,
		// The queue holds a few batches' worth so bursts do not block
		// callers on the channel; past that, senders wait (backpressure).
		queue:        make(chan *op, 4*opts.MaxBatch),
		done:         make(chan struct{}),
		commitTx:     (*bolt.Tx).Commit,
		wal:          w,
		walFiles:     files,
		walPaths:     WALPaths(path),
		ckptBytes:    opts.checkpointBytes,
		ckptInterval: opts.checkpointInterval,
		active:       overlay{},
		ckptJobs:     make(chan ckptJob, 1),
		ckptExit:     make(chan struct{}),
		stopping:     make(chan struct{}),
	}
	go s.checkpointLoop()
	go s.commitLoop()
	logger.Debug("store opened", "created", created, "nosync", opts.NoSync, "max_batch", opts.MaxBatch)
	return s, nil
}

// openWAL replays what the log holds beyond the file's checkpoint into the file and
// opens the log for writing. A log that cannot be replayed makes the store unusable.
func openWAL(path string, db *bolt.DB, created bool, opts Options, logger *slog.Logger) (walWriter, walFiles, error) {
	id, ckpt, err := walMeta(db)
	if err != nil {
		return walWriter{}, nil, fmt.Errorf("store: %s: %w", path, err)
	}
	paths := WALPaths(path)
	if created {
		if err := removeStaleWAL(paths, logger); err != nil {
			return walWriter{}, nil, fmt.Errorf("store: %w", err)
		}
	}
	frames, err := readWAL(paths, id, ckpt)
	var we *WALError
	if errors.As(err, &we) {
		return walWriter{}, nil, &UnusableError{Path: path, Problem: we.Error(), Err: we}
	}
	if err != nil {
		return walWriter{}, nil, fmt.Errorf("store: %s: %w", path, err)
	}
	if err := replayWAL(db, frames); err != nil {
		return walWriter{}, nil, fmt.Errorf("store: %s: %w", path, diskErr(err))
	}
	last := ckpt
	if len(frames) > 0 {
		last = frames[len(frames)-1].seq
		logger.Info("store replayed its write-ahead log", "frames", len(frames), "from", frames[0].seq, "to", last)
	}
	files, err := openSegments(paths, id, opts.NoSync)
	if err != nil {
		return walWriter{}, nil, fmt.Errorf("store: %w", err)
	}
	w := walWriter{io: files, noSync: opts.NoSync, off: walHeaderSize, seq: last}
	for i, f := range files {
		st, err := f.Stat()
		if err != nil {
			_ = files.close()
			return walWriter{}, nil, fmt.Errorf("store: %w", diskErr(err))
		}
		w.size[i] = st.Size()
	}
	if opts.walIO != nil {
		w.io = opts.walIO(files)
	}
	return w, files, nil
}

// withDefaults checks o for a store at path and fills the limits left at zero.
func (o Options) withDefaults(path string) (Options, error) {
	if path == "" {
		return o, &FieldError{Field: "path", Reason: "must not be empty"}
	}
	if o.MaxBatch < 0 {
		return o, &FieldError{Field: "MaxBatch", Reason: "must not be negative"}
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.MaxGroupDelay == 0 {
		o.MaxGroupDelay = DefaultMaxGroupDelay
	}
	if o.checkpointBytes == 0 {
		o.checkpointBytes = defaultCheckpointBytes
	}
	if o.checkpointInterval == 0 {
		o.checkpointInterval = defaultCheckpointInterval
	}
	return o, nil
}

// openDB opens (creating when missing) and checks the bolt file at path, with its
// schema in place; created tells whether the file is new.
func openDB(path string, opts Options) (db *bolt.DB, created bool, err error) {
	tuning := defaultTuning
	if opts.tuning != nil {
		tuning = *opts.tuning
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("store: create directory %s: %w", dir, diskErr(err))
	}
	bo := &bolt.Options{
		Timeout:        opts.LockTimeout,
		NoSync:         opts.NoSync,
		FreelistType:   tuning.freelist,
		NoFreelistSync: tuning.noFreelistSync,
	}
	created, err = createIfMissing(path, bo)
	if err != nil {
		return nil, false, err
	}
	db, err = openChecked(path, bo)
	if err != nil {
		return nil, false, err
	}
	if err := initSchema(db); err != nil {
		_ = db.Close()
		return nil, false, fmt.Errorf("store: %s: %w", path, err)
	}
	return db, created, nil
}

// initSchema creates the buckets on a new file and checks the schema version
// of an existing one.
func initSchema(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(metaBucket)
		if meta == nil {
			if tx.Bucket(recordsBucket) != nil {
				return fmt.Errorf("bucket %q exists without %q: %w", recordsBucket, metaBucket, ErrSchema)
			}
			var err error
			if meta, err = tx.CreateBucket(metaBucket); err != nil {
				return fmt.Errorf("create bucket %q: %w", metaBucket, err)
			}
			if err := meta.Put(schemaKey, []byte(strconv.Itoa(schemaVersion))); err != nil {
				return fmt.Errorf("write schema version: %w", err)
			}
		}
		raw := meta.Get(schemaKey)
		v, err := strconv.Atoi(string(raw))
		if err != nil {
			return fmt.Errorf("meta key %q is %q, not a number: %w", schemaKey, raw, ErrSchema)
		}
		if v != schemaVersion {
			return fmt.Errorf("schema version %d, this build supports %d: %w", v, schemaVersion, ErrSchema)
		}
		if _, err := tx.CreateBucketIfNotExists(recordsBucket); err != nil {
			return fmt.Errorf("create bucket %q: %w", recordsBucket, err)
		}
		return nil
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// Put writes r, replacing any record with the same owner. It returns nil only
// once the record is on disk (fsynced) together with every operation enqueued
// before it.
//
// If ctx ends while the operation is queued or committing, Put returns
// ctx.Err() but the record may still be written: the caller must treat the
// outcome as unknown (for example by issuing a Delete, which the FIFO order
// applies after this Put). If ctx ends before the operation was queued,
// nothing is written.
func (s *Store) Put(ctx context.Context, r Record) error {
	key, value, err := encodeRecord(r)
	if err != nil {
		return fmt.Errorf("store: put %s: %w", r.Owner, err)
	}
	if err := s.submit(ctx, op{key: key, value: value}); err != nil {
		return fmt.Errorf("store: put %s: %w", r.Owner, err)
	}
	return nil
}

// Delete removes the record of o. Deleting a missing owner is not an error.
// It returns nil only once the deletion is durable together with every
// operation enqueued before it; ctx behaves as for Put.
func (s *Store) Delete(ctx context.Context, o Owner) error {
	if err := validateOwner(o, "owner."); err != nil {
		return fmt.Errorf("store: delete %s: %w", o, err)
	}
	if err := s.submit(ctx, op{key: ownerKey(o), del: true}); err != nil {
		return fmt.Errorf("store: delete %s: %w", o, err)
	}
	return nil
}

// Get returns the record of o and whether it exists. A record that cannot be
// decoded is an error matching ErrCorrupt that names the key and field.
func (s *Store) Get(ctx context.Context, o Owner) (Record, bool, error) {
	if err := validateOwner(o, "owner."); err != nil {
		return Record{}, false, fmt.Errorf("store: get %s: %w", o, err)
	}
	if err := s.readable(ctx); err != nil {
		return Record{}, false, err
	}
	k := ownerKey(o)
	v, err := s.get(nil, k)
	if err != nil {
		return Record{}, false, fmt.Errorf("store: get %s: %w", o, err)
	}
	if v == nil {
		return Record{}, false, nil
	}
	r, err := decodeRecord(k, v)
	if err != nil {
		return Record{}, false, fmt.Errorf("store: get %s: %w", o, err)
	}
	return r, true, nil
}

// List returns every record, sorted by owner (container ID, then interface
// name). It is fail-closed: if any record cannot be decoded it returns no
// records and an error matching ErrCorrupt that names the key and field.
// Skipping a record would let its address be handed out again, so an
// operator must look (Check lists every bad key at once) and remove it with
// Delete.
func (s *Store) List(ctx context.Context) ([]Record, error) {
	if err := s.readable(ctx); err != nil {
		return nil, err
	}
	var out []Record
	// Keys come in byte order, and the key encoding makes that the owner order; no
	// sort needed.
	err := s.forEachRecord(ctx, func(k, v []byte) error {
		r, err := decodeRecord(k, v)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list: %w", err)
	}
	return out, nil
}

// Check decodes every record and returns all problems at once (joined
// *CorruptErrors, in key order), or nil. It is for operators and start-up
// diagnostics; List stops at the first bad record.
func (s *Store) Check(ctx context.Context) error {
	if err := s.readable(ctx); err != nil {
		return err
	}
	var errs []error
	err := s.forEachRecord(ctx, func(k, v []byte) error {
		if _, err := decodeRecord(k, v); err != nil {
			errs = append(errs, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: check: %w", err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("store: check: %d corrupt records: %w", len(errs), errors.Join(errs...))
	}
	return nil
}

func (s *Store) readable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	return nil
}

// Close stops accepting writes, commits everything already queued, waits for
// it and closes the file. Calling Close again returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue)
	s.mu.Unlock()
	<-s.done
	if err := s.walFiles.close(); err != nil {
		_ = s.db.Close()
		return fmt.Errorf("store: close %s: %w", s.path, err)
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("store: close %s: %w", s.path, err)
	}
	s.log.Debug("store closed")
	return nil
}
