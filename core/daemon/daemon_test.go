package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/client"
	"github.com/allot-ipam/allot/core/api/server"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/internal/benchutil"
	"github.com/allot-ipam/allot/internal/metricslint"
	"github.com/allot-ipam/allot/plugins/builtin"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testConfig(t testing.TB, cidr string, noSync bool) *config.Config {
	dir := t.TempDir()
	c := config.Defaults()
	c.Socket = filepath.Join(dir, "allotd.sock")
	c.Store.Path = filepath.Join(dir, "allot.db")
	c.Store.NoSync = noSync
	c.HTTP.Address = "127.0.0.1:0"
	c.Pools = []config.Pool{{Name: "v4", CIDRs: []string{cidr}, Default: true, Routes: []config.Route{{Dst: "0.0.0.0/0"}}}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &c
}

// start runs a daemon until the test ends and returns a client and the stop function.
func start(t testing.TB, cfg *config.Config) (*Daemon, *client.Client, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := New(ctx, cfg, builtin.Registry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	c := client.New(cfg.Socket)
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		c.Close()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return d, c, stop
}

func TestServeAndGracefulShutdown(t *testing.T) {
	cfg := testConfig(t, "10.5.0.0/24", false)
	d, c, stop := start(t, cfg)
	ctx := context.Background()
	a, err := c.Allocate(ctx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "c1", IfName: "eth0"}, Network: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if a.IPs[0].Address != "10.5.0.1/24" {
		t.Fatalf("got %v", a.IPs)
	}
	fi, err := os.Stat(cfg.Socket)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "allot_ipam_addresses_allocated_total", "/metrics?api": "allot_api_requests_rejected_total"} {
		resp, err := http.Get("http://" + d.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.Socket); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	// The allocation survives the restart.
	_, c2, _ := start(t, cfg)
	got, err := c2.Check(ctx, &api.CheckRequest{Owner: api.Owner{ContainerID: "c1", IfName: "eth0"}})
	if err != nil || got.IPs[0].Address != "10.5.0.1/24" {
		t.Fatalf("after restart: %v %v", got, err)
	}
}

// TestAPILimitsDefaults: allotd's default api section is the server's DefaultLimits, so the
// daemon and other users of core/api/server mean the same by "the default".
func TestAPILimitsDefaults(t *testing.T) {
	a := config.Defaults().API
	if got := (server.Limits{MaxInFlight: a.MaxInFlight, MaxQueued: a.MaxQueued, QueueWait: a.QueueWait}); got != server.DefaultLimits {
		t.Fatalf("config api defaults %+v, server.DefaultLimits %+v", got, server.DefaultLimits)
	}
}

func TestSecondDaemonOnSameSocketIsRefused(t *testing.T) {
	cfg := testConfig(t, "10.5.0.0/24", true)
	start(t, cfg)
	cfg2 := *cfg
	cfg2.Store.Path = filepath.Join(t.TempDir(), "other.db")
	_, err := New(context.Background(), &cfg2, builtin.Registry(), quiet)
	if err == nil || !strings.Contains(err.Error(), "served by another process") {
		t.Fatalf("got %v", err)
	}
}

func TestUnknownPolicyIsAConfigError(t *testing.T) {
	cfg := testConfig(t, "10.5.0.0/24", true)
	cfg.Policy.Networks = map[string]config.Chain{"blue": {Policies: []string{"static", "nope"}}}
	_, err := New(context.Background(), cfg, builtin.Registry(), quiet)
	if err == nil || !strings.Contains(err.Error(), `policy.networks.blue.chain[1]: unknown policy "nope"`) {
		t.Fatalf("got %v", err)
	}
}

func TestClientReportsDaemonAbsent(t *testing.T) {
	c := client.New(filepath.Join(t.TempDir(), "none.sock"))
	_, err := c.Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), "allotd is not reachable") {
		t.Fatalf("got %v", err)
	}
}

