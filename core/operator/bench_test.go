package operator_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/allot-ipam/allot/internal/testenv"
	nodelabels "github.com/allot-ipam/allot/plugins/policy/nodelabels"
	"github.com/allot-ipam/allot/test/k8senv"
)

const benchNodes = 1000

// BenchmarkConverge measures, on a real API server, how long the operator takes to give 1,000
// nodes their blocks (created while it leads, 16 creators in parallel), and how many API
// requests it makes per node. Client QPS 500, burst 1000 (k8senv defaults) for both the
// operator and the creators. Run with `make bench-operator` (-benchtime=1x).
func BenchmarkConverge(b *testing.B) {
	b.Run("MultiPool", func(b *testing.B) { benchConverge(b, false, false) })
	b.Run("ClusterCIDRConfig", func(b *testing.B) { benchConverge(b, true, false) })
	// Cold start: the 1,000 nodes exist before the operator starts (a new leader, or an
	// upgrade): rebuild, then serve them all.
	b.Run("MultiPoolColdStart", func(b *testing.B) { benchConverge(b, false, true) })
	b.Run("ClusterCIDRConfigColdStart", func(b *testing.B) { benchConverge(b, true, true) })
}

func benchConverge(b *testing.B, ccc, cold bool) {
	env := k8senv.Start(b)
	c, err := env.Client()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if ccc {
		for _, cfg := range []*allotv1.ClusterCIDRConfig{
			newCCC("rack-a", map[string]string{"rack": "a"}, "10.64.0.0/14", 24, "fd64::/104", 120),
			// Dual stack too: all configs must be of one stack.
			newCCC("all", nil, "10.128.0.0/12", 24, "fd80::/104", 120),
		} {
			if err := c.Create(ctx, cfg); err != nil {
				b.Fatal(err)
			}
		}
	} else if err := c.Create(ctx, newPool("default", []string{"10.0.0.0/8"}, 24, []string{"fd00::/96"}, 120)); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		prefix := fmt.Sprintf("b%d-", i)
		var created time.Duration
		start := time.Now()
		if cold {
			createAll(b, ctx, c, prefix, ccc)
			created = time.Since(start)
		}
		cnt := &k8senv.Counter{}
		cfg := cnt.Wrap(env.Config)
		opctx, opcancel := context.WithCancel(ctx)
		leader := make(chan struct{}, 1)
		done := make(chan error, 1)
		go func() {
			done <- operator.Run(opctx, operator.Options{
				RESTConfig: cfg, Identity: "bench", Registry: prometheus.NewRegistry(),
				Logger:            testLoggerB(),
				ClusterCIDRConfig: ccc, DisableMultiPool: ccc, NodePolicy: nodelabels.New(),
				LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 500 * time.Millisecond,
				OnLeader: func() { leader <- struct{}{} },
			})
		}()
		var baseBy map[string]int64
		if cold {
			start = time.Now() // from operator start: campaign, rebuild, serve
		} else {
			<-leader
			time.Sleep(500 * time.Millisecond) // sleep: informers settle; nothing to observe
			baseBy = cnt.Snapshot()
			start = time.Now()
			createAll(b, ctx, c, prefix, ccc)
			created = time.Since(start)
		}
		waitConverged(b, ctx, c, prefix, ccc)
		took := time.Since(start)
		time.Sleep(2 * time.Second) // sleep: let status writes settle before counting them
		by := k8senv.CountDelta(baseBy, cnt.Snapshot())
		var total int64
		for _, v := range by {
			total += v
		}
		opcancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		reqs := float64(total) / benchNodes
		b.ReportMetric(took.Seconds(), "s-converge")
		b.ReportMetric(reqs, "req/node")
		mode := "multi-pool (AllotNode)"
		if ccc {
			mode = "ClusterCIDRConfig (Node)"
		}
		if cold {
			mode += ", cold start (nodes exist before the operator starts; time from Run)"
		}
		var lines []string
		for _, k := range sortedKeysStr(by) {
			lines = append(lines, fmt.Sprintf("    %-40s %6d  (%.2f/node)", k, by[k], float64(by[k])/benchNodes))
		}
		fmt.Fprintf(os.Stdout, "\n%s: %d nodes created in %v, converged in %v; operator API requests %d (%.2f per node)\n%s\n",
			mode, benchNodes, created.Round(time.Millisecond), took.Round(time.Millisecond), total, reqs, strings.Join(lines, "\n"))
	}
}

func testLoggerB() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func sortedKeysStr(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func createAll(b *testing.B, ctx context.Context, c client.Client, prefix string, ccc bool) {
	var wg sync.WaitGroup
	work := make(chan int)
	var failed atomic.Value
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				var obj client.Object
				name := fmt.Sprintf("%s%04d", prefix, i)
				if ccc {
					labels := map[string]string{}
					if i%2 == 0 {
						labels["rack"] = "a"
					}
					obj = newNode(name, labels)
				} else {
					obj = newAllotNode(name, req{pool: "default", v4: 100, v6: 100})
				}
				if err := c.Create(ctx, obj); err != nil {
					failed.Store(err)
				}
			}
		}()
	}
	for i := range benchNodes {
		work <- i
	}
	close(work)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

func waitConverged(b *testing.B, ctx context.Context, c client.Client, prefix string, ccc bool) {
	testenv.Eventually(b, 5*time.Minute, "every node converged", func() (bool, string) {
		done := 0
		if ccc {
			var l corev1.NodeList
			if err := c.List(ctx, &l); err != nil {
				b.Fatal(err)
			}
			for _, n := range l.Items {
				if strings.HasPrefix(n.Name, prefix) && len(n.Spec.PodCIDRs) > 0 {
					done++
				}
			}
		} else {
			var l allotv1.AllotNodeList
			if err := c.List(ctx, &l); err != nil {
				b.Fatal(err)
			}
			for i := range l.Items {
				if strings.HasPrefix(l.Items[i].Name, prefix) && fulfilled(&l.Items[i]) == nil && len(l.Items[i].Spec.IPAM.Pools.Allocated) > 0 {
					done++
				}
			}
		}
		return done == benchNodes, fmt.Sprintf("%d of %d nodes converged", done, benchNodes)
	})
}
