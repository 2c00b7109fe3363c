package install

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/realnode"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// benchPods is how many pods one round creates together.
const benchPods = 100

// The reference's ranges: disjoint from allot's pool, so a probe pod's address tells which
// configuration the runtime used.
const (
	hostLocalCIDR4 = "10.245.0.0/24"
	hostLocalCIDR6 = "fd00:10:245::/64"
)

// BenchmarkPodStart measures, on one real node, the time from pod create to Running for
// benchPods pods created together, with allot as the IPAM and with host-local (the CNI
// project's own IPAM) as the reference. Both configurations are the same chain (bridge,
// portmap), dual-stack, with only the IPAM differing, and both run with allot installed by
// its chart, so the agent's and operator's background work weighs on both. The rounds go
// host-local, allot, allot, host-local, so a machine that warms up or slows down during the
// run favours neither. It runs once whatever b.N is (make bench-pods passes -benchtime 1x)
// and reports p50 and p99 over both rounds of each setup, the mean total per round, and
// allot's ratios to host-local (goal: p50 and total ratios <= 1.0).
func BenchmarkPodStart(b *testing.B) {
	if env.missing != "" {
		b.Fatal(env.missing)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	work := b.TempDir()
	c := startNode(ctx, b, work)
	defer func() {
		if err := c.Stop(context.Background()); err != nil {
			b.Errorf("cluster stop: %v", err)
		}
	}()
	if err := c.InstallCNIPlugins("bridge", "host-local", "portmap", "loopback"); err != nil {
		b.Fatal(err)
	}
	if out, err := helmCmd(ctx, c, "install", "allot", env.chart, "--namespace", ns, "--values", valuesFile(b, c, env.imageRef)); err != nil {
		b.Fatalf("helm install: %v\n%s", err, out)
	}
	testenv.Eventually(b, 5*time.Minute, "the agent to write its CNI configuration", func() (bool, string) {
		_, err := os.Stat(filepath.Join(c.CNIConfDir, "05-allot.conflist"))
		return err == nil, fmt.Sprint(err)
	})
	if err := c.WaitNodeReady(ctx, true); err != nil {
		b.Fatal(err)
	}

	// host-local's configuration sorts before allot's (00- < 05-), and the runtime uses the
	// first: writing it switches the node to host-local, removing it switches back.
	hlConf := filepath.Join(c.CNIConfDir, "00-hostlocal.conflist")
	hl := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"hostlocal","plugins":[`+
		`{"type":"bridge","bridge":"hlcni0","isGateway":true,"ipMasq":false,"hairpinMode":true,`+
		`"ipam":{"type":"host-local","ranges":[[{"subnet":%q}],[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}],"dataDir":%q}},`+
		`{"type":"portmap","capabilities":{"portMappings":true}}]}`,
		hostLocalCIDR4, hostLocalCIDR6, filepath.Join(work, "host-local"))
	use := func(setup string) error {
		want := netip.MustParsePrefix(PodCIDR4)
		if setup == "host-local" {
			want = netip.MustParsePrefix(hostLocalCIDR4)
			if err := os.WriteFile(hlConf, []byte(hl), 0o644); err != nil {
				return err
			}
		} else if err := os.Remove(hlConf); err != nil && !os.IsNotExist(err) {
			return err
		}
		return probe(ctx, c, want)
	}

	samples := map[string][]time.Duration{}
	totals := map[string][]time.Duration{}
	for i, setup := range []string{"host-local", "allot", "allot", "host-local"} {
		if err := use(setup); err != nil {
			b.Fatalf("switch to %s: %v", setup, err)
		}
		ds, total, err := podStarts(ctx, c, fmt.Sprintf("r%d", i))
		if err != nil {
			b.Fatalf("%s round %d: %v", setup, i, err)
		}
		samples[setup] = append(samples[setup], ds...)
		totals[setup] = append(totals[setup], total)
	}
	if err := os.Remove(hlConf); err != nil && !os.IsNotExist(err) {
		b.Error(err)
	}

	stats := map[string]startStats{}
	for setup, ds := range samples {
		slices.Sort(ds)
		var sum time.Duration
		for _, t := range totals[setup] {
			sum += t
		}
		stats[setup] = startStats{p50: ds[len(ds)/2], p99: ds[(len(ds)*99+99)/100-1], total: sum / time.Duration(len(totals[setup]))}
	}
	ref, al := stats["host-local"], stats["allot"]
	b.ReportMetric(0, "ns/op")
	for _, r := range []struct {
		name string
		s    startStats
	}{{"host-local", ref}, {"allot", al}} {
		b.ReportMetric(ms(r.s.p50), r.name+"-p50-ms")
		b.ReportMetric(ms(r.s.p99), r.name+"-p99-ms")
		b.ReportMetric(ms(r.s.total), r.name+"-total-ms")
	}
	b.ReportMetric(ms(al.p50)/ms(ref.p50), "p50-ratio")
	b.ReportMetric(ms(al.total)/ms(ref.total), "total-ratio")
	fmt.Printf("\n%d pods created together per round, create -> Running, one node (kubelet, containerd, runc);\n", benchPods)
	fmt.Printf("rounds host-local, allot, allot, host-local; p50/p99 over both rounds, total = mean per round\n")
	fmt.Printf("%-12s %10s %10s %10s\n", "IPAM", "p50", "p99", "total")
	for _, r := range []struct {
		name string
		s    startStats
	}{{"host-local", ref}, {"allot", al}} {
		fmt.Printf("%-12s %10v %10v %10v\n", r.name, r.s.p50.Round(time.Millisecond), r.s.p99.Round(time.Millisecond), r.s.total.Round(time.Millisecond))
	}
	fmt.Printf("%-12s %10.2f %10.2f %10.2f\n", "allot/h-l", ms(al.p50)/ms(ref.p50), ms(al.p99)/ms(ref.p99), ms(al.total)/ms(ref.total))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type startStats struct{ p50, p99, total time.Duration }

// probe starts one pod until it runs with an address in want, which shows the runtime has
// loaded the configuration just switched to (it reloads on a change of the directory, a
// moment later), then deletes it.
func probe(ctx context.Context, c *realnode.Cluster, want netip.Prefix) error {
	pods := c.Client.CoreV1().Pods(appNS)
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; ; i++ {
		name := fmt.Sprintf("probe-%d", i)
		no := false
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": "probe"}},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: &no, EnableServiceLinks: &no, TerminationGracePeriodSeconds: ptr[int64](0),
				Containers: []corev1.Container{{Name: "main", Image: testImage, ImagePullPolicy: corev1.PullNever}},
			},
		}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("probe pod: %w", err)
		}
		var got netip.Addr
		pctx, pcancel := context.WithDeadline(ctx, deadline)
		_ = testenv.Poll(pctx, func() (bool, string) {
			if p, err := pods.Get(ctx, name, metav1.GetOptions{}); err == nil && p.Status.Phase == corev1.PodRunning {
				got, _ = netip.ParseAddr(p.Status.PodIP)
			}
			return got.IsValid(), ""
		})
		pcancel()
		if err := deleteAndWait(ctx, c, "bench=probe"); err != nil {
			return err
		}
		if want.Contains(got) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no probe pod ran with an address in %s within 2 minutes (last: %v)", want, got)
		}
	}
}

// podStarts creates benchPods pods at once and measures each one's create -> Running as the
// watch delivers it, and the round's total (first create -> last Running); then deletes them
// and waits until they are gone.
func podStarts(ctx context.Context, c *realnode.Cluster, name string) ([]time.Duration, time.Duration, error) {
	pods := c.Client.CoreV1().Pods(appNS)
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "bench=" + name})
	if err != nil {
		return nil, 0, err
	}
	defer func() { w.Stop() }()
	created := make(map[string]time.Time, benchPods)
	var mu sync.Mutex
	no := false
	first := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, benchPods)
	for i := range benchPods {
		wg.Go(func() {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%03d", name, i), Labels: map[string]string{"bench": name}},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: &no, EnableServiceLinks: &no, TerminationGracePeriodSeconds: ptr[int64](1),
					Containers: []corev1.Container{{Name: "main", Image: testImage, ImagePullPolicy: corev1.PullNever}},
				},
			}
			start := time.Now()
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			created[p.Name] = start
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, 0, fmt.Errorf("create: %w", err)
	}
	running := map[string]time.Duration{}
	var last time.Time
	timeout := time.After(10 * time.Minute)
	for len(running) < benchPods {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The API server ends watches when it likes; a new one (no resourceVersion)
				// starts with every pod's current state, so nothing is missed.
				if w, err = pods.Watch(ctx, metav1.ListOptions{LabelSelector: "bench=" + name}); err != nil {
					return nil, 0, fmt.Errorf("%s: watch closed with %d of %d Running: %w", name, len(running), benchPods, err)
				}
				continue
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || ev.Type == watch.Deleted || p.Status.Phase != corev1.PodRunning {
				continue
			}
			if _, done := running[p.Name]; done {
				continue
			}
			now := time.Now()
			mu.Lock()
			running[p.Name] = now.Sub(created[p.Name])
			mu.Unlock()
			last = now
		case <-timeout:
			return nil, 0, fmt.Errorf("%s: %d of %d Running after 10 minutes", name, len(running), benchPods)
		}
	}
	ds := make([]time.Duration, 0, len(running))
	for _, d := range running {
		ds = append(ds, d)
	}
	return ds, last.Sub(first), deleteAndWait(ctx, c, "bench="+name)
}

// deleteAndWait deletes the bench pods the selector picks and waits until they are gone.
func deleteAndWait(ctx context.Context, c *realnode.Cluster, selector string) error {
	pods := c.Client.CoreV1().Pods(appNS)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector}); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	err := testenv.Poll(wctx, func() (bool, string) {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
		return err == nil && len(l.Items) == 0, fmt.Sprint(err)
	})
	if err != nil {
		return fmt.Errorf("pods %s not gone: %w", selector, err)
	}
	return nil
}
