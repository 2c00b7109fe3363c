package sharedpool

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/testenv"
	corev1 "k8s.io/api/core/v1"
)

// benchRow is one line of the BenchmarkSharedPool table.
type benchRow struct {
	name                    string
	pods, poolSize          int
	podsCreate, ipam        time.Duration
	apiPerPod               float64
	conflicts, dups, failed int
}

var (
	benchMu   sync.Mutex
	benchRows []benchRow
)

// BenchmarkSharedPool: 1,000 pods on 10 simulated nodes (each its own allocator, informer
// cache and client, QPS 500 / burst 1000 as k8senv gives) from one shared pool of exactly
// 1,000 addresses, then from one of 2,000. Pods are real Pod objects, created before the
// clock starts (their creation time is reported apart). Each node serves 20 ADDs at a time.
//
//	go test -run '^$' -bench BenchmarkSharedPool -benchtime=1x ./core/sharedpool/   (or make bench-shared)
func BenchmarkSharedPool(b *testing.B) {
	for _, tc := range []struct {
		name string
		size int
	}{{"exact-1000", 1000}, {"spare-2000", 2000}} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				r := runSharedBench(b, tc.name, tc.size, 10, 1000, 20)
				b.ReportMetric(r.ipam.Seconds(), "ipam-s")
				b.ReportMetric(r.apiPerPod, "api-req/pod")
				b.ReportMetric(float64(r.conflicts), "conflicts")
				b.ReportMetric(float64(r.dups), "duplicates")
				benchMu.Lock()
				benchRows = append(benchRows, r)
				benchMu.Unlock()
			}
		})
	}
	benchMu.Lock()
	defer benchMu.Unlock()
	fmt.Fprintf(os.Stdout, "\n| case | pods | pool | create pods | IPAM: every pod has an address | API requests/pod | conflicts retried | duplicates | failed |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range benchRows {
		fmt.Fprintf(os.Stdout, "| %s | %d | %d | %.2f s | %.2f s | %.2f | %d | %d | %d |\n",
			r.name, r.pods, r.poolSize, r.podsCreate.Seconds(), r.ipam.Seconds(), r.apiPerPod, r.conflicts, r.dups, r.failed)
	}
	benchRows = nil
}

func runSharedBench(b *testing.B, name string, size, nNodes, nPods, perNode int) benchRow {
	b.StopTimer()
	cl := newCluster(b)
	first := netip.MustParseAddr("10.100.1.0")
	last := first
	for range size - 1 {
		last = last.Next()
	}
	cl.pool("bench", "10.100.0.0/16", []string{first.String() + "-" + last.String()}, func(p *v1alpha1.SharedIPPool) {
		p.Spec.IPv4.Gateway = "10.100.0.1"
	})
	ns := make([]*simNode, nNodes)
	for i := range ns {
		ns[i] = cl.node(fmt.Sprintf("node-%02d", i), nil)
	}
	waitPool(b, "bench", ns...)

	begin := time.Now()
	pods := make([][]*corev1.Pod, nNodes)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range nPods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n := i % nNodes
			p := cl.pod("default", fmt.Sprintf("pod-%04d", i), ns[n].name)
			mu.Lock()
			pods[n] = append(pods[n], p)
			mu.Unlock()
		}()
	}
	wg.Wait()
	created := time.Since(begin)
	// Each node's informer has its pods before the clock starts, as a kubelet's would.
	for i, n := range ns {
		testenv.Eventually(b, time.Minute, "node "+n.name+"'s informer to see its pods", func() (bool, string) {
			var list corev1.PodList
			err := n.c.List(context.Background(), &list)
			return err == nil && len(list.Items) == len(pods[i]), fmt.Sprint(len(list.Items), " pods ", err)
		})
	}
	before := make([]Stats, nNodes)
	for i, n := range ns {
		before[i] = n.a.Stats()
	}

	b.StartTimer()
	begin = time.Now()
	errs := storm(ns, pods, perNode, func(n *simNode, p *corev1.Pod) error {
		_, err := n.a.Allocate(context.Background(), addReq(p, "c-"+p.Name, "eth0"))
		return err
	})
	ipam := time.Since(begin)
	b.StopTimer()

	for _, err := range errs[:min(len(errs), 5)] {
		b.Errorf("ADD failed: %v", err)
	}
	var api, conflicts int64
	for i, n := range ns {
		s := n.a.Stats()
		api += s.APIRequests - before[i].APIRequests
		conflicts += s.Conflicts - before[i].Conflicts
	}
	// Duplicates: every claim and endpoint, checked against each other.
	dups := 0
	ct := &countingTB{TB: b}
	claims := cl.consistency(ct)
	dups = ct.errors
	if len(claims) != nPods-len(errs) {
		b.Errorf("%d claims for %d pods that got an address", len(claims), nPods-len(errs))
	}
	return benchRow{name: name, pods: nPods, poolSize: size, podsCreate: created, ipam: ipam,
		apiPerPod: float64(api) / float64(nPods), conflicts: int(conflicts), dups: dups, failed: len(errs)}
}

// countingTB counts Errorf calls instead of failing at once (consistency reports each
// duplicate or disagreement).
type countingTB struct {
	testing.TB
	errors int
}

func (c *countingTB) Errorf(format string, args ...any) {
	c.errors++
	c.TB.Errorf(format, args...)
}
