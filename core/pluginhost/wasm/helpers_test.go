package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Guests are built once per test binary (a Go wasm build takes seconds) into a directory
// removed when the tests end.
var (
	buildDir  string
	buildMu   sync.Mutex
	buildMemo = map[string]buildResult{}
)

type buildResult struct {
	path string
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "allot-wasm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildGuest builds the main package in dir (relative to this package, or absolute) with
// GOOS=wasip1 GOARCH=wasm; reactor selects -buildmode=c-shared.
func buildGuest(tb testing.TB, dir string, reactor bool) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("skipping wasm guest build in -short mode")
	}
	key := fmt.Sprintf("%s|%v", dir, reactor)
	buildMu.Lock()
	defer buildMu.Unlock()
	if r, ok := buildMemo[key]; ok {
		if r.err != nil {
			tb.Fatal(r.err)
		}
		return r.path
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(buildDir, fmt.Sprintf("guest-%d.wasm", len(buildMemo)))
	args := []string{"build", "-o", out}
	if reactor {
		args = append(args, "-buildmode=c-shared")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		r := buildResult{err: fmt.Errorf("build guest %s: %v\n%s", dir, err, b)}
		buildMemo[key] = r
		tb.Fatal(r.err)
	}
	tb.Logf("built %s in %s", dir, time.Since(start).Round(time.Millisecond))
	buildMemo[key] = buildResult{path: out}
	return out
}

func fileSHA256(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// openGuest opens the guest at path with its correct pin; mod adjusts the config.
func openGuest(tb testing.TB, path string, mod func(*Config)) *Plugin {
	tb.Helper()
	cfg := Config{Name: "test", Path: path, SHA256: fileSHA256(tb, path), Instances: 2, Timeout: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	p, err := Open(context.Background(), cfg, nil)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// benchPools is the pool set the benchmarks and tests use: 20 pools, 10 per family, with
// the label, affinity and counter fields a realistic request carries.
func benchPools() []policy.PoolView {
	var pools []policy.PoolView
	for i := range 10 {
		pools = append(pools, policy.PoolView{
			Name:          fmt.Sprintf("pool-v4-%02d", i),
			Family:        policy.IPv4,
			CIDRs:         []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/16", i))},
			Total:         65534,
			Free:          60000 - uint64(i),
			Default:       i == 0,
			NodeAffinity:  &policy.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": "zone-a"}},
			NamespaceName: []string{"default", "prod"},
		}, policy.PoolView{
			Name:   fmt.Sprintf("pool-v6-%02d", i),
			Family: policy.IPv6,
			CIDRs:  []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("fd00:%x::/64", i+1))},
			Total:  1 << 32, Free: 1<<32 - 100,
			Default: i == 0,
		})
	}
	return pools
}

func podRequest(name string, labels map[string]string) *policy.PodRequest {
	return &policy.PodRequest{
		Pod: policy.Pod{
			Namespace: "prod", Name: name, UID: "0b1f4c1e-7d1a-4a53-9a43-1c6f8e2b9f10",
			Labels:      labels,
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2024-01-01T00:00:00Z"},
			OwnerKind:   "ReplicaSet", OwnerName: "web-7d9f",
		},
		Namespace: policy.Namespace{Name: "prod", Labels: map[string]string{"team": "web"}},
		Node:      policy.Node{Name: "node-1", Labels: map[string]string{"topology.kubernetes.io/zone": "zone-a"}},
		CNI:       policy.CNIRequest{IfName: "eth0", Network: "allot"},
		Pools:     benchPools(),
	}
}

func mustContain(t *testing.T, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%q does not contain %q", s, sub)
		}
	}
}

// waitFullPool waits until the background replacement of discarded instances is done.
func waitFullPool(t *testing.T, p *Plugin) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "the pool to refill", func() (bool, string) {
		st := p.Status()
		return st.Instances == p.cfg.Instances, fmt.Sprintf("%+v", st)
	})
}
