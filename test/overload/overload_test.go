// Package overload measures allotd under more concurrent callers than it serves at once
// (make overload): 256 clients, each sending its requests as allot-cni does (a new
// connection per request, core/cniplugin's client), ADD then DEL, a million requests in all
// by default, against the daemon of core/daemon in this process on a real unix socket and a
// durable store. It prints a table: requests, answers by kind, latency, and goroutines and
// heap before and after (after a forced GC, once the daemon's idle goroutines have gone).
//
// Passes when no answer took longer than the CNI timeout, every refusal was the "allotd
// busy" error and came well within it, and goroutines and heap are back to their baseline.
//
//	ALLOT_OVERLOAD_REQUESTS  requests of the default-limits run (default 1000000; the
//	                         tight-limits run makes a tenth of them)
//	ALLOT_OVERLOAD_CLIENTS   concurrent clients (default 256)
package overload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/cniplugin"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/daemon"
	"github.com/allot-ipam/allot/internal/benchutil"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/plugins/builtin"
)

// cniTimeout is what a runtime gives allot-cni by default (ipam.timeout).
const cniTimeout = cniplugin.DefaultTimeout

// run is one configuration's result.
type run struct {
	name            string
	limits          config.API
	clients         int
	requests        int64
	ok              int64
	busy            int64
	timeouts        int64
	other           int64
	otherMsg        string
	wall            time.Duration
	all, refused    *histogram
	gBefore, gAfter int
	hBefore, hAfter uint64
	settled         time.Duration
	allocsAfter     int
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkOverload runs the default limits with ALLOT_OVERLOAD_REQUESTS requests, then
// tight limits (8 in flight, 8 waiting, 10 ms) where most requests must be refused, fast.
func BenchmarkOverload(b *testing.B) {
	requests := envInt("ALLOT_OVERLOAD_REQUESTS", 1_000_000)
	clients := envInt("ALLOT_OVERLOAD_CLIENTS", 256)
	var runs []*run
	for _, rc := range []struct {
		name     string
		limits   config.API
		requests int
	}{
		{"defaults", config.DefaultAPI(), requests},
		{"tight", config.API{MaxInFlight: 8, MaxQueued: 8, QueueWait: 10 * time.Millisecond}, max(requests/10, 1000)},
	} {
		b.Run(rc.name, func(b *testing.B) {
			r := overload(b, rc.name, rc.limits, clients, rc.requests)
			runs = append(runs, r)
			check(b, r)
		})
	}
	printTable(os.Stdout, runs)
}

func overload(b *testing.B, name string, limits config.API, clients, requests int) *run {
	dir := b.TempDir()
	cfg := config.Defaults()
	cfg.Socket = filepath.Join(dir, "allotd.sock")
	cfg.Store.Path = filepath.Join(dir, "allot.db")
	cfg.HTTP.Address = ""
	cfg.API = limits
	cfg.Pools = []config.Pool{
		{Name: "v4", CIDRs: []string{"10.0.0.0/16"}, Default: true},
		{Name: "v6", CIDRs: []string{"fd00::/64"}, Default: true},
	}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := daemon.New(ctx, &cfg, builtin.Registry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			b.Errorf("daemon: %v", err)
		}
	}()

	r := &run{name: name, limits: limits, clients: clients, all: newHistogram(), refused: newHistogram()}
	// Everything the load keeps exists before the baseline, so that it counts in both.
	hists := make([]*histogram, clients)
	refusedH := make([]*histogram, clients)
	for i := range hists {
		hists[i], refusedH[i] = newHistogram(), newHistogram()
	}
	dmn := cniplugin.NewDaemon(cfg.Socket)
	var seq atomic.Int64
	var counts [4]atomic.Int64 // ok, busy, timeout, other
	var otherOnce sync.Once

	// one sends one request as allot-cni does and classifies the answer.
	one := func(i int, call func(context.Context) error) error {
		cctx, ccancel := context.WithTimeout(context.Background(), cniTimeout)
		begin := time.Now()
		err := call(cctx)
		took := time.Since(begin)
		ccancel()
		hists[i].add(took)
		switch {
		case err == nil:
			counts[0].Add(1)
		case api.IsBusy(err):
			counts[1].Add(1)
			refusedH[i].add(took)
		case errors.Is(err, context.DeadlineExceeded):
			counts[2].Add(1)
		default:
			counts[3].Add(1)
			otherOnce.Do(func() { r.otherMsg = err.Error() })
		}
		return err
	}
	// load runs n requests from c clients: ADD a new owner, then DEL it (DEL retried until
	// it goes through, so nothing stays allocated).
	load := func(c int, n int64) {
		var wg sync.WaitGroup
		for i := range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					s := seq.Add(2)
					if s > n {
						return
					}
					owner := api.Owner{ContainerID: fmt.Sprintf("%s-%d-%d", name, i, s), IfName: "eth0"}
					err := one(i, func(ctx context.Context) error {
						_, err := dmn.Allocate(ctx, &api.AllocateRequest{Owner: owner, Network: "overload",
							Pod: api.PodRef{Namespace: "overload", Name: owner.ContainerID}})
						return err
					})
					if err != nil {
						continue
					}
					for try := 0; ; try++ {
						err := one(i, func(ctx context.Context) error {
							return dmn.Release(ctx, &api.ReleaseRequest{Owner: owner, Network: "overload"})
						})
						if err == nil || try == 1000 {
							break
						}
						// A runtime retries a refused DEL after a pause.
						seq.Add(1)
						time.Sleep(10 * time.Millisecond) // sleep: the runtime's pause
					}
				}
			}()
		}
		wg.Wait()
	}

	// Warm-up (code paths, pools, the store's pages), then the baseline once the daemon's
	// idle request goroutines have gone again.
	gStart := runtime.NumGoroutine()
	load(16, 2000)
	waitGoroutines(gStart, 30*time.Second)
	r.gBefore, r.hBefore = measure()
	for i := range hists {
		hists[i].reset()
		refusedH[i].reset()
	}
	for i := range counts {
		counts[i].Store(0)
	}
	seq.Store(0)

	b.ResetTimer()
	begin := time.Now()
	load(clients, int64(requests))
	r.wall = time.Since(begin)
	b.StopTimer()

	r.ok, r.busy, r.timeouts, r.other = counts[0].Load(), counts[1].Load(), counts[2].Load(), counts[3].Load()
	r.requests = r.ok + r.busy + r.timeouts + r.other
	for i := range hists {
		r.all.merge(hists[i])
		r.refused.merge(refusedH[i])
	}
	settleBegin := time.Now()
	waitGoroutines(r.gBefore, time.Minute)
	r.settled = time.Since(settleBegin)
	r.gAfter, r.hAfter = measure()
	// The per-client histograms were in the baseline: keep them in this measure too.
	runtime.KeepAlive(hists)
	runtime.KeepAlive(refusedH)
	if allocs, err := d.Manager().Allocations(ctx); err == nil {
		r.allocsAfter = len(allocs)
	} else {
		b.Errorf("allocations: %v", err)
	}
	b.ReportMetric(float64(r.requests)/r.wall.Seconds(), "req/s")
	return r
}

