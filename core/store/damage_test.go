package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// populated writes n records to a new store file and returns its path.
func populated(t testing.TB, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "allot.db")
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = testRecord(fmt.Sprintf("c%05d", i), "eth0", i)
	}
	if err := writeNew(context.Background(), path, recs, true); err != nil {
		t.Fatal(err)
	}
	return path
}

// recordPages returns the pages of the records bucket's tree, leaves and branches.
func recordPages(t testing.TB, path string) (leaves, branches []uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		var walk func(id uint64)
		walk = func(id uint64) {
			raw := readPage(t, path, id, db.Info().PageSize)
			if binary.LittleEndian.Uint16(raw[8:]) == leafPageFlag {
				leaves = append(leaves, id)
				return
			}
			branches = append(branches, id)
			es, err := elements(raw, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				walk(e.child)
			}
		}
		walk(uint64(tx.Bucket(recordsBucket).Root()))
		return nil
	})
	return leaves, branches
}

func readPage(t testing.TB, path string, id uint64, ps int) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data[int(id)*ps : int(id+1)*ps]
}

// patch overwrites len(b) bytes of the file at off.
func patch(t testing.TB, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func fileHash(t testing.TB, path string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

// TestOpenRefusesDamagedFiles: each kind of damage gives one UnusableError naming the
// file and what is wrong, never a panic.
func TestOpenRefusesDamagedFiles(t *testing.T) {
	const ps = 4096
	cases := []struct {
		name   string
		damage func(t *testing.T, path string)
		want   string
		schema bool
	}{
		{"truncated to half", func(t *testing.T, path string) {
			st, _ := os.Stat(path)
			if err := os.Truncate(path, st.Size()/2); err != nil {
				t.Fatal(err)
			}
		}, "truncated", false},
		{"truncated to one page", func(t *testing.T, path string) { _ = os.Truncate(path, ps) }, "meta page 1", false},
		{"empty", func(t *testing.T, path string) { _ = os.Truncate(path, 0) }, "empty (0 bytes)", false},
		{"not bbolt", func(t *testing.T, path string) {
			_ = os.WriteFile(path, bytes.Repeat([]byte("hello, this is a text file\n"), 1000), 0o600)
		}, "not an allot store: not a bbolt database", false},
		{"another program's bbolt", func(t *testing.T, path string) {
			_ = os.Remove(path)
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			_ = db.Update(func(tx *bolt.Tx) error {
				b, _ := tx.CreateBucket([]byte("v1.containers"))
				return b.Put([]byte("k"), []byte("v"))
			})
			_ = db.Close()
		}, `not an allot store: a bbolt database of another program: buckets "v1.containers"`, false},
		{"schema 2", func(t *testing.T, path string) {
			db, _ := bolt.Open(path, 0o600, nil)
			_ = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(metaBucket).Put(schemaKey, []byte("2")) })
			_ = db.Close()
		}, "schema version 2, this build supports 1", true},
		{"both meta pages", func(t *testing.T, path string) {
			patch(t, path, 16+20, []byte("XXXXXXXX"))
			patch(t, path, ps+16+20, []byte("XXXXXXXX"))
		}, "both bbolt meta pages are damaged", false},
		{"leaf page scribbled", func(t *testing.T, path string) {
			leaves, _ := recordPages(t, path)
			patch(t, path, int64(leaves[len(leaves)/2])*ps+8, []byte{0x77, 0x00})
		}, "neither branch nor leaf", false},
		{"leaf element offsets", func(t *testing.T, path string) {
			leaves, _ := recordPages(t, path)
			patch(t, path, int64(leaves[0])*ps+16+4, []byte{0xff, 0xff, 0xff, 0x7f})
		}, "runs outside the page", false},
		{"branch points outside", func(t *testing.T, path string) {
			_, branches := recordPages(t, path)
			patch(t, path, int64(branches[0])*ps+16+8, []byte{0xff, 0xff, 0xff, 0, 0, 0, 0, 0})
		}, "outside the database", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := populated(t, 400)
			c.damage(t, path)
			_, err := Open(context.Background(), path, Options{NoSync: true})
			var ue *UnusableError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUnusable) {
				t.Fatalf("Open = %v, want an UnusableError", err)
			}
			if !strings.Contains(err.Error(), "store file "+path+" is unusable") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open error %q does not name the file and %q", err, c.want)
			}
			if errors.Is(err, ErrSchema) != c.schema {
				t.Fatalf("errors.Is(ErrSchema) = %v, want %v", !c.schema, c.schema)
			}
			// The walk ran under the lock, and the refusal released it.
			if _, err := Inspect(context.Background(), path, InspectOptions{LockTimeout: 100 * time.Millisecond}); err != nil {
				t.Fatalf("Inspect after refused Open: %v", err)
			}
		})
	}
}

