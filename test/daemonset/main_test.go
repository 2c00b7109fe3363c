// Package daemonset runs the real allotd binary in agent mode as its DaemonSet runs it, on a
// real kube-apiserver (test/k8senv), inside a network namespace the test creates: the
// install-cni step, the network configuration written once the agent serves, the iptables
// datapath following the node's blocks, and the stop that keeps everything during a rolling
// update but uninstalls once the DaemonSet is gone.
//
// It needs root (network namespaces, iptables), iptables on PATH and the kube-apiserver and
// etcd binaries (hack/build-kube.sh). Without them it follows internal/testenv: a failure with
// the reason under CI and make test, a skip elsewhere; -short skips.
package daemonset

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/k8senv"
)

var env struct {
	root      string
	tmp       string
	allotd    string
	allotCNI  string
	setupErr  string
	skipWhy   string
	skipShort bool
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		env.skipShort = true
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "allot-daemonset-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemonset:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	env.tmp = tmp
	if err := setup(); err != nil {
		env.setupErr = err.Error()
	}
	return m.Run()
}

func setup() error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return fmt.Errorf("cannot find the module root (go env GOMOD): %v", err)
	}
	env.root = filepath.Dir(mod)
	switch {
	case os.Geteuid() != 0:
		env.skipWhy = "needs root: creates a network namespace and iptables rules"
	default:
		for _, b := range []string{"iptables", "ip6tables", "iptables-save", "ip6tables-save"} {
			if _, err := exec.LookPath(b); err != nil {
				env.skipWhy = fmt.Sprintf("needs %s on PATH (Debian package iptables)", b)
				break
			}
		}
	}
	if env.skipWhy == "" {
		if _, err := k8senv.BinDir(); err != nil {
			env.skipWhy = err.Error()
		}
	}
	if env.skipWhy != "" {
		return nil
	}
	env.allotd = os.Getenv("ALLOT_ALLOTD")
	if env.allotd == "" {
		env.allotd = filepath.Join(env.tmp, "allotd")
		if err := goBuild(env.allotd, "./cmd/allotd"); err != nil {
			return err
		}
	}
	env.allotCNI = filepath.Join(env.tmp, "allot-cni")
	return goBuild(env.allotCNI, "./cmd/allot-cni")
}

func goBuild(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = env.root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// need ends a test that cannot run here (internal/testenv's rule).
func need(t *testing.T) {
	t.Helper()
	if env.skipShort {
		t.Skip("short mode: runs the real allotd against a real kube-apiserver in a network namespace")
	}
	if env.setupErr != "" {
		t.Fatal(env.setupErr)
	}
	if env.skipWhy != "" {
		testenv.Missing(t, env.skipWhy)
	}
}
