package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/internal/testenv"
)

// CNIPluginsVersion is the reference plugins release the tests expect (mk/cni.mk pins the same).
const CNIPluginsVersion = "v1.9.1"

// env is what TestMain found and built. A non-empty reason ends the tests that need the
// missing part by internal/testenv's rule: a failure under CI and make test, a skip elsewhere.
var env struct {
	root string // module root
	tmp  string

	allotCNI  string // built allot-cni
	cniSkip   string // why allot-cni is not available
	allotd    string // built allotd
	daemonErr string // allotd does not build: tests needing it fail

	rootSkip  string // not root
	toolsSkip string // cnitool / reference plugins / iproute2 missing
	cnitool   string
	cniBinDir string // reference plugins
	cniPath   string // dir with bridge, host-local and allot-cni: CNI_PATH for cnitool
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		env.cniSkip = "short mode: e2e tests build and exec the real binaries"
		env.rootSkip, env.toolsSkip = env.cniSkip, env.cniSkip
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "allot-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	env.tmp = tmp
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		return 1
	}
	return m.Run()
}

func setup() error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return fmt.Errorf("cannot find the module root (go env GOMOD): %v", err)
	}
	env.root = filepath.Dir(strings.TrimSpace(string(out)))
	binDir := filepath.Join(env.tmp, "bin")

	// allot-cni alone is enough for the bad-input tests, so build it first and separately.
	env.allotCNI = filepath.Join(binDir, "allot-cni")
	if err := goBuild(env.allotCNI, "./cmd/allot-cni"); err != nil {
		return err
	}
	env.allotd = filepath.Join(binDir, "allotd")
	if prebuilt := os.Getenv("ALLOT_ALLOTD"); prebuilt != "" {
		env.allotd = prebuilt
		if _, err := os.Stat(prebuilt); err != nil {
			env.daemonErr = "ALLOT_ALLOTD: " + err.Error()
		}
	} else if err := goBuild(env.allotd, "./cmd/allotd"); err != nil {
		env.daemonErr = err.Error()
	}

	if os.Geteuid() != 0 {
		env.rootSkip = "needs root: creates network namespaces and mounts"
	}
	cache := os.Getenv("ALLOT_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "allot")
	}
	env.cniBinDir = envOr("ALLOT_CNI_BIN_DIR", filepath.Join(cache, "cni-"+CNIPluginsVersion))
	env.cnitool = envOr("ALLOT_CNITOOL", filepath.Join(cache, "cni-tools", "cnitool"))
	for _, p := range []string{filepath.Join(env.cniBinDir, "bridge"), filepath.Join(env.cniBinDir, "host-local"), filepath.Join(env.cniBinDir, "ptp"), env.cnitool} {
		if _, err := os.Stat(p); err != nil && env.toolsSkip == "" {
			env.toolsSkip = fmt.Sprintf("CNI tools missing (%s): run hack/install-cni-tools.sh or set ALLOT_CNI_BIN_DIR / ALLOT_CNITOOL", p)
		}
	}
	for _, tool := range []string{"ip", "unshare", "mount", "sh"} {
		if _, err := exec.LookPath(tool); err != nil && env.toolsSkip == "" {
			env.toolsSkip = fmt.Sprintf("%s is not on PATH (iproute2 / util-linux needed)", tool)
		}
	}
	if env.toolsSkip == "" {
		env.cniPath = filepath.Join(env.tmp, "cni-bin")
		if err := os.MkdirAll(env.cniPath, 0o755); err != nil {
			return err
		}
		links := map[string]string{
			"bridge":     filepath.Join(env.cniBinDir, "bridge"),
			"host-local": filepath.Join(env.cniBinDir, "host-local"),
			"ptp":        filepath.Join(env.cniBinDir, "ptp"),
			"allot-cni":  env.allotCNI,
		}
		for name, target := range links {
			if err := os.Symlink(target, filepath.Join(env.cniPath, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

func goBuild(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = env.root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// needCNI ends the test unless allot-cni was built.
func needCNI(t *testing.T) {
	t.Helper()
	need(t, env.cniSkip)
}

// needDaemon ends the test unless allot-cni and allotd were built.
func needDaemon(t *testing.T) {
	t.Helper()
	needCNI(t)
	if env.daemonErr != "" {
		t.Fatal(env.daemonErr)
	}
}

// needNetwork ends the test unless it can create namespaces and run cnitool with the bridge.
func needNetwork(t *testing.T) {
	t.Helper()
	needDaemon(t)
	need(t, env.rootSkip)
	need(t, env.toolsSkip)
}

func need(t *testing.T, missing string) {
	t.Helper()
	if missing != "" {
		testenv.Missing(t, missing)
	}
}