// TestNewStoreIsCreatedWhole: a new store appears at its path complete (temporary
// file and rename), so an empty file at the path always means damage.
func TestNewStoreIsCreatedWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "allot.db")
	s := openTest(t, path, Options{})
	if err := s.Put(context.Background(), testRecord("c", "eth0", 1)); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 3 || ents[0].Name() != "allot.db" || ents[1].Name() != "allot.db.wal0" || ents[2].Name() != "allot.db.wal1" {
		t.Fatalf("directory holds %v, want only allot.db and its log", ents)
	}
	rep, err := Inspect(context.Background(), path, InspectOptions{})
	if err != nil || !rep.OK() || len(rep.Records) != 1 || rep.Schema != schemaVersion {
		t.Fatalf("Inspect = %+v, %v", rep, err)
	}
}

func TestInspectAndSalvage(t *testing.T) {
	ctx := context.Background()
	path := populated(t, 2000)
	leaves, _ := recordPages(t, path)
	bad := leaves[3]
	// A page type no bbolt page has: the whole leaf is lost, its neighbours are not.
	patch(t, path, int64(bad)*4096+8, []byte{0x42, 0x00})
	// And one record whose JSON is broken (its page is fine).
	lastLeaf := readPage(t, path, leaves[len(leaves)-1], 4096)
	es, err := elements(lastLeaf, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	badKey := keyName(es[0].key)
	at := bytes.Index(lastLeaf, es[0].value)
	patch(t, path, int64(leaves[len(leaves)-1])*4096+int64(at), []byte("#"))
	before := fileHash(t, path)

	rep, err := Inspect(ctx, path, InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Lost) != 2 {
		t.Fatalf("Inspect found %d problems and lost %v, want the page and the record", len(rep.Problems), rep.Lost)
	}
	lostPage, lostRec := rep.Lost[0], rep.Lost[1]
	if lostPage.Key != "" {
		lostPage, lostRec = lostRec, lostPage
	}
	if lostPage.Page != bad || lostPage.From == "" || lostPage.To == "" || !strings.Contains(lostPage.String(), fmt.Sprintf("page %d (records from %q to before %q)", bad, lostPage.From, lostPage.To)) {
		t.Fatalf("lost page = %+v (%s)", lostPage, lostPage)
	}
	if lostRec.Key != badKey || !strings.Contains(lostRec.String(), badKey) {
		t.Fatalf("lost record = %+v, want key %s", lostRec, badKey)
	}

	out := filepath.Join(t.TempDir(), "salvaged.db")
	rep2, err := Salvage(ctx, path, out, InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fileHash(t, path) != before {
		t.Fatal("salvage changed the damaged file")
	}
	s := openTest(t, out, Options{})
	recs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The lost page's records are intact (only its type was hit), so the scan of the
	// file's content recovers them; the record with broken JSON stays lost.
	if len(rep2.Recovered) == 0 || len(recs) != 1999 || len(recs) != len(rep2.Records)+len(rep2.Recovered) {
		t.Fatalf("salvaged %d records (%d read, %d recovered), want all 1999 readable ones", len(recs), len(rep2.Records), len(rep2.Recovered))
	}
	for _, r := range rep2.Recovered {
		if k := r.Owner.String(); k < lostPage.From || k >= lostPage.To {
			t.Fatalf("recovered %s, outside the lost page", k)
		}
	}
	for _, r := range recs {
		if r.Owner.String() == badKey {
			t.Fatalf("salvaged %s, whose record is broken", badKey)
		}
	}
	if _, err := Salvage(ctx, path, out, InspectOptions{}); err == nil || !strings.Contains(err.Error(), "never overwrites") {
		t.Fatalf("second salvage into the same file = %v", err)
	}
}

func TestToolsRefuseWhileOpen(t *testing.T) {
	ctx := context.Background()
	path := populated(t, 10)
	_ = openTest(t, path, Options{NoSync: true})
	o := InspectOptions{LockTimeout: 100 * time.Millisecond}
	if _, err := Inspect(ctx, path, o); !errors.Is(err, ErrLocked) {
		t.Fatalf("Inspect of an open store = %v, want ErrLocked", err)
	}
	if _, err := Salvage(ctx, path, path+".out", o); !errors.Is(err, ErrLocked) {
		t.Fatalf("Salvage of an open store = %v, want ErrLocked", err)
	}
	if _, err := Compact(ctx, path, o); !errors.Is(err, ErrLocked) {
		t.Fatalf("Compact of an open store = %v, want ErrLocked", err)
	}
}

func TestCompact(t *testing.T) {
	ctx := context.Background()
	path := populated(t, 3000)
	s := openTest(t, path, Options{NoSync: true})
	for i := 0; i < 3000; i++ {
		if i%10 == 0 {
			continue
		}
		if err := s.Delete(ctx, Owner{fmt.Sprintf("c%05d", i), "eth0"}); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	res, err := Compact(ctx, path, InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.After >= res.Before/2 {
		t.Fatalf("compact: %d -> %d bytes, want it to shrink", res.Before, res.After)
	}
	s = openTest(t, path, Options{NoSync: true})
	recs, err := s.List(ctx)
	if err != nil || len(recs) != 300 {
		t.Fatalf("after compact List = %d records, %v; want 300", len(recs), err)
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left: %v", err)
	}
}

// TestOpenFollowsRename: a daemon that opened the file while compact held it waits,
// then uses the compacted file, not the one compact replaced.
func TestOpenFollowsRename(t *testing.T) {
	ctx := context.Background()
	path := populated(t, 5)
	old, err := lockedOpen(path, os.O_RDWR, true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var s *Store
	go func() {
		var err error
		s, err = Open(ctx, path, Options{NoSync: true, LockTimeout: 5 * time.Second})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // sleep: Open waits on the kernel's lock meanwhile (nothing to observe)
	if err := writeNew(ctx, path+".next", []Record{testRecord("new", "eth0", 1)}, true); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".next", path); err != nil {
		t.Fatal(err)
	}
	for i, seg := range WALPaths(path + ".next") { // its log comes with it
		if err := os.Rename(seg, WALPaths(path)[i]); err != nil {
			t.Fatal(err)
		}
	}
	_ = old.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.List(ctx)
	if err != nil || len(recs) != 1 || recs[0].Owner.ContainerID != "new" {
		t.Fatalf("Open after a rename read %+v, %v; want the new file", recs, err)
	}
}

func TestMoveAside(t *testing.T) {
	path := populated(t, 3)
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	to, err := MoveAside(path, now)
	if err != nil || to != path+".corrupt-20260304T050607Z" {
		t.Fatalf("MoveAside = %q, %v", to, err)
	}
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	to2, err := MoveAside(path, now)
	if err != nil || to2 != to+"-1" {
		t.Fatalf("second MoveAside = %q, %v; want a new name", to2, err)
	}
}

// TestCleanCommitFailure: a log write that fails (a full disk, a read-only file system)
// leaves nothing acknowledged, and the store goes on; so does a checkpoint that fails
// before bbolt writes its meta page, which is tried again while the log keeps the writes.
func TestCleanCommitFailure(t *testing.T) {
	ctx := context.Background()
	s, fw := openFaulty(t, filepath.Join(t.TempDir(), "allot.db"), Options{NoSync: true})
	fw.set(&os.PathError{Op: "write", Path: s.walPaths[0], Err: syscall.ENOSPC}, nil)
	err := s.Put(ctx, testRecord("c", "eth0", 1))
	if err == nil || errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "not written") || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("Put with a log write failing = %v", err)
	}
	fw.set(nil, nil)
	if _, ok, _ := s.Get(ctx, Owner{"c", "eth0"}); ok {
		t.Fatal("failed Put left a record")
	}
	if err := s.Put(ctx, testRecord("c", "eth0", 1)); err != nil {
		t.Fatalf("Put once the disk is back: %v", err)
	}

	// Every write starts a checkpoint; the first two fail before their meta page.
	c := openTest(t, filepath.Join(t.TempDir(), "allot.db"), Options{NoSync: true, checkpointBytes: 1, checkpointInterval: time.Hour})
	var fails atomic.Int32
	c.commitTx = func(tx *bolt.Tx) error {
		if fails.Add(1) <= 2 {
			_ = tx.Rollback()
			return &os.PathError{Op: "write", Path: c.Path(), Err: syscall.ENOSPC}
		}
		return tx.Commit()
	}
	if err := c.Put(ctx, testRecord("d", "eth0", 2)); err != nil {
		t.Fatal(err)
	}
	testWaitFor(t, func() bool { return c.Stats().Checkpoints > 0 })
	if c.failure() != nil || fails.Load() < 3 {
		t.Fatalf("after clean checkpoint failures: failure %v, %d attempts", c.failure(), fails.Load())
	}
	if list, err := c.List(ctx); err != nil || len(list) != 1 || c.walSeq() != 1 {
		t.Fatalf("List = %d records, %v, checkpointed through frame %d; want 1 record, frame 1", len(list), err, c.walSeq())
	}
}

func TestLossString(t *testing.T) {
	for _, c := range []struct {
		l    Loss
		want string
	}{
		{Loss{Key: "a/eth0", Reason: "field v: missing"}, `record "a/eth0": field v: missing`},
		{Loss{Page: 7, From: "a/eth0", To: "b/eth0", Reason: "x"}, `page 7 (records from "a/eth0" to before "b/eth0"): x`},
		{Loss{Page: 7, Reason: "x"}, `page 7 (records from the first key to the last): x`},
	} {
		if got := c.l.String(); got != c.want {
			t.Errorf("%+v = %q, want %q", c.l, got, c.want)
		}
	}
}
