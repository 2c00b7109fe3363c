package process

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/pluginhost/process/testdata/labelpolicy"
	"github.com/allot-ipam/allot/internal/benchutil"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/sdk/pluginrpc"
	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/version"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// testBinary builds the test plugins once per test binary run and returns the path of one.
func testBinary(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("slow: builds and runs plugin processes")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "allot-process-test-")
		if buildErr != nil {
			return
		}
		for _, n := range []string{"policyplugin", "badversionplugin"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, n), "./testdata/"+n).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", n, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

func TestMain(m *testing.M) {
	if os.Getenv("ALLOT_TEST_HELPER_HOST") == "1" {
		helperHost()
		return
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func sha256File(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// logBuffer collects log output; go-plugin goroutines may log after a test ends, which
// t.Log would not survive.
type logBuffer = testenv.Buffer

func testConfig(t testing.TB, bin string) Config {
	path := testBinary(t, bin)
	return Config{
		Name:           "test-" + bin,
		Kind:           pluginrpc.KindPoolPolicy,
		Path:           path,
		SHA256:         sha256File(t, path),
		Timeout:        2 * time.Second,
		HealthInterval: 200 * time.Millisecond,
		MinBackoff:     50 * time.Millisecond,
		MaxBackoff:     time.Second,
	}
}

func open(t testing.TB, cfg Config) (*Plugin, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	p, err := Open(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("Open: %v\nlogs:\n%s", err, logs)
	}
	t.Cleanup(func() { p.Close() })
	return p, logs
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, what, testenv.Cond(cond))
}

// podRequest builds a request with n pools, half of them defaults, as a busy cluster has.
func podRequest(podName string, labels map[string]string, n int) *policy.PodRequest {
	req := &policy.PodRequest{
		Pod: policy.Pod{
			Namespace: "default", Name: podName, UID: "0d6f2b1e-uid", Labels: labels,
			Annotations: map[string]string{"kubernetes.io/psp": "restricted", "ipam.cilium.io/ip-pool": "x"},
			OwnerKind:   "ReplicaSet", OwnerName: "web-7d9f",
		},
		Namespace: policy.Namespace{Name: "default", Labels: map[string]string{"kubernetes.io/metadata.name": "default"}},
		Node:      policy.Node{Name: "node-1", Labels: map[string]string{"topology.kubernetes.io/zone": "z1", "kubernetes.io/os": "linux"}},
		CNI:       policy.CNIRequest{IfName: "eth0", Network: "allot", DefaultIPv4Pools: []string{"pool-00"}},
	}
	for i := range n {
		fam, cidr := policy.IPv4, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16)
		if i%2 == 1 {
			fam, cidr = policy.IPv6, netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, byte(i)}), 64)
		}
		req.Pools = append(req.Pools, policy.PoolView{
			Name: fmt.Sprintf("pool-%02d", i), Family: fam, CIDRs: []netip.Prefix{cidr},
			Total: 65534, Free: uint64(1000 * (i % 7)), Default: i%3 == 0,
			NodeAffinity: &policy.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": "z1"}},
			Excluded:     []string{cidr.Addr().Next().String()},
		})
	}
	return req
}

func TestRoundTripMatchesBuiltin(t *testing.T) {
	p, _ := open(t, testConfig(t, "policyplugin"))
	ctx := context.Background()
	viaPlugin, builtin := p.PoolPolicy(), labelpolicy.Policy{}
	reqs := []*policy.PodRequest{
		podRequest("a", nil, 20),
		podRequest("b", map[string]string{labelpolicy.Label: "pool-05"}, 20),
		podRequest("c", map[string]string{labelpolicy.Label: "missing"}, 20),
		podRequest("d", nil, 0),
	}
	for _, req := range reqs {
		want, werr := builtin.SelectPodPools(ctx, req)
		got, gerr := viaPlugin.SelectPodPools(ctx, req)
		if werr != nil || gerr != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("pod %s: plugin = %+v, %v; built-in = %+v, %v", req.Pod.Name, got, gerr, want, werr)
		}
	}
	nreq := &policy.NodeRequest{Node: policy.Node{Name: "n"}, Configs: []policy.CIDRConfigView{
		{Name: "full", IPv4: &policy.CIDRSpec{CIDR: netip.MustParsePrefix("10.0.0.0/16"), PerNodeMaskSize: 24}},
		{Name: "free", IPv4: &policy.CIDRSpec{CIDR: netip.MustParsePrefix("10.1.0.0/16"), PerNodeMaskSize: 24}, FreeBlocks: 3},
	}}
	want, _ := builtin.SelectNodeCIDRConfig(ctx, nreq)
	got, err := viaPlugin.SelectNodeCIDRConfig(ctx, nreq)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("node: plugin = %+v, %v; built-in = %+v", got, err, want)
	}

	st := p.Status()
	if st.Health != HealthHealthy || st.Transport != "process" || st.Kind != "pool-policy" || st.PluginName != "test-policy" ||
		st.PluginVersion != "1.2.3" || st.ContractVersion != policy.ContractVersion || st.PID == 0 || st.Restarts != 0 {
		t.Errorf("Status = %+v", st)
	}
}

