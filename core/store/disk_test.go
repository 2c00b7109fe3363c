package store_test

// A full disk and a read-only file system under a running store, through the ipam
// manager's ADD: the ADD fails with an error naming the cause and the file, leaves no
// record behind, and ADDs succeed again once space or write access is back, without a
// restart. These tests mount file systems, so they need root (internal/testenv decides
// whether its absence skips or fails).

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/plugins/policy/static"
	"github.com/allot-ipam/allot/sdk/policy"
)

// needRoot: mounting file systems needs root (internal/testenv: skip, or fail under CI).
func needRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "mounts file systems (tmpfs, a loop-mounted ext4)")
}

func run(t *testing.T, name string, args ...string) error {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, unmounted at cleanup.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := run(t, "mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := run(t, "umount", dir); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return dir
}

type diskRig struct {
	t    *testing.T
	path string
	s    *store.Store
	m    *ipam.Manager
}

func newDiskRig(t *testing.T, dir string) *diskRig {
	r := &diskRig{t: t, path: filepath.Join(dir, "allot.db")}
	r.open()
	return r
}

func (r *diskRig) open() {
	r.t.Helper()
	s, err := store.Open(context.Background(), r.path, store.Options{Logger: quiet})
	if err != nil {
		r.t.Fatal(err)
	}
	pfx := netip.MustParsePrefix("10.88.0.0/16")
	pol := static.New()
	m, err := ipam.New(context.Background(), ipam.Options{
		Pools:  []ipam.PoolSpec{{Allocator: allocator.Config{Name: "v4", CIDRs: []netip.Prefix{pfx}}, Default: true}},
		Store:  s,
		Logger: quiet,
		Policy: func(string) policy.PoolPolicy { return pol },
	})
	if err != nil {
		r.t.Fatal(err)
	}
	r.s, r.m = s, m
}

func (r *diskRig) close() {
	r.t.Helper()
	if err := r.s.Close(); err != nil {
		r.t.Fatal(err)
	}
}

// add allocates for a new owner, with a long pod name so records fill pages quickly.
func (r *diskRig) add(id string) (*api.Allocation, error) {
	return r.m.Allocate(context.Background(), &api.AllocateRequest{
		Owner:   api.Owner{ContainerID: id, IfName: "eth0"},
		Network: "net",
		Pod:     api.PodRef{Namespace: "ns", Name: strings.Repeat("p", 200) + id, UID: "uid-" + id},
	})
}

// noRecord checks that owner id left nothing: no record on disk, nothing in memory.
func (r *diskRig) noRecord(id string) {
	r.t.Helper()
	if _, ok, err := r.s.Get(context.Background(), store.Owner{ContainerID: id, IfName: "eth0"}); err != nil || ok {
		r.t.Fatalf("failed ADD of %s left a record (%v, %v)", id, ok, err)
	}
	if _, err := r.m.Check(context.Background(), &api.CheckRequest{Owner: api.Owner{ContainerID: id, IfName: "eth0"}}); api.CodeOf(err) != api.CodeNotFound {
		r.t.Fatalf("failed ADD of %s is held in memory: %v", id, err)
	}
}

// wantDiskError checks an ADD error: unavailable (try again), naming the cause and file.
func wantDiskError(t *testing.T, err error, cause, path string) {
	t.Helper()
	if err == nil || api.CodeOf(err) != api.CodeUnavailable || !strings.Contains(err.Error(), cause) || !strings.Contains(err.Error(), path) {
		t.Fatalf("ADD error = %v (code %s), want unavailable naming %q and %s", err, api.CodeOf(err), cause, path)
	}
	if errors.Is(err, store.ErrFailed) {
		t.Fatalf("ADD error %v made the store refuse all later writes", err)
	}
}

func TestFullDisk(t *testing.T) {
	needRoot(t)
	dir := mountTmpfs(t, 1<<20)
	r := newDiskRig(t, dir)
	defer r.close()
	if _, err := r.add("first"); err != nil {
		t.Fatal(err)
	}
	// Fill the file system.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	_ = f.Close()
	// bbolt reuses the file's free pages first: ADDs fail once those are used up.
	var failed string
	for i := 0; i < 5000 && failed == ""; i++ {
		id := fmt.Sprintf("full-%d", i)
		if _, err := r.add(id); err != nil {
			wantDiskError(t, err, "no space left on device", r.path)
			failed = id
		}
	}
	if failed == "" {
		t.Fatal("5000 ADDs on a full file system all succeeded")
	}
	r.noRecord(failed)
	if _, err := r.add(failed); err == nil {
		t.Fatal("ADD succeeded on a full file system")
	}
	// Space returns: the same store serves again, and everything acknowledged is there.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := r.add(failed); err != nil {
		t.Fatalf("ADD once space is back: %v", err)
	}
	r.close()
	r.open()
	recs, err := r.s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("full disk after %d records: the ADD failed cleanly and the next one after freeing space succeeded", len(recs)-1)
}