// waitGoroutines waits until at most want goroutines run (the server keeps idle request
// goroutines for 10 s), or timeout.
func waitGoroutines(want int, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = testenv.Poll(ctx, func() (bool, string) { return runtime.NumGoroutine() <= want, "" })
}

// measure returns the goroutines and the live heap after two forced collections (the second
// empties what sync.Pools kept through the first).
func measure() (int, uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapAlloc
}

// check fails the benchmark when the daemon broke its promises under overload.
func check(b *testing.B, r *run) {
	if r.timeouts > 0 {
		b.Errorf("%s: %d requests took longer than the CNI timeout (%s)", r.name, r.timeouts, cniTimeout)
	}
	if r.other > 0 {
		b.Errorf("%s: %d requests failed with something other than busy: first: %s", r.name, r.other, r.otherMsg)
	}
	// A refusal comes after at most queueWait, plus scheduling on a loaded machine.
	if bound := r.limits.QueueWait + 5*time.Second; r.busy > 0 && r.refused.max > bound {
		b.Errorf("%s: a busy answer took %s (bound %s)", r.name, r.refused.max, bound)
	}
	if r.all.max >= cniTimeout {
		b.Errorf("%s: an answer took %s, past the CNI timeout", r.name, r.all.max)
	}
	if r.gAfter > r.gBefore {
		b.Errorf("%s: %d goroutines after the load, %d before", r.name, r.gAfter, r.gBefore)
	}
	// Allow a little for the store's page cache and allocator bookkeeping; a leak of even
	// 16 bytes per request would be 16 MB here.
	if limit := r.hBefore + r.hBefore/4 + 4<<20; r.hAfter > limit {
		b.Errorf("%s: heap %s after the load, %s before", r.name, mib(r.hAfter), mib(r.hBefore))
	}
	if r.allocsAfter != 0 {
		b.Errorf("%s: %d allocations left after every owner was released", r.name, r.allocsAfter)
	}
}

