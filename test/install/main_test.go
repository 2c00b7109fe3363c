// Package install installs allot with its Helm chart on a real one-node cluster (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, containerd, runc: see
// test/realnode) and follows a user through it: the node turns Ready once the agent has
// written the CNI configuration, a Deployment gets addresses from allot's pools, traffic
// works and is masqueraded, scaling frees addresses, an agent killed during churn loses
// nothing, an upgrade keeps every allocation and an uninstall leaves nothing behind.
//
// It needs root, the kube binaries (make kube-binaries), the CNI plugins (make cni-tools),
// helm (make helm: ALLOT_HELM) and the image (make image: ALLOT_IMAGE_TAR). Under CI and make
// test a missing piece fails the test with the reason, elsewhere it skips (internal/testenv).
package install

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/realnode"
)

// env is what the tests need from outside, checked once.
var env struct {
	imageTar, imageRef string
	helm               string
	allotctl           string
	chart              string
	missing            string // why the tests cannot run, or ""
	broken             string // a setup step that failed, or ""
}

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "allot-install-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		env.missing = prepare(dir)
		return m.Run()
	}()
	os.Exit(code)
}

func prepare(dir string) string {
	if err := realnode.Check(); err != nil {
		return err.Error()
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	env.chart = filepath.Join(root, "deploy", "helm", "allot")
	env.helm = os.Getenv("ALLOT_HELM")
	if env.helm == "" {
		return "ALLOT_HELM is not set (make helm prints the path; make test sets it)"
	}
	env.imageTar = os.Getenv("ALLOT_IMAGE_TAR")
	if env.imageTar == "" {
		return "ALLOT_IMAGE_TAR is not set (make image builds bin/allot-image.tar; make test sets it)"
	}
	ref, err := ImageRef(env.imageTar)
	if err != nil {
		return err.Error()
	}
	env.imageRef = ref
	env.allotctl = filepath.Join(dir, "allotctl")
	cmd := exec.Command("go", "build", "-o", env.allotctl, "./cmd/allotctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		env.broken = fmt.Sprintf("building allotctl: %v\n%s", err, out)
	}
	return ""
}

// need ends a test that cannot run here (internal/testenv's rule) or whose setup failed.
func need(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("short mode: installs allot on a real one-node cluster")
	}
	if env.missing != "" {
		testenv.Missing(t, env.missing)
	}
	if env.broken != "" {
		t.Fatal(env.broken)
	}
}
