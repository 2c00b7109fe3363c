package main

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/store"
)

func runStore(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newStoreCommand()
	cmd.SetArgs(args)
	out := new(strings.Builder)
	cmd.SetOut(out)
	cmd.SetErr(new(strings.Builder))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func storeWith(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "allot.db")
	s, err := store.Open(context.Background(), path, store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r := store.Record{
			Owner:     store.Owner{ContainerID: "c" + string(rune('a'+i)), IfName: "eth0"},
			Addresses: []store.Address{{Pool: "p", Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 2)}), 24)}},
			Created:   time.Now(),
		}
		if err := s.Put(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStoreCommands: check, salvage and compact on a sound and on a damaged file, with
// their exit codes.
func TestStoreCommands(t *testing.T) {
	path := storeWith(t, 5)
	out, err := runStore(t, "check", "--store-path", path)
	if err != nil || !strings.Contains(out, "ok: "+path+" holds 5 records") {
		t.Fatalf("check of a sound store: %v\n%s", err, out)
	}
	out, err = runStore(t, "compact", "--store-path", path)
	if err != nil || !strings.Contains(out, "compacted "+path) {
		t.Fatalf("compact: %v\n%s", err, out)
	}

	// Scribble over the middle of the file (its pages after the meta pages).
	data, _ := os.ReadFile(path)
	for i := 2 * 4096; i < len(data); i++ {
		data[i] = 0xAA
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = runStore(t, "check", "--store-path", path)
	if err == nil || exitCode(err) != exitStoreUnusable || !strings.Contains(out, "problem: ") || !strings.Contains(err.Error(), "allotd store salvage") {
		t.Fatalf("check of a damaged store = %v (exit %d)\n%s", err, exitCode(err), out)
	}
	// The write-ahead log beside the file still holds this young store's five writes, so
	// salvage gets them back although the tree is gone.
	salvaged := filepath.Join(t.TempDir(), "new.db")
	out, err = runStore(t, "salvage", "--store-path", path, "--out", salvaged)
	if err != nil || !strings.Contains(out, "salvaged 5 records into "+salvaged) || !strings.Contains(out, "mv "+path+" "+path+".damaged && mv "+salvaged+" "+path) {
		t.Fatalf("salvage: %v\n%s", err, out)
	}
	if out, err := runStore(t, "check", "--store-path", salvaged); err != nil || !strings.Contains(out, "holds 5 records") {
		t.Fatalf("check of the salvaged store: %v\n%s", err, out)
	}
	// Without the log nothing is readable, and salvage says so.
	for _, p := range store.WALPaths(path) {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	salvaged = filepath.Join(t.TempDir(), "new.db")
	out, err = runStore(t, "salvage", "--store-path", path, "--out", salvaged)
	if err != nil || !strings.Contains(out, "salvaged 0 records into "+salvaged) {
		t.Fatalf("salvage without the log: %v\n%s", err, out)
	}
	if _, err := runStore(t, "compact", "--store-path", path); exitCode(err) != exitStoreUnusable {
		t.Fatalf("compact of a damaged store = %v, want exit 3", err)
	}
}

// TestStoreCommandsRefuseWhileOpen: the tools take the file's lock, so a running
// daemon's store is left alone.
func TestStoreCommandsRefuseWhileOpen(t *testing.T) {
	path := storeWith(t, 1)
	s, err := store.Open(context.Background(), path, store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, args := range [][]string{{"check"}, {"compact"}, {"salvage", "--out", path + ".x"}} {
		_, err := runStore(t, append(args, "--store-path", path, "--lock-timeout", "100ms")...)
		if err == nil || exitCode(err) != exitError || !strings.Contains(err.Error(), "locked by another process") {
			t.Fatalf("%v beside an open store = %v (exit %d)", args, err, exitCode(err))
		}
	}
}

func TestStoreAdvice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allot.db")
	if err := os.WriteFile(path, []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(context.Background(), path, store.Options{})
	if exitCode(err) != exitStoreUnusable {
		t.Fatalf("exit code for %v = %d", err, exitCode(err))
	}
	adv := storeAdvice(err, "/elsewhere")
	for _, want := range []string{"allotd store check --store-path " + path, "allotd store salvage --store-path " + path + " --out " + path + ".salvaged"} {
		if !strings.Contains(adv, want) {
			t.Fatalf("advice %q does not say %q", adv, want)
		}
	}
	if storeAdvice(os.ErrPermission, path) != "" {
		t.Fatal("advice for an error that is not the store's")
	}
}
