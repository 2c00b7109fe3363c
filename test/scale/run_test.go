package scale

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	_ "net/http/pprof" // servePprof
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/allot-ipam/allot/core/agent"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/k8senv"
)

// result is one run's figures.
type result struct {
	p             params
	converge      time.Duration // until the last node held its blocks
	p50, p99      time.Duration // per node
	agentStart    map[string]int64
	agentFailed   map[string]int64 // failed requests of the agents, start to end
	shared        []string         // blocks held by two nodes at the end (audit)
	events        map[string]int64 // the operator's Events by reason at the end
	opFailed      map[string]int64 // and of the operator
	agentSteady   map[string]int64 // requests in the steady window
	opSteady      map[string]int64
	opAll         map[string]int64 // start to end
	watches       int64            // the API server's open WATCH requests in steady state
	apiRSS        uint64           // the API server's resident memory
	opHeap        uint64           // live heap of the operator (its caches and state) at the end
	gRetained     uint64           // live heap the runtime keeps of the agents' exited goroutines
	agentHeap     uint64           // live heap per agent
	agentRoutines float64
	cpu           string  // CPU seconds by process once every node held its blocks
	cpuSelf       float64 // of this process (the operator and the agents) until then
	gc            gcFigures
	rssPeak       uint64 // this process's peak resident memory (VmHWM)
}

// run starts the API server, the operator and p.nodes agents, waits until every node holds
// its blocks, counts the requests of a steady window, then stops the agents to weigh them.
func run(tb testing.TB, p params) *result {
	conns := openFiles(tb, p.nodes)
	servePprof(tb)
	perG := goroutineRetained()
	env := startEnv(tb)
	r := &result{p: p}
	heap0, g0 := liveHeap()
	opCnt, agCnt := &k8senv.Counter{}, &k8senv.Counter{}
	lat := newOpLatency(env.Config)
	stopOp := startOperator(tb, lat.wrap(opCnt.Wrap(operatorConfig(tb, env.Config))), envInt(tb, "ALLOT_SCALE_OPERATOR_WORKERS", 0))
	defer stopOp()

	agentCfg, err := env.ServiceAccountConfig(agentServiceAccount)
	if err != nil {
		tb.Fatal(err)
	}
	base, tlsCfg := agentTransport(tb, agentCfg)
	f := &fleet{cfg: agCnt.Wrap(base), transports: transports(conns, tlsCfg), dir: storeDir(tb)}
	defer f.stopAll()
	stopProgress := make(chan struct{})
	go progress(f, opCnt, agCnt, lat, env.Dir, stopProgress)
	f.startAll(p.nodes)
	r.converge = waitBlocks(tb, f, p)
	close(stopProgress)
	r.cpu, r.cpuSelf, r.gc = cpuSeconds(env.Dir), procCPU("self"), readGC()
	r.p50, r.p99 = percentiles(f.times())
	r.agentStart = agCnt.Snapshot()

	settle(tb, opCnt, agCnt, p.nodes, f.start.Add(r.converge))
	opBefore, agBefore := opCnt.Snapshot(), agCnt.Snapshot()
	time.Sleep(p.window) // sleep: the steady-state window is real time by definition
	r.opSteady = k8senv.CountDelta(opBefore, opCnt.Snapshot())
	r.agentSteady = k8senv.CountDelta(agBefore, agCnt.Snapshot())
	r.opAll = opCnt.Snapshot()
	r.agentFailed, r.opFailed = agCnt.Failed(), opCnt.Failed()
	admin, err := env.Client()
	if err != nil {
		tb.Fatal(err)
	}
	if r.shared, r.events = audit(tb, admin); len(r.shared) > 0 {
		tb.Errorf("%d blocks are held by two nodes; first: %s", len(r.shared), r.shared[0])
	}
	r.watches, r.apiRSS = apiServerFigures(tb, env.Config)

	heap1, g1 := liveHeap()
	writeHeapProfile(tb, ".fleet")
	f.stopAll()
	r.rssPeak = peakRSS()
	heap2, g2 := liveHeap()
	writeHeapProfile(tb, "")
	r.agentHeap = (heap1 - min(heap1, heap2)) / uint64(p.nodes)
	r.agentRoutines = float64(g1-g2) / float64(p.nodes)
	// The runtime keeps the descriptor of every goroutine it ever ran at once (for reuse,
	// never freed): the agents' are no part of the operator's heap.
	r.gRetained = uint64(perG * float64(max(0, g1-g0-retainCalibration)))
	r.opHeap = heap2 - min(heap2, heap0+r.gRetained)
	return r
}