func TestCrashRestarts(t *testing.T) {
	p, _ := open(t, testConfig(t, "policyplugin"))
	ctx := context.Background()
	pol := p.PoolPolicy()
	oldPID := p.Status().PID

	_, err := pol.SelectPodPools(ctx, podRequest("crash", nil, 2))
	if !errors.Is(err, ErrCrashed) || !strings.Contains(err.Error(), `plugin "test-policyplugin"`) {
		t.Fatalf("crash: err = %v, want ErrCrashed naming the plugin", err)
	}
	// While down, calls fail fast and say why.
	start := time.Now()
	_, err = pol.SelectPodPools(ctx, podRequest("a", nil, 2))
	if err != nil {
		if !errors.Is(err, ErrRestarting) || !strings.Contains(err.Error(), "is restarting (last error:") {
			t.Fatalf("during restart: err = %v", err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("call during restart took %v, want fast failure", d)
		}
	}
	waitFor(t, "restart", func() bool { st := p.Status(); return st.Health == HealthHealthy && st.Restarts == 1 })
	if _, err := pol.SelectPodPools(ctx, podRequest("a", nil, 2)); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	st := p.Status()
	if st.PID == oldPID || st.LastError == "" {
		t.Errorf("Status after restart = %+v", st)
	}
}

func TestHangTimesOutAndRestarts(t *testing.T) {
	cfg := testConfig(t, "policyplugin")
	cfg.Timeout = 300 * time.Millisecond
	p, _ := open(t, cfg)
	oldPID := p.Status().PID
	start := time.Now()
	_, err := p.PoolPolicy().SelectPodPools(context.Background(), podRequest("hang", nil, 2))
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("hang: err = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("hung call returned after %v", d)
	}
	waitFor(t, "hung process killed", func() bool { return !alive(oldPID) })
	waitFor(t, "restart", func() bool { st := p.Status(); return st.Health == HealthHealthy && st.Restarts == 1 })
	if _, err := p.PoolPolicy().SelectPodPools(context.Background(), podRequest("a", nil, 2)); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

func TestCallerDeadlineDoesNotRestart(t *testing.T) {
	p, _ := open(t, testConfig(t, "policyplugin"))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := p.PoolPolicy().SelectPodPools(ctx, podRequest("hang", nil, 2))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want the caller's deadline, not a plugin timeout", err)
	}
	time.Sleep(300 * time.Millisecond) // sleep: checks the host does NOT restart the plugin meanwhile
	if st := p.Status(); st.Restarts != 0 || st.Health != HealthHealthy {
		t.Fatalf("plugin restarted for the caller's deadline: %+v", st)
	}
}

func TestPanicIsAnError(t *testing.T) {
	p, _ := open(t, testConfig(t, "policyplugin"))
	_, err := p.PoolPolicy().SelectPodPools(context.Background(), podRequest("panic", nil, 2))
	if !errors.Is(err, pluginrpc.ErrPluginPanic) || !strings.Contains(err.Error(), "test panic") {
		t.Fatalf("err = %v, want ErrPluginPanic", err)
	}
	if _, err := p.PoolPolicy().SelectPodPools(context.Background(), podRequest("a", nil, 2)); err != nil {
		t.Fatal(err)
	}
	if st := p.Status(); st.Restarts != 0 {
		t.Fatalf("restarted after a recovered panic: %+v", st)
	}
}

func TestStdoutGarbage(t *testing.T) {
	cfg := testConfig(t, "policyplugin")
	cfg.Env = []string{"TEST_PLUGIN_STDOUT_GARBAGE=1"}
	p, logs := open(t, cfg)
	req := podRequest("print", map[string]string{labelpolicy.Label: "pool-02"}, 4)
	got, err := p.PoolPolicy().SelectPodPools(context.Background(), req)
	want, _ := labelpolicy.Policy{}.SelectPodPools(context.Background(), req)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("SelectPodPools = %+v, %v", got, err)
	}
	waitFor(t, "stdout lines in the log", func() bool {
		l := logs.String()
		return strings.Contains(l, "garbage on stdout before serving") &&
			strings.Contains(l, "garbage on stdout during a call") &&
			strings.Contains(l, "garbage on fd 1 during a call")
	})
}

