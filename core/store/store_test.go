package store

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openTest(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testRecord(cid, ifname string, n int) Record {
	return Record{
		Owner:   Owner{ContainerID: cid, IfName: ifname},
		Network: "podnet",
		Pod:     Pod{Namespace: "default", Name: "pod-" + cid, UID: "uid-" + cid},
		Addresses: []Address{
			{Pool: "default", Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(n >> 8), byte(n)}), 16), Gateway: netip.MustParseAddr("10.1.0.1")},
			{Pool: "v6", Prefix: netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 15: byte(n)}), 64)},
		},
		Created: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	}
}

// equalRecord compares records with time.Equal for Created.
func equalRecord(a, b Record) bool {
	if !a.Created.Equal(b.Created) {
		return false
	}
	a.Created, b.Created = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func TestPutGetDeleteList(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "allot.db"), Options{NoSync: true})

	if _, ok, err := s.Get(ctx, Owner{"c1", "eth0"}); err != nil || ok {
		t.Fatalf("Get on empty store = %v, %v; want not found", ok, err)
	}
	// Inserted out of order; List must sort by (container ID, ifname), and
	// "a" < "a-b" even though '-' < '/' in the String form.
	recs := []Record{
		testRecord("a-b", "eth0", 1),
		testRecord("a", "net1", 2),
		testRecord("a", "eth0", 3),
		testRecord("b", "eth0", 4),
	}
	for _, r := range recs {
		if err := s.Put(ctx, r); err != nil {
			t.Fatalf("Put(%s): %v", r.Owner, err)
		}
	}
	got, ok, err := s.Get(ctx, recs[2].Owner)
	if err != nil || !ok || !equalRecord(got, recs[2]) {
		t.Fatalf("Get = %+v, %v, %v; want %+v", got, ok, err, recs[2])
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var owners []string
	for _, r := range list {
		owners = append(owners, r.Owner.String())
	}
	if want := "a/eth0 a/net1 a-b/eth0 b/eth0"; strings.Join(owners, " ") != want {
		t.Fatalf("List order = %v, want %s", owners, want)
	}

	// Replace.
	upd := testRecord("a", "eth0", 99)
	if err := s.Put(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.Get(ctx, upd.Owner); !equalRecord(got, upd) {
		t.Fatalf("after replace Get = %+v, want %+v", got, upd)
	}

	// Delete, twice: the second is not an error.
	for i := range 2 {
		if err := s.Delete(ctx, upd.Owner); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if _, ok, _ := s.Get(ctx, upd.Owner); ok {
		t.Fatal("record still present after Delete")
	}
	if err := s.Delete(ctx, Owner{"never", "eth0"}); err != nil {
		t.Fatalf("Delete of a missing owner: %v", err)
	}
	if list, _ := s.List(ctx); len(list) != 3 {
		t.Fatalf("List has %d records, want 3", len(list))
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "dir", "allot.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var want []Record
	for i, cid := range []string{"c1", "c2", "c3"} {
		r := testRecord(cid, "eth0", i)
		r.Created = time.Date(2026, 5, 6, 7, 8, 9, 10, time.FixedZone("X", 3600)) // read back as UTC, same instant
		want = append(want, r)
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, want[1].Owner); err != nil {
		t.Fatal(err)
	}
	want = append(want[:1], want[2])
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Put(ctx, want[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close = %v, want ErrClosed", err)
	}
	if _, err := s.List(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("List after Close = %v, want ErrClosed", err)
	}

	for p, mode := range map[string]os.FileMode{filepath.Dir(path): 0o700, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s mode = %v, want %v", p, fi.Mode().Perm(), mode)
		}
	}

	s2 := openTest(t, path, Options{})
	got, err := s2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("after reopen %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !equalRecord(got[i], want[i]) {
			t.Errorf("record %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestInvalidInputNamesField(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "allot.db"), Options{NoSync: true})
	good := testRecord("c", "eth0", 1)
	tests := []struct {
		name  string
		mod   func(*Record)
		field string
	}{
		{"empty container", func(r *Record) { r.Owner.ContainerID = "" }, "owner.container_id"},
		{"slash in container", func(r *Record) { r.Owner.ContainerID = "a/b" }, "owner.container_id"},
		{"NUL in ifname", func(r *Record) { r.Owner.IfName = "e\x00" }, "owner.ifname"},
		{"long ifname", func(r *Record) { r.Owner.IfName = strings.Repeat("x", 65) }, "owner.ifname"},
		{"empty pool", func(r *Record) { r.Addresses[1].Pool = "" }, "addresses[1].pool"},
		{"zero prefix", func(r *Record) { r.Addresses[0].Prefix = netip.Prefix{} }, "addresses[0].prefix"},
		{"gateway family", func(r *Record) { r.Addresses[1].Gateway = netip.MustParseAddr("10.0.0.1") }, "addresses[1].gateway"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good
			r.Addresses = append([]Address(nil), good.Addresses...)
			tt.mod(&r)
			err := s.Put(ctx, r)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Put error = %v, want FieldError for %s", err, tt.field)
			}
		})
	}
	if err := s.Delete(ctx, Owner{"", "eth0"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Delete with empty container ID = %v, want ErrInvalid", err)
	}
	if list, _ := s.List(ctx); len(list) != 0 {
		t.Fatalf("invalid puts wrote %d records", len(list))
	}
}

// putRaw writes a raw key/value into the records bucket of a closed store.
func putRaw(t *testing.T, path string, key, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(recordsBucket).Put(key, value)
	}); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptRecordOnDisk(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		key, value string
		wantKey    string
		wantField  string
	}{
		{"bad prefix", "c2\x00eth0", `{"v":1,"owner":{"container_id":"c2","ifname":"eth0"},"pod":{},"addresses":[{"pool":"p","prefix":"10.0.0.300/24"}],"created":"2026-01-01T00:00:00Z"}`, "c2/eth0", "addresses[0].prefix"},
		{"not json", "c2\x00eth0", `garbage`, "c2/eth0", "value"},
		{"future version", "c2\x00eth0", `{"v":7}`, "c2/eth0", "v"},
		{"no version", "c2\x00eth0", `{}`, "c2/eth0", "v"},
		{"wrong type", "c2\x00eth0", `{"v":1,"owner":{"container_id":"c2","ifname":"eth0"},"network":5}`, "c2/eth0", "network"},
		{"unknown field", "c2\x00eth0", `{"v":1,"owner":{"container_id":"c2","ifname":"eth0"},"colour":"red"}`, "c2/eth0", "colour"},
		{"owner mismatch", "c2\x00eth0", `{"v":1,"owner":{"container_id":"c9","ifname":"eth0"},"pod":{},"created":"2026-01-01T00:00:00Z"}`, "c2/eth0", "owner"},
		{"bad created", "c2\x00eth0", `{"v":1,"owner":{"container_id":"c2","ifname":"eth0"},"created":"yesterday"}`, "c2/eth0", "created"},
		{"bad key", "c2-no-separator", `{"v":1}`, "c2-no-separator", "key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "allot.db")
			s := openTest(t, path, Options{NoSync: true})
			for _, cid := range []string{"c1", "c3"} {
				if err := s.Put(ctx, testRecord(cid, "eth0", 1)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			putRaw(t, path, []byte(tt.key), []byte(tt.value))

			// Open does not crash or fail on a bad record ...
			s = openTest(t, path, Options{NoSync: true})
			// ... List fails closed, naming the key and the field.
			_, err := s.List(ctx)
			var ce *CorruptError
			var fe *FieldError
			if !errors.As(err, &ce) || !errors.As(err, &fe) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("List error = %v, want CorruptError with FieldError", err)
			}
			if ce.Key != tt.wantKey || fe.Field != tt.wantField {
				t.Fatalf("List error = %v: key %q field %q, want key %q field %q", err, ce.Key, fe.Field, tt.wantKey, tt.wantField)
			}
			if !strings.Contains(err.Error(), tt.wantKey) || !strings.Contains(err.Error(), tt.wantField) {
				t.Fatalf("error text %q does not name key %q and field %q", err, tt.wantKey, tt.wantField)
			}
			t.Logf("List error: %v", err)
			if err := s.Check(ctx); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Check = %v, want ErrCorrupt", err)
			}
			// Good records stay readable, and the operator can remove
			// the bad one with Delete (when its key is an owner).
			if _, ok, err := s.Get(ctx, Owner{"c1", "eth0"}); err != nil || !ok {
				t.Fatalf("Get good record: %v, %v", ok, err)
			}
			if o, err := parseKey([]byte(tt.key)); err == nil {
				if _, _, err := s.Get(ctx, o); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Get bad record = %v, want ErrCorrupt", err)
				}
				if err := s.Delete(ctx, o); err != nil {
					t.Fatal(err)
				}
				if list, err := s.List(ctx); err != nil || len(list) != 2 {
					t.Fatalf("after Delete of bad record: %d records, %v", len(list), err)
				}
			}
		})
	}
}