// storeDir is the directory of the nodes' stores: in memory (/dev/shm) where there is one,
// else the test's temporary directory. Each node has a disk of its own, and its store
// creates its files once; thousands of stores creating theirs on one disk at once queued on
// its journal, and in a benchmark of 2,000 stores opened together a store's open took about
// 1 ms of CPU on the machine's ext4 disk against 0.35 ms in memory (5 s of CPU at 5,000 nodes
// that no node spends). The stores are written without fsync (store.Options.NoSync) either way.
func storeDir(tb testing.TB) string {
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		return tb.TempDir()
	}
	removeOrphanStores()
	dir, err := os.MkdirTemp("/dev/shm", fmt.Sprintf("allot-scale-%d-", os.Getpid()))
	if err != nil {
		return tb.TempDir()
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// removeOrphanStores removes the store directories of runs whose process is gone (killed
// before its cleanup): memory, until the machine restarts.
func removeOrphanStores() {
	ents, _ := os.ReadDir("/dev/shm")
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "allot-scale-")
		pid, _, ok2 := strings.Cut(rest, "-")
		if !ok || !ok2 || !e.IsDir() {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); errors.Is(err, fs.ErrNotExist) {
			_ = os.RemoveAll(filepath.Join("/dev/shm", e.Name()))
		}
	}
}

// agentTransport is cfg without its TLS settings, and their tls.Config, for the agents'
// own transports (transports).
func agentTransport(tb testing.TB, cfg *rest.Config) (*rest.Config, *tls.Config) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	out := rest.CopyConfig(cfg)
	out.TLSClientConfig = rest.TLSClientConfig{}
	return out, tlsCfg
}

// transports are n transports of one HTTP/2 connection each: a node's agent has its own, as
// on a node (client-go keys its transport cache by the config's settings, which are the same
// for every simulated node, so without them they would all share one), unless the open-file
// limit makes nodes share (openFiles). Sharing a few was cheaper for the test but not for
// the API server: its HTTP/2 write scheduler scans every stream of a connection for each
// frame it writes, and at 1,000 nodes on 64 connections (~80 watch streams each) that was
// 8.5% of its CPU. Each gets its own copy of tlsCfg: net/http adds "h2" to the
// NextProtos of a transport's tls.Config on its first request, and transports sharing one
// would write it at once (a data race -race reports).
func transports(n int, tlsCfg *tls.Config) []http.RoundTripper {
	out := make([]http.RoundTripper, n)
	for i := range out {
		out[i] = &http.Transport{
			TLSClientConfig: tlsCfg.Clone(), ForceAttemptHTTP2: true, MaxConnsPerHost: 1,
			TLSHandshakeTimeout: 10 * time.Second, IdleConnTimeout: 90 * time.Second,
		}
	}
	return out
}

// operatorConfig is the operator's client config as allotd's operator mode builds it from a
// kubeconfig: no client rate set (the operator applies its defaults), unless
// ALLOT_SCALE_OPERATOR_QPS sets one (burst twice that).
func operatorConfig(tb testing.TB, cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.QPS, out.Burst = 0, 0
	if qps := envInt(tb, "ALLOT_SCALE_OPERATOR_QPS", 0); qps > 0 {
		out.QPS, out.Burst = float32(qps), 2*qps
	}
	return out
}

// startOperator runs the operator (multi-pool, the defaults of allotd's operator mode but its
// Lease's timing) until the returned stop, waiting until it leads.
//
// The Lease lasts 60 s (renew deadline 40 s) instead of 15 s (10 s): here the operator shares
// its process, and the machine's cores, with thousands of simulated nodes, which a deployed
// operator does not, and on a loaded machine its renewals waited behind the agents' start
// past 10 s: the term ended and the next one rebuilt from a full list, a cost of the
// co-location, not of the allocation path this measures. Renewals still come every
// RetryPeriod (2 s), as in a cluster.
func startOperator(tb testing.TB, cfg *rest.Config, workers int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	leader := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- operator.Run(ctx, operator.Options{
			RESTConfig: cfg, Identity: "scale", Registry: prometheus.NewRegistry(),
			LeaseDuration: time.Minute, RenewDeadline: 40 * time.Second, Workers: workers,
			Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			OnLeader: func() { leader <- struct{}{} },
		})
	}()
	select {
	case <-leader:
	case err := <-done:
		cancel()
		tb.Fatalf("operator: %v", err)
	case <-time.After(2 * time.Minute):
		cancel()
		tb.Fatal("operator did not lead within 2m")
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	}
}