func printTable(w io.Writer, runs []*run) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nOVERLOAD: %d clients, a new connection per request (as allot-cni), ADD then DEL, durable store, GOMAXPROCS %d\n",
		runs[0].clients, runtime.GOMAXPROCS(0))
	rows := []benchutil.Row[*run]{
		{Name: "api limits (in flight / queued / wait)", Value: func(r *run) string {
			return fmt.Sprintf("%d / %d / %s", r.limits.MaxInFlight, r.limits.MaxQueued, r.limits.QueueWait)
		}},
		{Name: "requests", Value: func(r *run) string { return thousands(r.requests) }},
		{Name: "answered", Value: func(r *run) string { return thousands(r.ok) }},
		{Name: "refused busy", Value: func(r *run) string { return thousands(r.busy) }},
		{Name: "timed out (CNI timeout " + cniTimeout.String() + ")", Value: func(r *run) string { return thousands(r.timeouts) }},
		{Name: "other errors", Value: func(r *run) string { return thousands(r.other) }},
		{Name: "requests/s", Value: func(r *run) string { return thousands(int64(float64(r.requests) / r.wall.Seconds())) }},
		{Name: "latency p50", Value: func(r *run) string { return dur(r.all.quantile(0.50)) }},
		{Name: "latency p99", Value: func(r *run) string { return dur(r.all.quantile(0.99)) }},
		{Name: "latency max", Value: func(r *run) string { return dur(r.all.max) }},
		{Name: "busy answer p99 / max", Value: func(r *run) string {
			if r.busy == 0 {
				return "-"
			}
			return dur(r.refused.quantile(0.99)) + " / " + dur(r.refused.max)
		}},
		{Name: "goroutines before / after", Value: func(r *run) string { return fmt.Sprintf("%d / %d", r.gBefore, r.gAfter) }},
		{Name: "heap before / after (after GC)", Value: func(r *run) string { return mib(r.hBefore) + " / " + mib(r.hAfter) }},
		{Name: "back to baseline after", Value: func(r *run) string { return dur(r.settled) }},
		{Name: "allocations left", Value: func(r *run) string { return fmt.Sprint(r.allocsAfter) }},
	}
	benchutil.Columns(w, "OVERLOAD", runs, func(r *run) string { return r.name }, rows)
	fmt.Fprintln(w)
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// histogram keeps latencies in buckets 1% wide (log scale from 1 µs to over a minute):
// constant memory however many requests, so it does not blur the heap figures.
type histogram struct {
	counts []int64
	n      int64
	max    time.Duration
}

const (
	histBase    = 1.01
	histBuckets = 1900 // 1.01^1900 µs is about 2.5 minutes
)

func newHistogram() *histogram { return &histogram{counts: make([]int64, histBuckets)} }

func (h *histogram) add(d time.Duration) {
	us := float64(d) / float64(time.Microsecond)
	i := 0
	if us > 1 {
		i = min(int(math.Log(us)/math.Log(histBase)), histBuckets-1)
	}
	h.counts[i]++
	h.n++
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

func (h *histogram) reset() {
	clear(h.counts)
	h.n, h.max = 0, 0
}

// quantile returns the upper edge of the bucket holding the q-th request.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	want := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= want {
			return min(time.Duration(math.Pow(histBase, float64(i+1))*float64(time.Microsecond)), h.max)
		}
	}
	return h.max
}
