package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/allot-ipam/allot/internal/testenv"
)

func testImages(t *testing.T) string {
	t.Helper()
	l, err := Layer([]File{
		{Path: "bin/hello", Data: []byte("#!/bin/sh\necho hello\n"), Mode: 0o755},
		{Path: "etc/empty", Data: []byte{}},
		{Path: "usr/bin/hi", Link: "/bin/hello"},
		{Path: "tmp", Dir: true, Mode: 0o1777},
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image("amd64", Config{Entrypoint: []string{"/bin/hello"}, Labels: map[string]string{"a": "b"}}, l)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "img.tar")
	if err := WriteOCITar(p, map[string]v1.Image{"example.test/hello:v1": img, "example.test/hello:v2": img}); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDeterministic: two builds of the same files are the same bytes.
func TestDeterministic(t *testing.T) {
	a, err := os.ReadFile(testImages(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(testImages(t))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("two builds of the same image differ")
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	c, err := os.ReadFile(testImages(t))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, c) {
		t.Fatal("SOURCE_DATE_EPOCH changed nothing")
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		files []File
		want  string
	}{
		{[]File{{Path: "../x", Data: []byte("x")}}, `files[0].path "../x"`},
		{[]File{{Path: "x"}}, "set exactly one"},
		{[]File{{Path: "x", Data: []byte("x"), Dir: true}}, "set exactly one"},
		{[]File{{Path: "x", Data: []byte("x")}, {Path: "/x", Data: []byte("y")}}, "given twice"},
		{[]File{{Path: "x", Data: []byte("x")}, {Path: "x/y", Data: []byte("y")}}, "also a file"},
	} {
		if _, err := Layer(tc.files); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.files, err, tc.want)
		}
	}
	t.Setenv("SOURCE_DATE_EPOCH", "soon")
	if _, err := Layer([]File{{Path: "x", Data: []byte("x")}}); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("bad SOURCE_DATE_EPOCH: %v", err)
	}
}

// TestLayoutReadsBack: the tar is an OCI layout that go-containerregistry reads, with both
// references annotated and the files in place.
func TestLayoutReadsBack(t *testing.T) {
	dir := t.TempDir()
	untar(t, testImages(t), dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("%d manifests", len(m.Manifests))
	}
	for i, want := range []string{"example.test/hello:v1", "example.test/hello:v2"} {
		d := m.Manifests[i]
		if d.Annotations["io.containerd.image.name"] != want || d.Annotations["org.opencontainers.image.ref.name"] != want[strings.LastIndex(want, ":")+1:] {
			t.Fatalf("manifest %d annotations %v", i, d.Annotations)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != "amd64" || cf.OS != "linux" || cf.Config.Entrypoint[0] != "/bin/hello" || !cf.Created.Time.Equal(time.Unix(0, 0)) {
			t.Fatalf("config %+v", cf)
		}
		ls, err := img.Layers()
		if err != nil || len(ls) != 1 {
			t.Fatalf("layers %v %v", ls, err)
		}
		rc, err := ls[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got[h.Name] = fmt.Sprintf("%c %o %s %d", h.Typeflag, h.Mode, h.Linkname, h.Uid)
		}
		rc.Close()
		want := map[string]string{
			"bin/": "5 755  0", "bin/hello": "0 755  0", "etc/": "5 755  0", "etc/empty": "0 644  0",
			"tmp/": "5 1777  0", "usr/": "5 755  0", "usr/bin/": "5 755  0", "usr/bin/hi": "2 777 /bin/hello 0",
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("layer entries\n%v\nwant\n%v", got, want)
		}
	}
}

// TestContainerdImports: containerd's own import registers both references with the
// manifest digests of the layout. A containerd of the test's own (socket, root and state
// in a temporary directory) so nothing else on the machine is touched.
func TestContainerdImports(t *testing.T) {
	testenv.RequireRoot(t, "runs containerd")
	testenv.RequireBinary(t, "containerd", "Debian package containerd; make deps")
	testenv.RequireBinary(t, "ctr", "Debian package containerd; make deps")
	tarPath := testImages(t)
	dir, err := os.MkdirTemp("", "ociimg-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "c.sock")
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("version = 2\nroot = %q\nstate = %q\n[grpc]\n  address = %q\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    disable_cgroup = true\n", filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log testenv.Buffer
	cd := exec.CommandContext(ctx, "containerd", "--config", cfg)
	cd.Stdout, cd.Stderr = &log, &log
	if err := cd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cd.Process.Kill()
		_ = cd.Wait()
		// containerd mounts nothing for an import; its state dir may hold a socket only.
	}()
	ctr := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %v: %v\n%s\ncontainerd log:\n%s", args, err, out, log.String())
		}
		return string(out)
	}
	testenv.Eventually(t, 30*time.Second, "containerd to start", func() (bool, string) {
		if _, err := os.Stat(sock); err != nil {
			return false, err.Error()
		}
		out, err := exec.CommandContext(ctx, "ctr", "--address", sock, "version").CombinedOutput()
		return err == nil, fmt.Sprintf("%v: %s\ncontainerd log:\n%s", err, out, log.String())
	})
	ctr("images", "import", tarPath)
	out := ctr("images", "ls")
	dir2 := t.TempDir()
	untar(t, tarPath, dir2)
	idx, err := layout.ImageIndexFromPath(dir2)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		ref := d.Annotations["io.containerd.image.name"]
		found := false
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[0] == ref && f[2] == d.Digest.String() {
				found = true
			}
		}
		if !found {
			t.Fatalf("ctr images ls lacks %s @ %s:\n%s", ref, d.Digest, out)
		}
	}
}

func untar(t *testing.T, src, dst string) {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