func TestWrongContractVersionRefused(t *testing.T) {
	for _, tt := range []struct{ plugin, want string }{
		{"", `plugin "test-badversionplugin" speaks pool-policy contract 2.0.0, host speaks ` + policy.ContractVersion},
		{"1.9.0", `plugin "test-badversionplugin" speaks pool-policy contract 1.9.0, host speaks ` + policy.ContractVersion + ` (plugin is newer)`},
	} {
		cfg := testConfig(t, "badversionplugin")
		if tt.plugin != "" {
			cfg.Env = []string{"TEST_CONTRACT_VERSION=" + tt.plugin}
		}
		_, err := Open(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if !errors.Is(err, ErrRefused) || !errors.Is(err, version.ErrIncompatible) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open = %v, want refusal containing %q", err, tt.want)
		}
	}
}

func TestSHA256MismatchRefused(t *testing.T) {
	cfg := testConfig(t, "policyplugin")
	good := cfg.SHA256
	cfg.SHA256 = strings.Repeat("ab", 32)
	_, err := Open(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), good) || !strings.Contains(err.Error(), cfg.SHA256) {
		t.Fatalf("Open = %v, want refusal naming both digests", err)
	}
}

func TestWrongKind(t *testing.T) {
	p, _ := open(t, testConfig(t, "policyplugin"))
	if _, err := p.Datapath().Status(context.Background()); !errors.Is(err, ErrWrongKind) {
		t.Fatalf("err = %v, want ErrWrongKind", err)
	}
	cfg := testConfig(t, "policyplugin")
	cfg.Kind = pluginrpc.KindCloudBackend
	_, err := Open(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `serves a "pool-policy" plugin, configuration says "cloud-backend"`) {
		t.Fatalf("Open = %v", err)
	}
}

