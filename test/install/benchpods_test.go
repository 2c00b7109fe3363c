package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/test/realnode"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// benchPods is how many pods are created together.
const benchPods = 100

// BenchmarkPodStart measures, on one real node, the time from pod create to Running for
// benchPods pods created together: first with the bridge plugin and host-local (the
// reference: the CNI project's own IPAM), then, on the same cluster, with allot installed
// by its chart (the same bridge plugin, allot-cni as IPAM). It runs once whatever b.N is
// (make bench-pods passes -benchtime 1x) and reports p50, p99 and total per setup, and
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

	// 1. bridge + host-local, as the CNI reference plugins are used everywhere.
	conf := filepath.Join(c.CNIConfDir, "10-hostlocal.conflist")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"hostlocal","plugins":[{"type":"bridge","bridge":"hlcni0","isGateway":true,"ipMasq":false,"hairpinMode":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.245.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":%q}}]}`, filepath.Join(work, "host-local"))), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := c.InstallCNIPlugins("bridge", "host-local"); err != nil {
		b.Fatal(err)
	}
	if err := c.WaitNodeReady(ctx, true); err != nil {
		b.Fatal(err)
	}
	ref, err := podStarts(ctx, c, "hostlocal")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.Remove(conf); err != nil {
		b.Fatal(err)
	}

	// 2. allot, installed by its chart.
	if out, err := helmCmd(ctx, c, "install", "allot", env.chart, "--namespace", ns, "--values", valuesFile(b, c, env.imageRef)); err != nil {
		b.Fatalf("helm install: %v\n%s", err, out)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(c.CNIConfDir, "05-allot.conflist")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the agent never wrote its CNI configuration")
		}
		time.Sleep(200 * time.Millisecond)
	}
	al, err := podStarts(ctx, c, "allot")
	if err != nil {
		b.Fatal(err)
	}

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
	fmt.Printf("\n%d pods created together, create -> Running, one node (kubelet, containerd, runc)\n", benchPods)
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

// podStarts creates benchPods pods at once and measures each one's create -> Running as the
// watch delivers it; then deletes them and waits until they are gone.
func podStarts(ctx context.Context, c *realnode.Cluster, name string) (startStats, error) {
	pods := c.Client.CoreV1().Pods(appNS)
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "bench=" + name})
	if err != nil {
		return startStats{}, err
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
		return startStats{}, fmt.Errorf("create: %w", err)
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
					return startStats{}, fmt.Errorf("%s: watch closed with %d of %d Running: %w", name, len(running), benchPods, err)
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
			return startStats{}, fmt.Errorf("%s: %d of %d Running after 10 minutes", name, len(running), benchPods)
		}
	}
	var ds []time.Duration
	for _, d := range running {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	st := startStats{p50: ds[len(ds)/2], p99: ds[(len(ds)*99+99)/100-1], total: last.Sub(first)}
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "bench=" + name}); err != nil {
		return st, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "bench=" + name})
		if err == nil && len(l.Items) == 0 {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("%s: pods not gone after 5 minutes", name)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