func TestSchemaVersionChecked(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "allot.db")
	s := openTest(t, path, Options{NoSync: true})
	_ = s.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(metaBucket).Put(schemaKey, []byte("2")) })
	_ = db.Close()
	if _, err := Open(ctx, path, Options{}); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "schema version 2") {
		t.Fatalf("Open of schema 2 = %v, want ErrSchema naming version 2", err)
	}
}

func TestSecondOpenFailsClearly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allot.db")
	_ = openTest(t, path, Options{NoSync: true})
	start := time.Now()
	_, err := Open(context.Background(), path, Options{LockTimeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path+" is locked by another process") {
		t.Fatalf("second Open = %v, want ErrLocked naming the path", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("second Open took %s; it must not hang", d)
	}
}

func TestFailedLogWriteAppliesNothing(t *testing.T) {
	ctx := context.Background()
	s, fw := openFaulty(t, filepath.Join(t.TempDir(), "allot.db"), Options{NoSync: true})
	if err := s.Put(ctx, testRecord("keep", "eth0", 1)); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("injected")
	fw.set(boom, nil)
	err1 := s.Put(ctx, testRecord("new", "eth0", 2))
	err2 := s.Delete(ctx, Owner{"keep", "eth0"})
	for _, err := range []error{err1, err2} {
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "not written") {
			t.Fatalf("op in failed batch = %v, want wrapped injected error", err)
		}
	}
	fw.set(nil, nil)
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Owner.ContainerID != "keep" {
		t.Fatalf("after failed batches List = %+v, %v; want only keep", list, err)
	}
	// A failed write is clean, so the store keeps working.
	if err := s.Put(ctx, testRecord("new", "eth0", 2)); err != nil {
		t.Fatalf("Put after a failed write: %v", err)
	}
}

