package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/k8senv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestMain(m *testing.M) {
	klog.SetLogger(logr.Discard()) // thousands of reflectors' chatter
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// Goal is the time within which every node must hold its blocks.
const Goal = 60 * time.Second

// maxSteadyRate bounds the agents' requests other than watches, per node per minute, in
// steady state: an agent that polled anything, even every ten minutes, would exceed it.
const maxSteadyRate = 0.1

// TestScale runs 200 nodes: the scale path (thousands of informers in one process, the
// operator serving them) keeps working, and in steady state the agents only watch.
func TestScale(t *testing.T) {
	r := run(t, params{nodes: envInt(t, "ALLOT_SCALE_NODES", 200), window: 10 * time.Second, timeout: 10 * time.Minute})
	r.print(os.Stdout)
	if rate := r.agentRate(false); rate > maxSteadyRate {
		t.Errorf("agents made %.3f requests other than watches per node per minute in steady state (at most %v): %v",
			rate, maxSteadyRate, r.agentSteady)
	}
}

// BenchmarkScale runs 5,000 nodes (ALLOT_SCALE_NODES) and reports the time until every node
// holds its blocks (goal 60 s), the steady-state requests per node per minute over a window
// of 60 s (ALLOT_SCALE_WINDOW), and the memory of the operator and of one agent. Run with
// `make bench-scale` (-benchtime=1x).
func BenchmarkScale(b *testing.B) {
	p := params{nodes: envInt(b, "ALLOT_SCALE_NODES", 5000), window: time.Minute, timeout: 15 * time.Minute}
	if w := os.Getenv("ALLOT_SCALE_WINDOW"); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil {
			b.Fatalf("ALLOT_SCALE_WINDOW: %v", err)
		}
		p.window = d
	}
	defer agentLikeGC()()
	for range b.N {
		r := run(b, p)
		r.print(os.Stdout)
		b.ReportMetric(r.converge.Seconds(), "s-all-blocks")
		b.ReportMetric(r.agentRate(true), "agent-req/node/min")
		b.ReportMetric(float64(r.opHeap)/(1<<20), "MiB-operator")
		b.ReportMetric(float64(r.agentHeap)/(1<<10), "KiB/agent")
		b.ReportMetric(r.cpuSelf/float64(p.nodes)*1000, "test-CPU-ms/node")
	}
}

// gcPercent and gcMemoryLimit are the benchmark's collector settings (agentLikeGC).
const (
	gcPercent     = 400
	gcMemoryLimit = 7 << 30
)

// agentLikeGC sets the collector of the benchmark's process to collect about as often, per
// byte an agent allocates, as each agent's own process would, and returns the restore. A
// node's agent is a process of its own whose heap goal is Go's minimum, 4 MiB, above a live
// heap (~0.3 MiB) and stacks (~0.5 MiB) of under 1 MiB: it collects about once per 3.2 MiB it
// allocates. In one process of N agents, GOGC=100 collects once the heap grew by the live
// heap and stacks of them all, ~0.8 MiB per agent: four times as often, each collection
// scanning every agent's heap and ~64 goroutine stacks. GOGC=400 matches the agent's rate (at
// 2,000 nodes: 8 collections instead of 19, the collector's CPU from 5.5 s to 2.1 s); the
// memory limit keeps the process under ~7 GiB at 5,000 nodes (peak resident ~2.6 GiB at
// 2,000). A GOGC set in the environment is left as it is.
func agentLikeGC() (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	pct, lim := debug.SetGCPercent(gcPercent), debug.SetMemoryLimit(gcMemoryLimit)
	return func() { debug.SetGCPercent(pct); debug.SetMemoryLimit(lim) }
}

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

type params struct {
	nodes   int
	window  time.Duration // steady-state window
	timeout time.Duration // for every node to hold its blocks (a failure, not the goal)
}

// startEnv starts the API server with room for thousands of clients (its in-flight limits
// raised: they bound APF's total concurrency) and the pool the nodes draw from (dual stack, a
// /24 and a /120 per node, as in Cilium's multi-pool defaults).
func startEnv(tb testing.TB) *k8senv.Env {
	env := k8senv.Start(tb, k8senv.Options{ExtraAPIServerFlags: []string{
		"--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
	}, ServiceAccounts: []string{agentServiceAccount}})
	c, err := env.Client()
	if err != nil {
		tb.Fatal(err)
	}
	bindAgentRole(tb, c)
	pool := &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	pool.Spec.IPv4 = &allotv1.PoolFamily{CIDRs: []string{"10.0.0.0/8"}, MaskSize: 24}
	pool.Spec.IPv6 = &allotv1.PoolFamily{CIDRs: []string{"fd00::/96"}, MaskSize: 120}
	if err := c.Create(context.Background(), pool); err != nil {
		tb.Fatal(err)
	}
	return env
}

// agentServiceAccount is the agents' identity, as the chart's DaemonSet runs them.
const agentServiceAccount = "kube-system/allot-agent"

// bindAgentRole installs the chart's ClusterRole of the agent and its binding to
// agentServiceAccount (from deploy/manifests/allot.yaml, the chart rendered): the agents run
// with the rights they have in a cluster, and as a ServiceAccount, which API Priority and
// Fairness queues (workload-low) where it exempts the harness's system:masters. With 5,000
// exempt agents starting together, the operator's Lease renewals starved and it lost the
// Lease; in a cluster its requests outrank the agents' the same way.
func bindAgentRole(tb testing.TB, c client.Client) {
	crds, err := k8senv.FindCRDDir()
	if err != nil {
		tb.Fatal(err)
	}
	objs, err := k8senv.ReadManifests(filepath.Join(filepath.Dir(crds), "manifests", "allot.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, o := range objs {
		if o.GetName() == "allot-agent" && (o.GetKind() == "ClusterRole" || o.GetKind() == "ClusterRoleBinding") {
			if err := c.Create(context.Background(), o); err != nil {
				tb.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
			}
			n++
		}
	}
	if n != 2 {
		tb.Fatalf("deploy/manifests/allot.yaml: found %d of the agent's ClusterRole and ClusterRoleBinding", n)
	}
}

// waitBlocks waits until every node holds its blocks and returns how long that took.
func waitBlocks(tb testing.TB, f *fleet, p params) time.Duration {
	testenv.Eventually(tb, p.timeout, "every node holding its blocks", func() (bool, string) {
		f.mu.Lock()
		errs := f.errs
		f.mu.Unlock()
		if len(errs) > 0 {
			tb.Fatalf("%d agents did not start; first: %v", len(errs), errs[0])
		}
		n := f.ready.Load()
		return n == int64(p.nodes), fmt.Sprintf("%d of %d nodes hold their blocks", n, p.nodes)
	})
	var last time.Duration
	for _, d := range f.times() {
		last = max(last, d)
	}
	return last
}