// settle waits until neither the operator nor the agents made a request for 5 s, watches and
// the operator's Lease renewals (every RetryPeriod, whatever the cluster's size) aside: the
// writes of the start are over (pool status batches, the agents' status writes). Watches
// are left out because an API server short of CPU closes some, and their informers open them
// again (counted in the steady window, not polling). An agent writes its first status up to
// agent.StatusQuiet after its blocks, at random, so a pause of 5 s is not the end of them:
// it also waits until every node's agent wrote one (nodes), or that long after the last
// node held its blocks (allBlocks; in case a write that failed had landed).
func settle(tb testing.TB, op, ag *k8senv.Counter, nodes int, allBlocks time.Time) {
	snap := func() map[string]int64 {
		m := map[string]int64{}
		for k, v := range ag.Snapshot() {
			if !strings.HasPrefix(k, "WATCH ") {
				m[k] = v
			}
		}
		for k, v := range op.Snapshot() {
			if !strings.HasSuffix(k, " leases") && !strings.HasPrefix(k, "WATCH ") {
				m["operator "+k] = v
			}
		}
		return m
	}
	last, since := snap(), time.Now()
	var moved map[string]int64
	testenv.Eventually(tb, 5*time.Minute, "no API request for 5s", func() (bool, string) {
		if cur := snap(); sumOf(cur) != sumOf(last) {
			moved = k8senv.CountDelta(last, cur)
			last, since = cur, time.Now()
		}
		written := statusesWritten(ag)
		statuses := written >= int64(nodes) || time.Since(allBlocks) > agent.StatusQuiet+5*time.Second
		return statuses && time.Since(since) >= 5*time.Second,
			fmt.Sprintf("%d requests so far, %d of %d agents' statuses; last moved: %v", sumOf(last), written, nodes, moved)
	})
}

// statusesWritten is the agents' status writes (updates and patches) that succeeded.
func statusesWritten(ag *k8senv.Counter) int64 {
	var n int64
	for k, v := range ag.Snapshot() {
		if strings.HasSuffix(k, " allotnodes/status") {
			n += v
		}
	}
	for k, v := range ag.Failed() {
		if strings.Contains(k, " allotnodes/status ") {
			n -= v
		}
	}
	return n
}

// retainCalibration is how many goroutines goroutineRetained runs.
const retainCalibration = 10000

// goroutineRetained is the live heap the runtime keeps per goroutine that ran and exited: its
// descriptor (runtime.g), kept for reuse and never freed, so that the heap after thousands
// of agents stopped still holds one per goroutine the process ran at once. Measured by
// running retainCalibration goroutines together, before anything else runs many.
func goroutineRetained() float64 {
	h0, _ := liveHeap()
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range retainCalibration {
		wg.Go(func() { <-release })
	}
	close(release)
	wg.Wait()
	h1, _ := liveHeap()
	return float64(h1-min(h1, h0)) / retainCalibration
}

// liveHeap is the live heap after a full collection, and the number of goroutines.
func liveHeap() (uint64, int) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), runtime.NumGoroutine()
}

// gcFigures are the Go runtime's collections of this process so far.
type gcFigures struct {
	cycles uint64
	// CPU seconds of the collector (workers and assists) by the runtime's estimate, which
	// counts marking on idle cores by the wall clock: on a loaded machine it overstates, and
	// the CPU profile (gcBgMarkWorker, gcAssistAlloc) is the figure to compare.
	cpu float64
}

func readGC() gcFigures {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return gcFigures{cycles: s[0].Value.Uint64(), cpu: s[1].Value.Float64()}
}

// peakRSS is this process's peak resident memory (VmHWM), 0 if unknown.
func peakRSS() uint64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(ds)
	if len(ds) == 0 {
		return 0, 0
	}
	return ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)]
}

// apiServerFigures reads the API server's own metrics: its open WATCH requests and its
// resident memory.
func apiServerFigures(tb testing.TB, cfg *rest.Config) (watches int64, rss uint64) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := hc.Get(cfg.Host + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("API server /metrics: HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := metricLine(line)
		switch {
		case !ok:
		case name == "apiserver_longrunning_requests" && strings.Contains(line, `verb="WATCH"`):
			watches += int64(val)
		case name == "process_resident_memory_bytes":
			rss = uint64(val)
		}
	}
	return watches, rss
}