// BenchmarkAPIAllocate measures durable allocations through the real socket API with 32
// concurrent clients (allotd aims at >= 40,000 allocations/s, and at >= 0.8x the same
// daemon without fsync). Each allocation is fdatasynced in the store's write-ahead log
// before its answer; the store group-commits concurrent ones. Each mode runs over
// HTTP/JSON, then over the framed protocol (one connection carrying every client's
// requests, and one connection per client), which reports its rate relative to HTTP's
// ("x-http"). A durable run first runs the same number of allocations against a daemon
// without fsync, off the clock, and reports its rate relative to that one ("x-nosync"):
// the two alternate, so a load that comes and goes on the machine hits both alike. Run
// it with -count and take the mean; one pair swings. durable-nowait is durable with the
// store's wait for the callers it just answered turned off (MaxGroupDelay < 0): each
// commit starts as soon as the previous fdatasync returned, with whatever is queued.
// The metrics after the rate: ops/commit, µs/commit (write + fdatasync), ckpt-µs/op
// (checkpoint time per allocation) and cpu-µs/op (the process's CPU, clients included).
func BenchmarkAPIAllocate(b *testing.B) {
	for _, mode := range []struct {
		name       string
		noSync     bool
		groupDelay time.Duration
	}{{"durable", false, 0}, {"durable-nowait", false, -1}, {"nosync", true, 0}} {
		var httpRate float64
		for _, proto := range []struct {
			name string
			opts client.Options
		}{
			{"http", client.Options{HTTP: true}},
			{"framed", client.Options{}},
			{"framed-32conns", client.Options{Conns: 32}},
		} {
			b.Run(mode.name+"/"+proto.name, func(b *testing.B) {
				storeGroupDelay = mode.groupDelay
				defer func() { storeGroupDelay = 0 }()
				var twin float64
				if !mode.noSync {
					b.StopTimer()
					nb := newAllocBench(b, true, proto.opts)
					twin = nb.run(b)
					nb.close()
					b.StartTimer()
				}
				ab := newAllocBench(b, mode.noSync, proto.opts)
				defer ab.close()
				meter := benchutil.Start(b)
				rate := ab.run(b)
				meter.Stop("allocs/s")
				// The store's side of it: writes per log commit, the commit's wall time
				// (write + fdatasync) and the checkpoints' time per allocation.
				st := ab.d.store.Stats()
				b.ReportMetric(st.AvgBatchSize(), "ops/commit")
				if st.Batches > 0 {
					b.ReportMetric(float64(st.TotalCommit.Microseconds())/float64(st.Batches), "µs/commit")
				}
				b.ReportMetric(float64(st.CheckpointTime.Microseconds())/float64(b.N), "ckpt-µs/op")
				if proto.opts.HTTP {
					httpRate = rate
				} else if httpRate > 0 {
					b.ReportMetric(rate/httpRate, "x-http")
				}
				if twin > 0 {
					b.ReportMetric(rate/twin, "x-nosync")
				}
			})
		}
	}
}

// allocBench is a daemon and a client for BenchmarkAPIAllocate.
type allocBench struct {
	d    *Daemon
	c    *client.Client
	stop func() error
}

func newAllocBench(b *testing.B, noSync bool, opts client.Options) *allocBench {
	cfg := testConfig(b, "10.0.0.0/8", noSync)
	d, _, stop := start(b, cfg)
	return &allocBench{d: d, c: client.NewWithOptions(cfg.Socket, opts), stop: stop}
}

// run makes b.N allocations from 32 clients and returns their rate.
func (ab *allocBench) run(b *testing.B) float64 {
	var n atomic.Int64
	b.SetParallelism(32 / max(1, runtime.GOMAXPROCS(0)))
	begin := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			id := n.Add(1)
			_, err := ab.c.Allocate(ctx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "c" + strconv.FormatInt(id, 10), IfName: "eth0"}, Network: "n"})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	return float64(b.N) / time.Since(begin).Seconds()
}

func (ab *allocBench) close() {
	ab.c.Close()
	_ = ab.stop()
}

// TestMetricsListener: http.metricsAddress serves /metrics and nothing else, and what it
// serves passes Prometheus' linter.
func TestMetricsListener(t *testing.T) {
	cfg := testConfig(t, "10.5.0.0/24", true)
	cfg.HTTP.MetricsAddress = "127.0.0.1:0"
	d, c, stop := start(t, cfg)
	ctx := context.Background()
	owner := api.Owner{ContainerID: "c1", IfName: "eth0"}
	if _, err := c.Allocate(ctx, &api.AllocateRequest{Owner: owner, Network: "n"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, &api.ReleaseRequest{Owner: owner}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + d.metrics.Addr()
	code, body := get(t, base+"/metrics")
	if code != 200 || !strings.Contains(body, "allot_ipam_addresses_allocated_total") || !strings.Contains(body, "allot_store_commits_total") {
		t.Fatalf("/metrics on the metrics listener: %d %.300q", code, body)
	}
	problems, err := metricslint.Text(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s", p)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := get(t, base+path); code != http.StatusNotFound {
			t.Errorf("%s on the metrics listener: %d, want 404 (health stays on loopback)", path, code)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/metrics"); err == nil {
		t.Fatal("the metrics listener still answers after stop")
	}
}