func TestClose(t *testing.T) {
	p, _ := open(t, testConfig(t, "policyplugin"))
	pid := p.Status().PID
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PoolPolicy().SelectPodPools(context.Background(), podRequest("a", nil, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	waitFor(t, "process gone", func() bool { return !alive(pid) })
	if st := p.Status(); st.Health != HealthClosed {
		t.Fatalf("Status = %+v", st)
	}
}

// alive reports whether pid exists and is not a zombie (a zombie has died; only its parent
// has not reaped it yet).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Format: pid (comm) state ...; comm may contain spaces, so split after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// helperHost runs in a child process: it opens the plugin, prints the plugin's pid and
// waits to be SIGKILLed by the test.
func helperHost() {
	cfg := Config{
		Name: "orphan-check", Kind: pluginrpc.KindPoolPolicy,
		Path: os.Getenv("ALLOT_TEST_PLUGIN"), SHA256: os.Getenv("ALLOT_TEST_PLUGIN_SHA256"),
	}
	p, err := Open(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	d, err := p.PoolPolicy().SelectPodPools(context.Background(), &policy.PodRequest{Pod: policy.Pod{Name: "pid"}})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("PID", d.Reason)
	time.Sleep(time.Minute) // sleep: a child process waiting to be SIGKILLed by the test
	os.Exit(2)
}

func TestNoOrphansWhenHostKilled(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		testenv.Missing(t, "needs /proc to check process state")
	}
	path := testBinary(t, "policyplugin")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ALLOT_TEST_HELPER_HOST=1", "ALLOT_TEST_PLUGIN="+path, "ALLOT_TEST_PLUGIN_SHA256="+sha256File(t, path))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "PID ") {
		t.Fatalf("helper said %q, %v", line, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "PID ")))
	if err != nil || !alive(pid) {
		t.Fatalf("plugin pid %q not running: %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitFor(t, fmt.Sprintf("plugin pid %d to die with its host", pid), func() bool { return !alive(pid) })
}

func TestConfigValidate(t *testing.T) {
	good := Config{Name: "p", Kind: pluginrpc.KindPoolPolicy, Path: "/bin/p", SHA256: strings.Repeat("0", 64)}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		field string
		mod   func(*Config)
	}{
		{"name: empty", func(c *Config) { c.Name = "" }},
		{"kind:", func(c *Config) { c.Kind = "storage" }},
		{"path: empty", func(c *Config) { c.Path = "" }},
		{"path: \"p\" is not absolute", func(c *Config) { c.Path = "p" }},
		{"sha256:", func(c *Config) { c.SHA256 = "abc" }},
		{"env[0]:", func(c *Config) { c.Env = []string{"NOEQUALS"} }},
		{"timeout: negative", func(c *Config) { c.Timeout = -1 }},
		{"min_backoff:", func(c *Config) { c.MinBackoff, c.MaxBackoff = time.Minute, time.Second }},
	}
	for _, tt := range tests {
		c := good
		tt.mod(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: Validate = %v", tt.field, err)
		}
	}
}

// BenchmarkProcessPolicyDecision: one pool decision (20 pools in the request) through the
// supervised go-plugin transport: AutoMTLS gRPC to a real plugin process. For diagnosis,
// BENCH_PLUGIN_ENV=K=V,... adds plugin environment, e.g. GOMAXPROCS=2 to compare with the
// host's default of 1, or TEST_PLUGIN_CPUPROFILE=/tmp/plugin.prof to profile the plugin.
func BenchmarkProcessPolicyDecision(b *testing.B) {
	p, _ := open(b, benchConfig(b))
	pol := p.PoolPolicy()
	req := podRequest("bench", nil, 20)
	ctx := context.Background()
	pid := p.Status().PID
	b.ReportAllocs()
	host0, plugin0 := cpuTime(b, 0), cpuTime(b, pid)
	hostSys0, pluginSys0 := syscalls(0), syscalls(pid)
	n := 0
	for b.Loop() {
		if _, err := pol.SelectPodPools(ctx, req); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportSyscalls(b, n, syscalls(0)-hostSys0, syscalls(pid)-pluginSys0)
	// Wall time per op is inflated on a busy machine (scheduling delays at every hop);
	// CPU time per op, host plus plugin, is what the decision costs.
	host, plugin := cpuTime(b, 0)-host0, cpuTime(b, pid)-plugin0
	b.ReportMetric(float64((host+plugin).Nanoseconds())/float64(n), "cpu-ns/op")
	b.ReportMetric(float64(plugin.Nanoseconds())/float64(n), "plugin-cpu-ns/op")
}

// benchConfig is the test plugin's configuration with BENCH_PLUGIN_ENV added.
func benchConfig(b *testing.B) Config {
	cfg := testConfig(b, "policyplugin")
	if v := os.Getenv("BENCH_PLUGIN_ENV"); v != "" {
		cfg.Env = strings.Split(v, ",")
	}
	return cfg
}

// cpuTime returns the user+system CPU time of this process (pid 0) or of pid, from
// /proc/<pid>/stat (clock ticks, assumed 100 Hz as on every Linux build Go supports).
func cpuTime(b *testing.B, pid int) time.Duration {
	path := "/proc/self/stat"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		testenv.Missing(b, "needs /proc: "+err.Error())
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// After "(comm) ", field 0 is state; utime and stime are fields 11 and 12.
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// syscalls returns the read and write system calls this process (pid 0) or pid has made,
// from /proc/<pid>/io (0 if unreadable). Unlike times, counts do not depend on the load of
// the machine, so they show what a transport change saves.
func syscalls(pid int) int64 {
	path := "/proc/self/io"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/io", pid)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var n int64
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok && (k == "syscr" || k == "syscw") {
			c, _ := strconv.ParseInt(v, 10, 64)
			n += c
		}
	}
	return n
}

func reportSyscalls(b *testing.B, n int, host, plugin int64) {
	if n > 0 && host > 0 && plugin > 0 {
		b.ReportMetric(float64(host)/float64(n), "host-rw-syscalls/op")
		b.ReportMetric(float64(plugin)/float64(n), "plugin-rw-syscalls/op")
	}
}

// BenchmarkBuiltinPolicyDecision: the same decision with the policy called in-process (the
// built-in transport), the reference the transport benchmarks are compared with.
func BenchmarkBuiltinPolicyDecision(b *testing.B) {
	var pol policy.PoolPolicy = labelpolicy.Policy{}
	req := podRequest("bench", nil, 20)
	ctx := context.Background()
	b.ReportAllocs()
	m := benchutil.Start(b)
	for b.Loop() {
		if _, err := pol.SelectPodPools(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	m.Stop("decisions/s")
}
