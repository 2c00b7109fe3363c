// Package store is allot's durable embedded state: a map from Owner
// (container ID, interface) to the Record of its allocation, kept in one
// bbolt file on the node behind a write-ahead log of its own.
//
// # Guarantees
//
//   - Put and Delete return nil only after the change is in the write-ahead
//     log and fdatasynced. The daemon answers a CNI ADD only after its Put
//     returned.
//   - Writes are applied in arrival order, within and across batches. If an
//     operation is durable, every operation queued before it is durable too.
//     core/ipam relies on this: it frees an address in memory only after
//     the Delete of its owner returned, and a Put whose wait was abandoned
//     (context ended) is overridden by any later Delete of the same owner.
//   - A crash (SIGKILL, panic, power loss) at any instant leaves the file
//     and its log consistent, with every acknowledged operation present and
//     each unacknowledged one either wholly applied or absent. TestCrashRecovery
//     checks this by killing a writing process at random moments, and
//     TestPowerCut by cutting the power under 16 writers (below).
//   - On start the daemon calls List and rebuilds its memory from it.
//
// A context that ends while an operation is queued or committing makes Put
// or Delete return ctx.Err(), but the operation may still be committed: the
// outcome is unknown, and the caller repairs it (a later Delete wins by FIFO
// order). If the context had ended before the operation was queued, nothing
// was written.
//
// An error from Put or Delete likewise means "not known to be durable", never
// "known not to be written". A failed write to the log is clean and the store
// goes on. A failed fdatasync of the log, or a checkpoint whose bbolt commit
// failed after its meta page was written, leaves the outcome on disk unknown,
// and after a failed fsync Linux may have dropped the dirty pages, so the store
// refuses all later writes with ErrFailed: the daemon must restart and rebuild
// from what the disk really holds. Restarting is cheap; a daemon whose memory
// disagrees with its disk can hand out an address twice.
//
// # Why bbolt
//
// bbolt (go.etcd.io/bbolt) is a single-file copy-on-write B+tree with
// serialisable ACID transactions, written in pure Go (no cgo, so allotd stays
// a static binary), and it has run for years under etcd and containerd,
// which need exactly this: a small node-local database that must survive
// crashes. Reads go through mmap without copying or locking out the writer.
//
//   - SQLite is excellent but means cgo or a transpiled engine, and a query
//     language we do not need for one key-value table.
//   - Pebble (an LSM) is built for write volumes far beyond ours, keeps
//     many files and background compactions, and has a larger footprint.
//
// bbolt allows one writer at a time and each commit costs two fsyncs plus the
// pages of the B+tree it rewrites: on the 2-core development machine a commit of
// one record took 3-4 ms, against 0.3-0.8 ms for an fdatasync of a few KiB
// appended to a file. That is why writes go to a write-ahead log first and reach
// bbolt in large checkpoints (below).
//
// # Write-ahead log
//
// Acknowledged writes live in a log of two segment files beside the store file
// (allot.db.wal0 and allot.db.wal1, WALPaths) until a checkpoint has moved them
// into the bbolt file. Each group commit (below) appends one frame to the active
// segment and fdatasyncs it, and only then answers its ops: one write(2) and one
// fdatasync per batch. The format (wal.go) is a 32-byte segment header (magic,
// version, checksum, and the id of the store file it belongs to, meta key
// "wal_id"), then frames at 8-byte boundaries: a 24-byte header (payload length,
// op count, sequence number, payload CRC-32C and a CRC-32C of the header itself),
// then the ops (kind, key, value). Segments grow by zeroed 1 MiB chunks ahead of
// their frames, so a frame overwrites allocated blocks and its fdatasync writes
// no metadata; the chunk is only an optimisation and is given back when a full
// disk refuses it.
//
// Reads see the log through an overlay (overlay.go): the latest write of each key
// since the last checkpoint, filled after the frame is synced, looked up before
// bbolt. List merges it with bbolt's cursor in key order.
//
// A checkpoint (checkpoint.go) starts when the active segment passes 2 MiB, or
// once a second if anything was written: between two frames the committer
// freezes the overlay, switches to the other segment and hands the frozen writes
// to the checkpointer, which writes them into bbolt in one transaction, in key order
// (each lands beside the previous one; in the map's random order a checkpoint of 5,000
// random container IDs took about 1.5x as long, BenchmarkCheckpoint), together
// with the sequence number of the last frame they hold (meta "wal_seq"). Once that
// commit is synced the old segment may be written over from its start. Only one
// checkpoint runs at a time; while it runs the active segment just grows. A
// checkpoint that fails cleanly (nothing reached the meta page: a full disk) is
// retried with a growing pause, the frozen writes staying in the overlay and in
// the log. Close checkpoints whatever the log holds, so a closed store's bbolt
// file is complete by itself.
//
// Open replays the log before anything else: it reads both segments, takes the
// run of frames with consecutive sequence numbers from each segment's start,
// keeps the frames after wal_seq, which must follow each other from wal_seq+1,
// applies them to bbolt in one transaction and records the last as
// checkpointed. A frame is taken whole or not at all (its checksums), and a
// reused segment's older frames stop the run by their lower numbers. A run ends
// at a torn tail when the power was cut during a frame's fdatasync, which is
// normal (that frame was never acknowledged) and ignored. It is damage when an
// intact frame numbered after the run's end exists anywhere in the log: it was
// written after the run's last frame was synced, so the frame missing in between
// was acknowledged. Open then fails with an *UnusableError wrapping a *WALError
// naming the segment, the offset and the frame, as it does for a segment of
// another store file (a different wal_id). Segments left beside a store file that
// Open creates new are removed (they belong to a file that is gone), and
// MoveAside moves a damaged file's segments along with it. Running allotd with
// store.noSync can leave a frame synced after one that was not, so a power cut
// can make such a log refuse to open: noSync is for tests only.
//
// TestPowerCut simulates the power cut: a layer under the log records every write
// and fdatasync, and the image a cut leaves is each segment as of its last
// fdatasync plus, for each later write, the whole write, nothing, or a random
// subset of its 512-byte sectors, and the store file as of its last checkpoint
// (bbolt syncs its own commits). Eight cuts at random moments under 16 writers,
// each round writing on the store the previous cut left, with checkpoints every
// 16 KiB so segments are reused many times: every acknowledged Put is there
// intact, every acknowledged Delete is gone, no address is held twice.
// FuzzWALFrame fuzzes the frame and segment readers.
//
// Measured on the shared 2-core development machine while it ran 10 to 40 processes
// (load average, so single figures swing 2-3x; old and new binaries alternated): a lone
// Put, one commit each, went from 195-690/s with bbolt commits to 950-1,900/s with the
// log (BenchmarkPutSerial); 32 writers went from 2,700-5,500/s to 1,900-13,900/s
// (BenchmarkPutParallel), and BenchmarkGroupDelay's wait/sync reached 26,000-55,000/s
// against 36,000-43,000/s for wait/nosync. Through the daemon (BenchmarkAPIAllocate
// durable/framed, 32 clients) durable runs reached 0.55-0.75x their nosync twins as the
// mean of six, at 8,000-25,000 allocations/s: there the CPU (about 40 µs per allocation
// for the API, the manager and the store, 35 once records and answers were encoded by
// hand) is the limit, not the disk, as long as a commit is short. When others' load
// stretches commits to 0.6-1 ms, 32 callers form two groups of about 16 that alternate,
// each waiting for the other's commit and its own, so durable is bounded near 16 per
// commit time and saving CPU widens its gap to nosync (six alternated pairs at load 7-12:
// durable 12,000 -> 14,900/s, nosync 20,900 -> 26,800/s, the ratio 0.75 -> 0.50). make bench runs
// the ratio six times, for durable and for durable-nowait (the same without the wait for
// expected callers described under Group commit), and reports each run's mean commit time
// (write + fdatasync: 150-400 µs on the development machine lightly loaded, up to 1.7 ms under
// others' load) beside its writes per commit, which tells a slow disk from a busy CPU.
//
// Why not bbolt alone, or a log of someone else's: bbolt's commit is the cost
// (above), and its NoSync mode with a log in front would leave the file's meta
// page pointing at pages that never reached the disk after a power cut; here
// bbolt only ever sees fully synced commits. etcd's WAL and Pebble's are tied to
// their stores. The log stays small (about 1,000 lines with replay, the overlay
// and checkpoints) because it only carries whole-value puts and deletes, replayed
// in order.
//
// # Group commit
//
// One goroutine owns all writes. Put and Delete validate and encode on the
// caller's goroutine (a bad record is refused alone and never fails a batch),
// enqueue an op on a FIFO channel and wait on the op's own result channel
// (or ctx.Done()). The committer blocks for one op, then takes every op
// already queued, up to Options.MaxBatch (default 1024), appends them in
// order as one frame of the log, fdatasyncs it and answers them all.
// While that fdatasync runs, new ops pile up in the queue and become the
// next batch. So an idle store commits a lone request at once, and a loaded
// store amortises one commit over as many requests as arrived during the
// previous one: the batch size follows the load by itself.
//
// One refinement: callers that wait for their answer before writing again
// (allot-cni, CNI runtimes) form a closed loop, and with N of them the batches
// settle at N/2: those answered by one commit come back while the next one is
// already running. So the committer expects the callers it just answered to
// return and waits for them before committing, for at most twice the last
// commit's duration (Options.MaxGroupDelay caps it; gatherCommits says why
// twice: through the daemon the callers come back only once the CPU has
// served them again). A lone caller never
// waits, since it is the whole expected batch. BenchmarkGroupDelay measures
// it: with 32 writers the batch grows from 16 to 31 and throughput with it.
//
// Commits are not pipelined. A committer that writes the next frame and starts its
// fdatasync while the previous one's runs (at most two at once, answers in frame
// order, the closed loop's callers split into two alternating frames so that the CPU
// serves one half while the other half's fdatasync runs) was built twice and measured
// slower. On the 2-core development machine an fdatasync costs some 45-50 µs of CPU
// (CPU profile of BenchmarkAPIAllocate durable/framed), and two half-size frames double
// the fdatasyncs and the rounds of wake-ups and socket writes per allocation: about 25%
// more CPU per allocation (36 -> 42 µs), more than the overlap gave back. Against the
// store here in the same runs (six alternated pairs each), it reached 0.69-0.92x (mean
// 0.82) where this store's commits took 170-250 µs, and 0.72-1.29x (mean 1.03) under
// others' load, where they took 210-760 µs.
//
// Two more were measured and not taken. Writing the frames with O_DIRECT (whole 4 KiB
// blocks, the bytes before a frame carried again in its first block) made a lone 4 KiB
// write and fdatasync cheaper on the development machine (79 against 99 µs, 39 against 58
// µs of CPU), but not the closed loop's commits of 20-30 writes: alternated on the quiet
// machine, 150-197 µs per commit and 0.56x its no-fsync twin, against 162-196 µs and 0.59x.
// Committing half of the closed loop's callers at a time (so that the other half keeps the
// CPU busy during the fdatasync) made commits of 15 instead of 28 at the same throughput:
// an execution trace shows the CPU still idle during a third of the fdatasyncs with
// callers runnable, because a goroutine woken onto an idle virtual CPU there waits some
// 20 µs (a pipe's round trip between two processes takes 5 µs on one CPU, 43 µs across
// two). On such machines the gap to no-fsync is the loop's latency, not the disk's
// throughput: the answered callers come back only after the CPU has served them all
// (about 350 µs for 29 of them), and then wait for their commit (about 190 µs).
//
// bbolt's own DB.Batch is not used: it waits up to MaxBatchDelay (10 ms by
// default) for a batch to fill, which adds that delay to every request on an
// idle node (a lone CNI ADD, the common case) and still commits on a timer
// rather than as soon as the disk is free. It also retries a failing batch
// function one op at a time outside the batch, which breaks the FIFO
// guarantee above.
//
// If a frame's write fails, every op in it gets the same wrapped error and
// none of them is applied: the next frame takes the same place and number.
//
// # Encoding
//
// The file has two buckets: "meta", holding the schema version ("schema" =
// "1") and, in agent mode, the node state (PutNodeState: the node's blocks as
// last read from the API server, nodestate.go), and "records". Open creates them on a new file and refuses a file of
// another schema version (ErrSchema) rather than misread it.
//
// A record's key is ContainerID, NUL, IfName. NUL sorts before every other
// byte, so bbolt's key order is the (ContainerID, IfName) order and List
// needs no sort. Owners may not contain NUL or '/' (which would make
// Owner.String ambiguous); CNI container IDs and interface names never do.
//
// A record's value is JSON with a version field "v" (currently 1). JSON
// over a compact binary encoding because records are small (about 400
// bytes), written at most a few hundred times a second, and read in bulk only
// at start-up (a few tens of µs per record): its cost is invisible next to an
// fsync, while an operator can read it with `bbolt get` and a decoder error
// can name the field. Put encodes with a hand-written appender (codecjson.go) that
// writes exactly encoding/json's bytes without its reflection, since every durable
// allocation pays for it; FuzzEncodeRecord holds the two to the same output. Decoding is strict (unknown fields, a mismatch between
// key and stored owner, an unparsable address are errors) and never panics
// (FuzzDecodeRecord).
//
// # Bad records
//
// Open does not decode records, so a bad record never stops the file from
// opening. List is fail-closed: it returns an error matching ErrCorrupt, a
// *CorruptError naming the key and, through *FieldError, the field. Skipping
// a record would let its address be handed out again. Check lists every bad
// record at once for an operator, Get of a good record still works, and
// Delete removes a bad record without decoding it.
//
// # bbolt settings
//
// The freelist is the hashmap type and is not synced (NoFreelistSync):
// commits write one page fewer, and Open rebuilds the freelist by scanning
// the file, which for a node's few thousand records takes milliseconds.
// BenchmarkBoltTuning measures the four combinations with real fsync. On the
// 2-core development machine, not syncing the freelist made commits about
// 1.5x faster than bbolt's defaults (serial 955 vs 612 Puts/s, 32 writers
// 8,900 vs 5,900 Puts/s); the freelist type alone made no difference beyond
// noise at this size, and the hashmap is kept because the array type slows
// down as a long-lived file fragments.
//
// Open waits at most Options.LockTimeout (default 2 s) for the file lock, so
// a second daemon on the same file fails with "store: PATH is locked by
// another process" instead of hanging. The lock is taken before the file is
// checked (see below) and bbolt keeps it until Close.
//
// # Damaged files
//
// bbolt trusts its file: a truncated file faults when bbolt reads past its end through
// mmap, and a scribbled page sends it out of bounds, in goroutines of its own where no
// recover reaches. So Open walks the file first (inspect.go), on the descriptor bbolt
// then uses, under the file's lock: both meta pages, then every page reachable from the
// current one, each read with bounds checks (its header names its own position, it lies
// within the file and the high-water mark, it is reached once, its elements lie inside
// it and their keys are ordered within the range the parent gives), the root's buckets
// and the schema. A file that fails is an *UnusableError (ErrUnusable; ErrSchema too
// for another schema version) naming the file and the damage, and bbolt never sees it.
// bbolt's own Open then runs under recover with SetPanicOnFault as a second line. A
// foreign file (not bbolt, or a bbolt database without the "meta" bucket) is refused
// rather than given allot's buckets, and an empty file is damage: a new store is built
// in a temporary file and renamed into place whole, so an empty file at the path is
// never one of ours. Records are not decoded at Open (List and Check do that).
//
// The walk reads the file through a read-only mapping and costs about as much as
// bbolt's own Open: on a store of 100,000 records (85 MB) on the shared 2-core
// development machine, the walk took 75-195 ms and bbolt's Open 85-145 ms
// (BenchmarkOpenCheck, several runs; 500 records, more than a node holds, take about
// 0.5 ms). bbolt's Tx.Check (15-40 ms there) is not a substitute: it runs on
// bbolt's unchecked reads, after the point where a damaged file has already crashed.
//
// Inspect (`allotd store check`) also decodes every record and runs bbolt's Tx.Check,
// and applies the frames of the write-ahead log that the file does not hold yet
// (Report.Logged: a store that stopped without a checkpoint), so Salvage carries them
// into its new file; on a file whose meta bucket is damaged, where the checkpoint is
// unknown, it applies every intact frame in order (an old write applied again can only
// hold an address too long). Compact copies the meta bucket, wal_id and wal_seq with
// it, so the log stays the compacted file's.
// Salvage (`allotd store salvage`) writes every readable record into a new file and
// lists what it lost: single records that do not decode, and pages with the key range
// their parent gives them. On a damaged file it also searches the whole file's content
// for record values (strictly decoded, so garbage does not pass) that the tree did not
// return: records under a damaged page, but possibly also records deleted before the
// damage, which free pages keep. It keeps them (Report.Recovered): an address held too
// long is freed by DEL, GC or an agent's reclaim; an address forgotten is handed out
// twice. TestDamagedStoreFiles checks this against ipam on a few hundred damaged
// copies, and FuzzStoreFile does the same on fuzzed damage.
//
// Compact rewrites the file (bbolt.Compact) into a temporary file and renames it over
// the store while holding the store's lock; Open notices a rename that happened while
// it waited for the lock (the descriptor's file is no longer the path's) and opens
// again. The tools take the lock, shared for Inspect, exclusive for Compact, so they
// fail with ErrLocked beside a running daemon.
//
// # Full and read-only disks
//
// A frame's write that fails (ENOSPC, EROFS) answers its ops with an error naming the
// cause ("no space left on device", "read-only file system") and the segment, and
// the store goes on, so ADDs succeed again once space is back. A checkpoint on a
// full disk fails the same clean way: bbolt writes a batch's pages into free space,
// syncs them, and only then writes the meta page that makes them part of the
// database, so when Commit fails and the current meta page still names an older
// transaction nothing of it counts; the log keeps the writes and the checkpoint is
// tried again. Only a failure after the meta page was written (its fsync), or a
// failed fdatasync of the log, leaves the outcome unknown and stops writes with
// ErrFailed (above). A
// file system cannot be remounted read-only under an open store (the kernel answers
// busy); one the kernel turns read-only after an error gives EROFS, the clean case.
// TestFullDisk, TestReadOnlyRemount and TestFileSystemTurnsReadOnly check these on a
// tmpfs and a loop-mounted ext4 (root).
//
// # Metrics
//
// Stats returns counters (batches, ops, errors, last and largest batch, last
// and total commit time, queue depth, checkpoints) for core to export to
// Prometheus.
package store