// metricLine splits a Prometheus text line into its metric name and value.
func metricLine(line string) (string, float64, bool) {
	if line == "" || line[0] == '#' {
		return "", 0, false
	}
	name := line
	if i := strings.IndexAny(line, "{ "); i > 0 {
		name = line[:i]
	}
	f := strings.Fields(line)
	v, err := strconv.ParseFloat(f[len(f)-1], 64)
	return name, v, err == nil
}

// agentRate is the agents' steady-state requests per node per minute: with watches
// (re-opened watches count) or without.
func (r *result) agentRate(withWatches bool) float64 {
	var n int64
	for k, v := range r.agentSteady {
		if withWatches || !strings.HasPrefix(k, "WATCH ") {
			n += v
		}
	}
	return float64(n) / float64(r.p.nodes) / r.p.window.Minutes()
}

func (r *result) print(w io.Writer) {
	n := float64(r.p.nodes)
	perMin := func(m map[string]int64) string {
		var parts []string
		for _, k := range sortedKeys(m) {
			parts = append(parts, fmt.Sprintf("%s %.3f", k, float64(m[k])/n/r.p.window.Minutes()))
		}
		if len(parts) == 0 {
			return "none"
		}
		return strings.Join(parts, ", ")
	}
	verdict := "met"
	if r.converge > Goal {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "\nscale: %d nodes (real agents as goroutines), operator in-process, one kube-apiserver\n", r.p.nodes)
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(gogc)
	limit := "none"
	if l := gogc[1].Value.Uint64(); l < math.MaxInt64 {
		limit = fmt.Sprintf("%d MiB", l>>20)
	}
	fmt.Fprintf(w, "  %-46s GOGC=%d, memory limit %s (BenchmarkScale: as an agent's own process)\n", "collector of the test process",
		gogc[0].Value.Uint64(), limit)
	fmt.Fprintf(w, "  %-46s %v (p50 %v, p99 %v); goal <= %v: %s\n", "every node holds its blocks in", r.converge.Round(10*time.Millisecond),
		r.p50.Round(10*time.Millisecond), r.p99.Round(10*time.Millisecond), Goal, verdict)
	fmt.Fprintf(w, "  %-46s %.2f per node: %s\n", "agent requests during the start", float64(sumOf(r.agentStart))/n, perNode(r.agentStart, n))
	fmt.Fprintf(w, "  %-46s %.2f per node: %s\n", "operator requests, start to end", float64(sumOf(r.opAll))/n, perNode(r.opAll, n))
	fmt.Fprintf(w, "  %-46s %.3f: %s\n", fmt.Sprintf("agent req/node/min, steady (%v)", r.p.window), r.agentRate(true), perMin(r.agentSteady))
	fmt.Fprintf(w, "  %-46s %.3f: %s\n", fmt.Sprintf("operator req/node/min, steady (%v)", r.p.window),
		float64(sumOf(r.opSteady))/n/r.p.window.Minutes(), perMin(r.opSteady))
	fmt.Fprintf(w, "  %-46s %d (%.1f per node)\n", "open watches at the API server", r.watches, float64(r.watches)/n)
	fmt.Fprintf(w, "  %-46s %.1f MiB (besides %.1f MiB the runtime keeps of the agents' exited goroutines)\n",
		"operator live heap", float64(r.opHeap)/(1<<20), float64(r.gRetained)/(1<<20))
	fmt.Fprintf(w, "  %-46s %.1f KiB, %.1f goroutines\n", "agent live heap, per node", float64(r.agentHeap)/(1<<10), r.agentRoutines)
	fmt.Fprintf(w, "  %-46s %.0f MiB\n", "kube-apiserver resident memory", float64(r.apiRSS)/(1<<20))
	fmt.Fprintf(w, "  %-46s %s\n", "CPU seconds until every node held its blocks", r.cpu)
	fmt.Fprintf(w, "  %-46s %.1f ms (GC: %d cycles, ~%.1f s estimated; peak resident %.0f MiB)\n", "test process CPU per node until then",
		r.cpuSelf/n*1000, r.gc.cycles, r.gc.cpu, float64(r.rssPeak)/(1<<20))
	fmt.Fprintf(w, "  %-46s agents %s; operator %s\n", "failed requests per node, start to end", perNode(r.agentFailed, n), perNode(r.opFailed, n))
	fmt.Fprintf(w, "  %-46s %d; operator Events by reason: %s\n", "blocks held by two nodes at the end", len(r.shared), fmt.Sprint(r.events))
}

