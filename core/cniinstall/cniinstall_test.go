package cniinstall

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// srcDir makes a source directory with the given files.
func srcDir(t *testing.T, files map[string]string) string {
	t.Helper()
	d := t.TempDir()
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(d, n), []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func actions(rs []FileResult) map[string]Action {
	out := map[string]Action{}
	for _, r := range rs {
		out[r.Name] = r.Action
	}
	return out
}

// noTemps fails if dir holds a temporary file of an atomic write.
func noTemps(t *testing.T, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		es, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		for _, e := range es {
			if strings.Contains(e.Name(), ".tmp-") {
				t.Errorf("temporary file left in %s: %s", dir, e.Name())
			}
		}
	}
}

func TestInstallFreshIdempotentUpgrade(t *testing.T) {
	src := srcDir(t, map[string]string{"allot-cni": "allot v1", "bridge": "bridge v1", "loopback": "lo v1"})
	bin := filepath.Join(t.TempDir(), "opt", "cni", "bin") // created by Install
	rs, err := Install(Options{BinDir: bin, SrcDir: src, Plugins: []string{"bridge", " loopback", "bridge", ""}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Action{"allot-cni": Installed, "bridge": Installed, "loopback": Installed}
	if got := actions(rs); !mapsEqual(got, want) {
		t.Fatalf("first install: %v, want %v", got, want)
	}
	for n, c := range map[string]string{"allot-cni": "allot v1", "bridge": "bridge v1", "loopback": "lo v1"} {
		p := filepath.Join(bin, n)
		if got := readFile(t, p); got != c {
			t.Errorf("%s holds %q, want %q", p, got, c)
		}
		st, _ := os.Stat(p)
		if st.Mode().Perm() != 0o755 {
			t.Errorf("%s has mode %v, want 0755", p, st.Mode().Perm())
		}
	}
	for _, r := range []string{"bridge.absent", "loopback.absent"} {
		if _, err := os.Stat(filepath.Join(bin, RecordDir, r)); err != nil {
			t.Errorf("install record %s: %v", r, err)
		}
	}
	if _, err := os.Stat(filepath.Join(bin, RecordDir, "allot-cni.absent")); err == nil {
		t.Error("allot-cni has an install record; it is always ours")
	}

	before := inode(t, filepath.Join(bin, "bridge"))
	rs, err = Install(Options{BinDir: bin, SrcDir: src, Plugins: []string{"bridge", "loopback"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(rs); !mapsEqual(got, map[string]Action{"allot-cni": Unchanged, "bridge": Unchanged, "loopback": Unchanged}) {
		t.Fatalf("second install: %v", got)
	}
	if inode(t, filepath.Join(bin, "bridge")) != before {
		t.Error("an identical file was rewritten")
	}

	// An upgrade rewrites what changed; the record still says "absent before allot".
	if err := os.WriteFile(filepath.Join(src, "bridge"), []byte("bridge v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	rs, err = Install(Options{BinDir: bin, SrcDir: src, Plugins: []string{"bridge", "loopback"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(rs); got["bridge"] != Installed || got["loopback"] != Unchanged {
		t.Fatalf("upgrade: %v", got)
	}
	if got := readFile(t, filepath.Join(bin, "bridge")); got != "bridge v2" {
		t.Fatalf("bridge after upgrade: %q", got)
	}
	noTemps(t, bin, filepath.Join(bin, RecordDir))

	rs, err = Uninstall(UninstallOptions{BinDir: bin, SrcDir: src})
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(rs); !mapsEqual(got, map[string]Action{"allot-cni": Removed, "bridge": Removed, "loopback": Removed}) {
		t.Fatalf("uninstall: %v", got)
	}
	if es, _ := os.ReadDir(bin); len(es) != 0 {
		t.Fatalf("bin directory not empty after uninstall: %v", es)
	}
	// Idempotent.
	rs, err = Uninstall(UninstallOptions{BinDir: bin, SrcDir: src})
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(rs); !mapsEqual(got, map[string]Action{"allot-cni": Absent}) {
		t.Fatalf("second uninstall: %v", got)
	}
}

func mapsEqual(a, b map[string]Action) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestInstallKeepsWhatWasThere: a node's own plugins come back at uninstall (the file, its
// mode, a symlink), an identical one stays, and one replaced since the install is kept.
func TestInstallKeepsWhatWasThere(t *testing.T) {
	src := srcDir(t, map[string]string{"allot-cni": "allot", "bridge": "allot's bridge", "loopback": "same lo", "portmap": "allot's portmap", "host-local": "allot's host-local"})
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "bridge"), []byte("node's bridge"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "loopback"), []byte("same lo"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "portmap-1.0"), []byte("node's portmap"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("portmap-1.0", filepath.Join(bin, "portmap")); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(Options{BinDir: bin, SrcDir: src, Plugins: []string{"bridge", "loopback", "portmap", "host-local"}}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(bin, "portmap")); got != "allot's portmap" {
		t.Fatalf("portmap after install: %q", got)
	}
	if st, _ := os.Lstat(filepath.Join(bin, "portmap")); !st.Mode().IsRegular() {
		t.Fatal("the symlink was written through instead of replaced")
	}
	if got := readFile(t, filepath.Join(bin, "portmap-1.0")); got != "node's portmap" {
		t.Fatalf("symlink target changed: %q", got)
	}
	// Something else replaces host-local after the install: it must survive uninstall.
	if err := os.WriteFile(filepath.Join(bin, "host-local"), []byte("package's host-local"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A second install (rolling update) must not overwrite the records with allot's files.
	if _, err := Install(Options{BinDir: bin, SrcDir: src, Plugins: []string{"bridge", "loopback", "portmap"}}); err != nil {
		t.Fatal(err)
	}

	rs, err := Uninstall(UninstallOptions{BinDir: bin, SrcDir: src})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Action{"allot-cni": Removed, "bridge": Restored, "loopback": Kept, "portmap": Restored, "host-local": Kept}
	if got := actions(rs); !mapsEqual(got, want) {
		t.Fatalf("uninstall: %v, want %v", got, want)
	}
	if got := readFile(t, filepath.Join(bin, "bridge")); got != "node's bridge" {
		t.Errorf("bridge not restored: %q", got)
	}
	if st, _ := os.Stat(filepath.Join(bin, "bridge")); st.Mode().Perm() != 0o750 {
		t.Errorf("bridge restored with mode %v, want 0750", st.Mode().Perm())
	}
	if target, err := os.Readlink(filepath.Join(bin, "portmap")); err != nil || target != "portmap-1.0" {
		t.Errorf("portmap symlink not restored: %q %v", target, err)
	}
	if got := readFile(t, filepath.Join(bin, "loopback")); got != "same lo" {
		t.Errorf("loopback: %q", got)
	}
	if got := readFile(t, filepath.Join(bin, "host-local")); got != "package's host-local" {
		t.Errorf("host-local replaced since the install was not kept: %q", got)
	}
	var names []string
	es, _ := os.ReadDir(bin)
	for _, e := range es {
		names = append(names, e.Name())
	}
	if want := []string{"bridge", "host-local", "loopback", "portmap", "portmap-1.0"}; !slices.Equal(names, want) {
		t.Fatalf("bin directory after uninstall: %v, want %v", names, want)
	}
}

func TestInstallErrorsNameTheFile(t *testing.T) {
	src := srcDir(t, map[string]string{"allot-cni": "allot"})
	bin := t.TempDir()
	_, err := Install(Options{BinDir: bin, SrcDir: src, Plugins: []string{"bridge"}})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(src, "bridge")) {
		t.Fatalf("missing source: %v", err)
	}
	if _, err := os.Stat(filepath.Join(bin, "allot-cni")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("allot-cni installed although a listed plugin is missing")
	}
	for _, bad := range []string{"../bridge", "a/b", ".hidden", ".."} {
		_, err := Install(Options{BinDir: bin, SrcDir: src, Plugins: []string{"loopback", bad}})
		if err == nil || !strings.Contains(err.Error(), "plugins[1]") {
			t.Errorf("plugin %q: %v", bad, err)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Install(Options{BinDir: file, SrcDir: src})
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("bin directory that is a file: %v", err)
	}
	if err := os.Mkdir(filepath.Join(src, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Install(Options{BinDir: bin, SrcDir: src, Plugins: []string{"dir"}})
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("source that is a directory: %v", err)
	}
}

// TestInstallOverRunningBinary: the runtime may be executing allot-cni while it is
// upgraded; writing into the file would fail with ETXTBSY (or corrupt the running process),
// the rename does not.
func TestInstallOverRunningBinary(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("sleep(1) is needed: %v", err)
	}
	prog, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "allot-cni"), prog, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if _, err := Install(Options{BinDir: bin, SrcDir: src}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "allot-cni"), "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The write path really is busy.
	if f, err := os.OpenFile(filepath.Join(bin, "allot-cni"), os.O_WRONLY, 0); !errors.Is(err, syscall.ETXTBSY) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("expected ETXTBSY writing into a running binary, got %v", err)
	}
	if err := os.WriteFile(filepath.Join(src, "allot-cni"), append(prog, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	rs, err := Install(Options{BinDir: bin, SrcDir: src})
	if err != nil {
		t.Fatalf("install over a running binary: %v", err)
	}
	if actions(rs)["allot-cni"] != Installed {
		t.Fatalf("%v", rs)
	}
}

// TestWriteFileAtomic: a reader never sees a partial file, whatever the moment it reads.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	a := bytes.Repeat([]byte("a"), 1<<20)
	b := bytes.Repeat([]byte("b"), 1<<20+17)
	if err := WriteFile(dir, "f", a, 0o644); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reads, bad atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			got, err := os.ReadFile(filepath.Join(dir, "f"))
			reads.Add(1)
			if err != nil || !(bytes.Equal(got, a) || bytes.Equal(got, b)) {
				bad.Add(1)
			}
		}
	}()
	for i := range 40 {
		data := a
		if i%2 == 0 {
			data = b
		}
		if err := WriteFile(dir, "f", data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d of %d reads saw a missing or partial file", bad.Load(), reads.Load())
	}
	noTemps(t, dir)
}

func TestWriteConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d")
	wrote, err := WriteConfig(dir, "05-allot.conflist", []byte(`{"v":1}`))
	if err != nil || !wrote {
		t.Fatalf("first write: %v %v", wrote, err)
	}
	p := filepath.Join(dir, "05-allot.conflist")
	ino := inode(t, p)
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	wrote, err = WriteConfig(dir, "05-allot.conflist", []byte(`{"v":1}`))
	if err != nil || wrote || inode(t, p) != ino {
		t.Fatalf("same content rewritten: %v %v", wrote, err)
	}
	wrote, err = WriteConfig(dir, "05-allot.conflist", []byte(`{"v":2}`))
	if err != nil || !wrote || readFile(t, p) != `{"v":2}` {
		t.Fatalf("older file not replaced: %v %v", wrote, err)
	}
	noTemps(t, dir)
	removed, err := RemoveConfig(dir, "05-allot.conflist")
	if err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	removed, err = RemoveConfig(dir, "05-allot.conflist")
	if err != nil || removed {
		t.Fatalf("second remove: %v %v", removed, err)
	}
}
