package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/allot-ipam/allot/internal/ociimage"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Image references of BuildImages' tar.
const (
	PauseImage      = "registry.k8s.io/pause:3.10.1"
	TestServerImage = "local.test/allot-testserver:v1"
)

// TestServerPath is the test server binary BuildImages leaves in dir (to run on the host,
// e.g. in a network namespace standing for a host outside the cluster).
func TestServerPath(dir string) string { return filepath.Join(dir, "testserver") }

// BuildImages builds the test server (a static binary) and writes one OCI layout tar holding
// the pause image the runtime uses for pod sandboxes and the test server image, so the
// cluster needs no registry.
func BuildImages(ctx context.Context, dir string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	bin := TestServerPath(dir)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./testserver")
	cmd.Dir = filepath.Dir(file)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("realnode: building the test server: %v\n%s", err, out)
	}
	layer, err := ociimage.Layer([]ociimage.File{{Path: "pause", Src: bin, Mode: 0o755}, {Path: "tmp", Dir: true, Mode: 0o1777}})
	if err != nil {
		return "", err
	}
	imgs := map[string]v1.Image{}
	for ref, entry := range map[string][]string{PauseImage: {"/pause"}, TestServerImage: {"/pause", "serve"}} {
		img, err := ociimage.Image(runtime.GOARCH, ociimage.Config{Entrypoint: entry}, layer)
		if err != nil {
			return "", err
		}
		imgs[ref] = img
	}
	out := filepath.Join(dir, "test-images.tar")
	if err := ociimage.WriteOCITar(out, imgs); err != nil {
		return "", err
	}
	return out, nil
}