func TestCancelledContext(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "allot.db"), Options{NoSync: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Put(ctx, testRecord("c", "eth0", 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with cancelled ctx = %v", err)
	}
	// Cancelled before queueing: certainly not written.
	if _, ok, _ := s.Get(context.Background(), Owner{"c", "eth0"}); ok {
		t.Fatal("Put with a cancelled context wrote the record")
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	_, err := Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), Options{MaxBatch: -1})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "MaxBatch" {
		t.Fatalf("Open with MaxBatch -1 = %v, want FieldError MaxBatch", err)
	}
}

func TestFailedSyncStopsWrites(t *testing.T) {
	ctx := context.Background()
	s, fw := openFaulty(t, filepath.Join(t.TempDir(), "allot.db"), Options{})
	eio := errors.New("injected fsync error")
	// The frame is written but its fsync "fails": the outcome on disk is unknown.
	fw.set(nil, eio)
	err := s.Put(ctx, testRecord("c", "eth0", 1))
	if !errors.Is(err, eio) || !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "outcome unknown") {
		t.Fatalf("Put with failing sync = %v, want ErrFailed wrapping the cause", err)
	}
	fw.set(nil, nil)
	// Sticky: memory and disk may disagree, so no further writes.
	if err := s.Delete(ctx, Owner{"c", "eth0"}); !errors.Is(err, ErrFailed) {
		t.Fatalf("Delete after failed sync = %v, want ErrFailed", err)
	}
	// Reads still work, for diagnostics.
	if _, err := s.List(ctx); err != nil {
		t.Fatalf("List after failed sync: %v", err)
	}
	if st := s.Stats(); st.Errors != 1 {
		t.Fatalf("Stats.Errors = %d, want 1", st.Errors)
	}
}

// TestFailedCheckpointStopsWrites: a checkpoint whose bbolt commit fails after its meta
// page was written leaves the file's state unknown, so writes stop as after a failed sync.
func TestFailedCheckpointStopsWrites(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "allot.db"), Options{NoSync: true, checkpointBytes: 1})
	eio := errors.New("injected fsync error")
	failed := make(chan struct{})
	s.commitTx = func(tx *bolt.Tx) error {
		if err := tx.Commit(); err != nil {
			return err
		}
		close(failed)
		return eio
	}
	if err := s.Put(ctx, testRecord("c", "eth0", 1)); err != nil {
		t.Fatalf("Put (in the log before its checkpoint fails): %v", err)
	}
	<-failed
	testWaitFor(t, func() bool { return s.failure() != nil })
	if err := s.Put(ctx, testRecord("d", "eth0", 2)); !errors.Is(err, ErrFailed) || !errors.Is(err, eio) {
		t.Fatalf("Put after a failed checkpoint = %v, want ErrFailed wrapping the cause", err)
	}
	if _, ok, err := s.Get(ctx, Owner{"c", "eth0"}); err != nil || !ok {
		t.Fatalf("Get of the acknowledged record = %v, %v", ok, err)
	}
}
