package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/internal/testenv"
)

// testWaitFor waits (generously: CI is loaded) until cond holds.
func testWaitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "the store", func() (bool, string) { return cond(), "not yet" })
}

// faultWAL fails the log's writes or syncs on demand.
type faultWAL struct {
	walIO
	mu                sync.Mutex
	writeErr, syncErr error
}

func (f *faultWAL) set(writeErr, syncErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writeErr, f.syncErr = writeErr, syncErr
}

func (f *faultWAL) WriteAt(seg int, b []byte, off int64) error {
	f.mu.Lock()
	err := f.writeErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.walIO.WriteAt(seg, b, off)
}

func (f *faultWAL) Sync(seg int) error {
	f.mu.Lock()
	err := f.syncErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.walIO.Sync(seg)
}

// openFaulty opens a store whose log fails when told to. Checkpoints wait for Close
// unless opts asks for them.
func openFaulty(t *testing.T, path string, opts Options) (*Store, *faultWAL) {
	t.Helper()
	fw := &faultWAL{}
	opts.walIO = func(files walFiles) walIO { fw.walIO = files; return fw }
	if opts.checkpointInterval == 0 {
		opts.checkpointInterval = time.Hour
	}
	return openTest(t, path, opts), fw
}

// copyStore copies the store file and its log to a new directory (the store must not be
// checkpointing) and returns the copy's path.
func copyStore(t *testing.T, s *Store) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "allot.db")
	for i, src := range append([]string{s.Path()}, s.walPaths...) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		to := dst
		if i > 0 {
			to = WALPaths(dst)[i-1]
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestWALReplay: what the log holds beyond the file comes back at Open, puts, deletes
// and the node state alike, and is then in the file.
func TestWALReplay(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "allot.db"), Options{checkpointInterval: time.Hour})
	for i := range 10 {
		if err := s.Put(ctx, testRecord(fmt.Sprintf("c%d", i), "eth0", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, Owner{"c3", "eth0"}); err != nil {
		t.Fatal(err)
	}
	st := NodeState{Node: "n1", Source: "allotnode", Saved: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if err := s.PutNodeState(ctx, st); err != nil {
		t.Fatal(err)
	}
	want, err := s.List(ctx)
	if err != nil || len(want) != 9 {
		t.Fatalf("List = %d, %v", len(want), err)
	}
	if seq := s.walSeq(); seq != 0 {
		t.Fatalf("the file holds frames up to %d before any checkpoint", seq)
	}
	c := openTest(t, copyStore(t, s), Options{})
	got, err := c.List(ctx)
	if err != nil || len(got) != len(want) {
		t.Fatalf("after replay List = %d records, %v; want %d", len(got), err, len(want))
	}
	for i := range got {
		if !equalRecord(got[i], want[i]) {
			t.Fatalf("after replay record %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if ns, ok, err := c.NodeState(ctx); err != nil || !ok || ns.Node != "n1" {
		t.Fatalf("node state after replay = %+v, %v, %v", ns, ok, err)
	}
	if seq := c.walSeq(); seq != 12 {
		t.Fatalf("after replay the file holds frames up to %d, want 12", seq)
	}
}

// TestCheckpointsRecycleSegments: with a tiny checkpoint size the log switches segments
// and reuses them many times; reads stay right throughout, and Close leaves everything
// in the file.
func TestCheckpointsRecycleSegments(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "allot.db")
	s := openTest(t, path, Options{NoSync: true, checkpointBytes: 2048})
	for i := range 400 {
		if err := s.Put(ctx, testRecord(fmt.Sprintf("c%03d", i), "eth0", i)); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := s.Delete(ctx, Owner{fmt.Sprintf("c%03d", i/2), "eth0"}); err != nil {
				t.Fatal(err)
			}
		}
		if i%20 == 19 { // let the checkpoint finish, so the next writes start another
			testWaitFor(t, func() bool { return !s.ckptBusy.Load() })
		}
	}
	want, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Checkpoints; n < 15 {
		t.Fatalf("%d checkpoints, want many", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c := openTest(t, path, Options{})
	got, err := c.List(ctx)
	if err != nil || len(got) != len(want) {
		t.Fatalf("after reopen List = %d records, %v; want %d", len(got), err, len(want))
	}
}

// TestWALDamage: a torn tail (the last frame, never acknowledged) is dropped, while a
// damaged frame with newer frames after it (so it was acknowledged) makes the store
// unusable with an error naming the segment, the offset and the frame.
func TestWALDamage(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "allot.db"), Options{NoSync: true, checkpointInterval: time.Hour})
	for i := range 5 {
		if err := s.Put(ctx, testRecord(fmt.Sprintf("c%d", i), "eth0", i)); err != nil {
			t.Fatal(err)
		}
	}
	frames := segmentFrames(t, s.walPaths[0])
	if len(frames) != 5 {
		t.Fatalf("%d frames in the log, want 5", len(frames))
	}
	damage := func(frame int) string {
		p := copyStore(t, s)
		f, err := os.OpenFile(WALPaths(p)[0], os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{0xff}, frames[frame].off+frameHeaderSize+3); err != nil {
			t.Fatal(err)
		}
		return p
	}
	torn := openTest(t, damage(4), Options{})
	if list, err := torn.List(ctx); err != nil || len(list) != 4 {
		t.Fatalf("after a torn last frame List = %d records, %v; want 4", len(list), err)
	}
	p := damage(2)
	_, err := Open(ctx, p, Options{})
	var we *WALError
	if !errors.Is(err, ErrUnusable) || !errors.As(err, &we) || we.Seq != 3 || we.Offset != frames[2].off ||
		!strings.Contains(err.Error(), WALPaths(p)[0]) || !strings.Contains(err.Error(), "frame 4") {
		t.Fatalf("Open with a damaged middle frame = %v, want an unusable store naming frame 3 at offset %d", err, frames[2].off)
	}
}

// segmentFrames returns the run of frames of a segment file.
func segmentFrames(t *testing.T, path string) []walFrame {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scanSegment(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return sc.run
}

// TestWALOfAnotherFile: segments of another store file are refused rather than applied;
// segments left beside a store file created new (the old one deleted) are removed.
func TestWALOfAnotherFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	for _, p := range []string{a, b} {
		s := openTest(t, p, Options{NoSync: true})
		if err := s.Put(ctx, testRecord("c", "eth0", 1)); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(WALPaths(b)[0], WALPaths(a)[0]); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, a, Options{NoSync: true})
	if !errors.Is(err, ErrUnusable) || !strings.Contains(err.Error(), "belongs to another store file") || !strings.Contains(err.Error(), WALPaths(a)[0]) {
		t.Fatalf("Open beside another file's log = %v", err)
	}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, a, Options{NoSync: true})
	if list, err := s.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("a store created new beside an old log holds %d records, %v", len(list), err)
	}
}

