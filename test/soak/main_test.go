package soak

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// defaultDuration is the chaos time of each scenario under plain `go test`: long enough for
// a few kills and, in the cluster, one restart each of kube-apiserver and etcd.
const defaultDuration = 15 * time.Second

// env is what TestMain prepared.
var env struct {
	root     string
	allotd   string
	allotCNI string
	buildErr string // the binaries do not build: tests fail with it
	duration time.Duration
	durErr   string
}

func TestMain(m *testing.M) {
	flag.Parse()
	// client-go's reflectors and leader election log through klog; the soak's own API
	// client would print every refused connection during API-server restarts.
	klog.SetLogger(logr.Discard())
	ctrllog.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env.duration = defaultDuration
	if v := os.Getenv("ALLOT_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			env.durErr = fmt.Sprintf("ALLOT_SOAK=%q is not a positive duration (e.g. 60s, 10m)", v)
		}
		env.duration = d
	}
	if testing.Short() {
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "allot-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if err := build(tmp); err != nil {
		env.buildErr = err.Error()
	}
	code := m.Run()
	printFigures(os.Stdout)
	return code
}

// build compiles allotd and allot-cni as `make build` does (without the version stamp).
func build(dir string) error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return fmt.Errorf("cannot find the module root (go env GOMOD): %v", err)
	}
	env.root = filepath.Dir(mod)
	env.allotd = filepath.Join(dir, "allotd")
	env.allotCNI = filepath.Join(dir, "allot-cni")
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/allotd", "./cmd/allot-cni")
	cmd.Dir = env.root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/allotd ./cmd/allot-cni: %v\n%s", err, b)
	}
	return nil
}

// need ends the test when it cannot run: a skip under -short, a failure for a broken build
// or a bad ALLOT_SOAK.
func need(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("short mode: the soak runs real binaries for ALLOT_SOAK per scenario")
	}
	if env.durErr != "" {
		t.Fatal(env.durErr)
	}
	if env.buildErr != "" {
		t.Fatal(env.buildErr)
	}
}