// TestReadOnlyRemount: the kernel refuses to remount a file system read-only while a
// store on it is open for writing (it would be "busy"), so a running allotd never sees
// that; what it sees is a start on a read-only file system (refused with the cause,
// not as damage) and one the kernel turned read-only after an error (EROFS on write:
// TestFileSystemTurnsReadOnly).
func TestReadOnlyRemount(t *testing.T) {
	needRoot(t)
	dir := mountTmpfs(t, 4<<20)
	r := newDiskRig(t, dir)
	if _, err := r.add("before"); err != nil {
		t.Fatal(err)
	}
	if err := run(t, "mount", "-o", "remount,ro", dir); err == nil || !strings.Contains(err.Error(), "busy") {
		_ = run(t, "mount", "-o", "remount,rw", dir)
		t.Fatalf("remount read-only under an open store = %v, want busy", err)
	}
	r.close()
	if err := run(t, "mount", "-o", "remount,ro", dir); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(context.Background(), r.path, store.Options{})
	if err == nil || errors.Is(err, store.ErrUnusable) || !strings.Contains(err.Error(), "read-only file system") || !strings.Contains(err.Error(), r.path) {
		t.Fatalf("Open on a read-only file system = %v, want the cause and the path, not damage", err)
	}
	if err := run(t, "mount", "-o", "remount,rw", dir); err != nil {
		t.Fatal(err)
	}
	r.open()
	defer r.close()
	if _, err := r.add("after"); err != nil {
		t.Fatalf("ADD once writable again: %v", err)
	}
}

// TestFileSystemTurnsReadOnly: an ext4 file system (on a loop device) that the kernel
// turns read-only after an error (errors=remount-ro, triggered through ext4's
// trigger_fs_error) under a running store.
func TestFileSystemTurnsReadOnly(t *testing.T) {
	needRoot(t)
	testenv.RequireBinary(t, "mkfs.ext4", "Debian package e2fsprogs")
	img := filepath.Join(t.TempDir(), "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	if err := run(t, "mkfs.ext4", "-q", "-F", img); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	_ = os.Mkdir(dir, 0o700)
	if err := run(t, "mount", "-o", "loop,errors=remount-ro", img, dir); err != nil {
		testenv.Missing(t, fmt.Sprintf("cannot loop-mount ext4 here: %v", err))
	}
	t.Cleanup(func() { _ = run(t, "umount", dir) })
	dev := ""
	if out, err := exec.Command("findmnt", "-n", "-o", "SOURCE", dir).Output(); err == nil {
		dev = filepath.Base(strings.TrimSpace(string(out)))
	}
	trigger := filepath.Join("/sys/fs/ext4", dev, "trigger_fs_error")
	if _, err := os.Stat(trigger); dev == "" || err != nil {
		testenv.Missing(t, fmt.Sprintf("no %s: cannot make ext4 fail here", trigger))
	}
	r := newDiskRig(t, dir)
	defer r.close()
	if _, err := r.add("before"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trigger, []byte("allot store test"), 0o200); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ro-1", "ro-2"} {
		_, err := r.add(id)
		wantDiskError(t, err, "read-only file system", r.path)
		r.noRecord(id)
	}
	if a, err := r.m.Check(context.Background(), &api.CheckRequest{Owner: api.Owner{ContainerID: "before", IfName: "eth0"}}); err != nil || len(a.IPs) != 1 {
		t.Fatalf("the allocation made before is gone: %v", err)
	}
	// ext4 keeps a file system it turned read-only so until it is unmounted (it refuses
	// remount,rw), so writing again takes a restart of allotd after the operator's
	// repair; the store itself never refused later writes (wantDiskError).
}