// powerCut records what the log writes and syncs, and makes the disk image a power cut
// would leave: each segment as of its last sync, plus any later write whole, torn or not
// at all; and the store file as of its last checkpoint (bbolt's own commits sync).
type powerCut struct {
	walIO
	mu      sync.Mutex
	cut     bool
	durable [walSegments][]byte
	pending [walSegments][]pendingWrite
	bolt    []byte
}

type pendingWrite struct {
	off int64
	b   []byte
}

var errPowerCut = errors.New("power cut")

func (p *powerCut) WriteAt(seg int, b []byte, off int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return errPowerCut
	}
	p.pending[seg] = append(p.pending[seg], pendingWrite{off, append([]byte(nil), b...)})
	return p.walIO.WriteAt(seg, b, off)
}

func (p *powerCut) Sync(seg int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return errPowerCut
	}
	if err := p.walIO.Sync(seg); err != nil {
		return err
	}
	for _, w := range p.pending[seg] {
		p.durable[seg] = writeAt(p.durable[seg], w.b, w.off)
	}
	p.pending[seg] = nil
	return nil
}

func writeAt(img, b []byte, off int64) []byte {
	if end := off + int64(len(b)); end > int64(len(img)) {
		img = append(img, make([]byte, end-int64(len(img)))...)
	}
	copy(img[off:], b)
	return img
}

// snapshot records the store file after a checkpoint.
func (p *powerCut) snapshot(path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	p.bolt = b
}

// cutNow cuts the power and writes what survives into dir.
func (p *powerCut) cutNow(rng *rand.Rand, dir string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	path := filepath.Join(dir, "allot.db")
	if err := os.WriteFile(path, p.bolt, 0o600); err != nil {
		return "", err
	}
	for seg, img := range p.durable {
		img = append([]byte(nil), img...)
		for _, w := range p.pending[seg] {
			switch rng.IntN(3) {
			case 0: // lost
			case 1:
				img = writeAt(img, w.b, w.off)
			default: // torn: some 512-byte sectors reached the disk
				for s := 0; s < len(w.b); s += 512 {
					if rng.IntN(2) == 0 {
						img = writeAt(img, w.b[s:min(s+512, len(w.b))], w.off+int64(s))
					}
				}
			}
		}
		if err := os.WriteFile(WALPaths(path)[seg], img, 0o600); err != nil {
			return "", err
		}
	}
	return path, nil
}