func perNode(m map[string]int64, n float64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(m[k])/n))
	}
	return strings.Join(parts, ", ")
}

func sumOf(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func sortedKeys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// progress prints, every 10 s until stop is closed, how many nodes hold their blocks and the
// requests that lead there: the agents' creates against the operator's writes show which
// side lags, and the time of the operator's writes in the interval why it does (opLatency).
func progress(f *fleet, op, ag *k8senv.Counter, lat *opLatency, dir string, stop <-chan struct{}) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		a, o := ag.Snapshot(), op.Snapshot()
		fmt.Fprintf(os.Stderr, "scale: %v: %d nodes hold blocks; agents created %d AllotNodes, opened %d watches; operator wrote %d specs, %d statuses (%s); CPU s: %s\n",
			time.Since(f.start).Round(time.Second), f.ready.Load(), a["POST allotnodes"], watchesOf(a),
			o["PUT allotnodes"], o["PUT allotnodes/status"], lat.interval(), cpuSeconds(dir))
	}
}

func watchesOf(m map[string]int64) int64 {
	var n int64
	for k, v := range m {
		if strings.HasPrefix(k, "WATCH ") {
			n += v
		}
	}
	return n
}

// cpuSeconds is the CPU time (user and system) of this process, kube-apiserver and etcd (the
// processes whose command line names dir, the environment's directory).
func cpuSeconds(dir string) string {
	fds, _ := os.ReadDir("/proc/self/fd")
	out := fmt.Sprintf("test %.1f (%d open files)", procCPU("self"), len(fds))
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cmd), dir) {
			continue
		}
		name := strings.SplitN(string(cmd), "\x00", 2)[0]
		out += fmt.Sprintf(", %s %.1f", name[strings.LastIndex(name, "/")+1:], procCPU(e.Name()))
	}
	return out
}

// procCPU is the user plus system CPU seconds of /proc/pid (USER_HZ 100).
func procCPU(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100
}

// openFiles raises the open-file limit towards what n nodes want and returns how many
// connections the agents may have: each node's store holds three files open (its database
// and two write-ahead logs) and its agent one connection, and thousands of nodes pass the
// usual limits (raising the hard limit needs CAP_SYS_RESOURCE). Under a hard limit too low
// for a connection per node, nodes share connections, as few to each as the limit allows.
func openFiles(tb testing.TB, n int) (conns int) {
	const reserve = 1024 // the operator, the environment, the Go runtime
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatalf("open-file limit: %v", err)
	}
	want := uint64(4*n + reserve)
	if lim.Cur < want {
		up := syscall.Rlimit{Cur: want, Max: max(lim.Max, want)}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up); err != nil {
			up = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up); err != nil {
				tb.Fatalf("open-file limit: %v", err)
			}
		}
		lim = up
	}
	conns = min(n, int(lim.Cur)-3*n-reserve)
	if conns < 1 {
		tb.Fatalf("%d nodes need at least %d open files (limit %d, hard %d); raise ulimit -n", n, 3*n+reserve+1, lim.Cur, lim.Max)
	}
	return conns
}

// writeHeapProfile writes the heap profile to $ALLOT_SCALE_HEAPPROFILE plus suffix: once
// the agents stopped, while the operator still runs, its in-use space is the operator's heap
// (the benchmark's -memprofile is written after the operator stopped too); with suffix
// ".fleet", before the agents stop, it holds theirs as well.
func writeHeapProfile(tb testing.TB, suffix string) {
	path := os.Getenv("ALLOT_SCALE_HEAPPROFILE")
	if path == "" {
		return
	}
	path += suffix
	f, err := os.Create(path)
	if err != nil {
		tb.Fatalf("ALLOT_SCALE_HEAPPROFILE: %v", err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		tb.Fatalf("ALLOT_SCALE_HEAPPROFILE: %v", err)
	}
}

// servePprof serves net/http/pprof on $ALLOT_SCALE_PPROF (e.g. 127.0.0.1:6060), to profile
// the operator and the agents during the start: go tool pprof http://ADDR/debug/pprof/profile.
func servePprof(tb testing.TB) {
	addr := os.Getenv("ALLOT_SCALE_PPROF")
	if addr == "" {
		return
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("ALLOT_SCALE_PPROF: %v", err)
	}
	srv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	tb.Cleanup(func() { _ = srv.Close() })
}