// openRecorded opens the store at path with its log recorded for a power cut.
func openRecorded(t *testing.T, path string) (*Store, *powerCut) {
	t.Helper()
	pc := &powerCut{}
	opts := Options{checkpointBytes: 16 << 10, Logger: nil}
	opts.walIO = func(files walFiles) walIO {
		pc.walIO = files
		for i, f := range files {
			b, err := os.ReadFile(f.Name())
			if err != nil {
				panic(err)
			}
			pc.durable[i] = b
		}
		return pc
	}
	s, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	pc.snapshot(path)
	s.afterCheckpoint = func() { pc.snapshot(path) }
	return s, pc
}

// TestPowerCut cuts the power under 16 writers at random moments: what survives is what
// was fdatasynced (plus any unsynced write whole, torn or lost), and the store file as
// of its last checkpoint. After each cut every acknowledged Put must be there intact,
// every acknowledged Delete gone, and no address held twice; the next round writes on
// the recovered store, so replay over reused segments is tested too.
func TestPowerCut(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("ALLOT_STORE_CRASH_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (rerun with ALLOT_STORE_CRASH_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	path := filepath.Join(t.TempDir(), "allot.db")
	acks := newAckLog()
	const rounds = 8
	for round := range rounds {
		s, pc := openRecorded(t, path)
		acks.verify(t, s, round)
		before := len(acks.kind)
		cut := func() {
			var err error
			if path, err = pc.cutNow(rng, t.TempDir()); err != nil {
				t.Error(err)
			}
		}
		powerCutRound(s, round, acks, time.Duration(20+rng.IntN(200))*time.Millisecond, cut)
		_ = s.Close() // writes after the cut fail; the image is already taken
		t.Logf("round %d: %d owners acknowledged before the cut, %d checkpoints", round, len(acks.kind)-before, s.Stats().Checkpoints)
	}
	s, _ := openRecorded(t, path)
	acks.verify(t, s, rounds)
	_ = s.Close()
}

// ackLog is what the writers were told: the last acknowledged op of each owner, and the
// highest record index acknowledged per (round, worker).
type ackLog struct {
	mu   sync.Mutex
	kind map[Owner]string
	last map[[2]int]int
}

func newAckLog() *ackLog { return &ackLog{kind: map[Owner]string{}, last: map[[2]int]int{}} }

func (a *ackLog) ack(round, worker, i int, o Owner, kind string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.kind[o] = kind
	a.last[[2]int{round, worker}] = max(a.last[[2]int{round, worker}], i)
}

// powerCutRound writes from 16 goroutines, cuts the power after d and returns once the
// writers have stopped (every write after the cut fails).
func powerCutRound(s *Store, round int, acks *ackLog, d time.Duration, cut func()) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				r := crashRecord(round, w, i)
				if s.Put(ctx, r) != nil {
					return
				}
				acks.ack(round, w, i, r.Owner, "P")
				if i%4 == 3 {
					if s.Delete(ctx, r.Owner) != nil {
						return
					}
					acks.ack(round, w, i, r.Owner, "D")
				}
			}
		})
	}
	time.Sleep(d) // sleep: the writers run for real time before the power is cut
	cut()
	wg.Wait()
}

// verify checks the recovered store against the acknowledged ops.
func (a *ackLog) verify(t *testing.T, s *Store, round int) {
	t.Helper()
	list, err := s.List(context.Background())
	if err != nil {
		t.Fatalf("round %d: List after power cut: %v", round, err)
	}
	present := map[Owner]Record{}
	held := map[string]Owner{}
	for _, r := range list {
		present[r.Owner] = r
		for _, ad := range r.Addresses {
			if prev, dup := held[ad.Prefix.String()]; dup {
				t.Fatalf("round %d: address %s held by %s and %s", round, ad.Prefix, prev, r.Owner)
			}
			held[ad.Prefix.String()] = r.Owner
		}
	}
	for o, kind := range a.kind {
		r, ok := present[o]
		if kind == "D" && ok {
			t.Fatalf("round %d: acknowledged Delete of %s undone", round, o)
		}
		if kind != "P" {
			continue
		}
		var rd, w, i int
		if _, err := fmt.Sscanf(o.ContainerID, "r%d-w%d-%d", &rd, &w, &i); err != nil {
			t.Fatalf("bad owner %s", o)
		}
		if !ok {
			// The worker's last op may be a Delete that reached the disk unacknowledged.
			if i%4 == 3 && i == a.last[[2]int{rd, w}] {
				continue
			}
			t.Fatalf("round %d: acknowledged Put of %s lost", round, o)
		}
		if want := crashRecord(rd, w, i); !equalRecord(r, want) {
			t.Fatalf("round %d: record %s = %+v, want %+v", round, o, r, want)
		}
	}
}

// TestInspectAppliesLog: the offline tools see what the log holds beyond the file (a
// store that stopped without a checkpoint), and Salvage carries it into the new file.
func TestInspectAppliesLog(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "allot.db"), Options{NoSync: true, checkpointInterval: time.Hour})
	for i := range 5 {
		if err := s.Put(ctx, testRecord(fmt.Sprintf("c%d", i), "eth0", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, Owner{"c1", "eth0"}); err != nil {
		t.Fatal(err)
	}
	path := copyStore(t, s)
	rep, err := Inspect(ctx, path, InspectOptions{})
	if err != nil || !rep.OK() || rep.Logged != 6 || len(rep.Records) != 4 || rep.Records[1].Owner.ContainerID != "c2" {
		t.Fatalf("Inspect = %d records, %d frames from the log, problems %v, %v; want 4 records from 6 frames", len(rep.Records), rep.Logged, rep.Problems, err)
	}
	dst := filepath.Join(t.TempDir(), "salvaged.db")
	if _, err := Salvage(ctx, path, dst, InspectOptions{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	c := openTest(t, dst, Options{NoSync: true})
	if list, err := c.List(ctx); err != nil || len(list) != 4 {
		t.Fatalf("salvaged store holds %d records, %v; want 4", len(list), err)
	}
}

// gateWAL holds each fdatasync until the test releases it.
type gateWAL struct {
	walIO
	entered chan struct{}
	release chan struct{}
}

func (g *gateWAL) Sync(seg int) error {
	g.entered <- struct{}{}
	<-g.release
	return g.walIO.Sync(seg)
}

// TestWriterAnsweredOnlyAfterItsSync: a writer hears nothing before the fdatasync of the
// frame that carries it returned, also when the writer before it gave up (ctx ended)
// while its frame was syncing: that op is the committer's until answered, so it must not
// be recycled into the next writer's, which would then take the earlier frame's answer.
func TestWriterAnsweredOnlyAfterItsSync(t *testing.T) {
	g := &gateWAL{entered: make(chan struct{}), release: make(chan struct{})}
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "allot.db"), Options{
		checkpointInterval: time.Hour,
		walIO:              func(files walFiles) walIO { g.walIO = files; return g },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // also after a failure: let every sync pass while the store closes
		closed := make(chan struct{})
		go func() {
			for {
				select {
				case <-g.entered:
				case g.release <- struct{}{}:
				case <-closed:
					return
				}
			}
		}()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		close(closed)
	})
	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() { doneA <- s.Put(ctxA, testRecord("a", "eth0", 1)) }()
	<-g.entered // A's frame is syncing
	cancelA()
	if err := <-doneA; !errors.Is(err, context.Canceled) {
		t.Fatalf("A: got %v, want context.Canceled", err)
	}
	doneB := make(chan error, 1)
	go func() { doneB <- s.Put(context.Background(), testRecord("b", "eth0", 2)) }()
	testWaitFor(t, func() bool { return s.Stats().Queued == 1 })
	g.release <- struct{}{} // A's frame synced: A's op is answered
	<-g.entered             // B's frame is syncing
	select {
	case err := <-doneB:
		t.Fatalf("B answered (%v) before the fdatasync of its frame returned", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.release <- struct{}{}
	if err := <-doneB; err != nil {
		t.Fatalf("B: %v", err)
	}
	for _, cid := range []string{"a", "b"} {
		if _, ok, err := s.Get(context.Background(), Owner{ContainerID: cid, IfName: "eth0"}); err != nil || !ok {
			t.Errorf("record %s: found %v, err %v", cid, ok, err)
		}
	}
}
