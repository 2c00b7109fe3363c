package sharedpool

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/testenv"
	spiderpoolpriority "github.com/allot-ipam/allot/plugins/policy/spiderpoolpriority"
	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/test/k8senv"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	if os.Getenv("ALLOT_TEST_LOG") == "" {
		klog.SetLogger(logr.Discard())
	}
	ctrllog.SetLogger(logr.Discard()) // controller-runtime's "SetLogger was never called" stack trace
	os.Exit(m.Run())
}

func testLogger() *slog.Logger {
	if os.Getenv("ALLOT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// cluster is one API server with simulated nodes, each an allocator with its own informer
// cache and client, as the agents of ten nodes would be.
type cluster struct {
	t   testing.TB
	env *k8senv.Env
	c   client.Client
}

func newCluster(t testing.TB) *cluster {
	env := k8senv.Start(t)
	c, err := client.New(env.Config, client.Options{Scheme: k8s.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, env: env, c: c}
}

type simNode struct {
	name string
	a    *Allocator
	c    cache.Cache
	stop context.CancelFunc
	done chan struct{}
}

// node starts a simulated node's allocator. hook is Options.AfterClaim.
func (cl *cluster) node(name string, hook func(context.Context, *v1alpha1.AddressClaim) error) *simNode {
	t := cl.t
	t.Helper()
	scheme := k8s.NewScheme()
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}:       {Field: fields.OneTermEqualSelector("spec.nodeName", name)},
		&corev1.Namespace{}: {},
	}
	for _, o := range CacheObjects() {
		byObject[o] = cache.ByObject{}
	}
	c, err := cache.New(cl.env.Config, cache.Options{Scheme: scheme, ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		t.Fatal(err)
	}
	live, err := client.New(cl.env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	pol := spiderpoolpriority.New() // the real policy: test files may import plugins (ARCHITECTURE.md)
	a, err := New(Options{
		Node: name, Client: live, Logger: testLogger().With("node", name),
		Policy:     func(string) policy.PoolPolicy { return pol },
		PodContext: podContext(c, live, name), AfterClaim: hook,
		// CI runs many API servers at once and a pod read that misses the cache can take
		// seconds; these tests are about contention and durability, not latency, so the
		// pod lookup is not cut at the 2 s default (the kubelet would retry the ADD).
		PolicyTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Watch(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Pods and namespaces are read at ADD time: start their informers before the cache.
	for _, o := range []client.Object{&corev1.Pod{}, &corev1.Namespace{}} {
		if _, err := c.GetInformer(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	n := &simNode{name: name, a: a, c: c, stop: cancel, done: make(chan struct{})}
	go func() { defer close(n.done); _ = c.Start(ctx) }()
	testenv.Eventually(t, 30*time.Second, "the allocator index to sync", testenv.Cond(a.Synced))
	t.Cleanup(n.shutdown)
	return n
}

func (n *simNode) shutdown() {
	n.stop()
	<-n.done
}

// podContext is what the agent's PodContext does, in short: the pod and its namespace from
// the node's cache, else from the API server.
func podContext(c cache.Cache, live client.Client, node string) func(context.Context, *policy.PodRequest) error {
	return func(ctx context.Context, req *policy.PodRequest) error {
		req.Node.Name = node
		key := types.NamespacedName{Namespace: req.Pod.Namespace, Name: req.Pod.Name}
		var pod corev1.Pod
		if err := c.Get(ctx, key, &pod); err != nil || string(pod.UID) != req.Pod.UID {
			if err := live.Get(ctx, key, &pod); err != nil {
				return api.Errorf(api.CodeNotFound, "pod %s: %v", key, err)
			}
		}
		if string(pod.UID) != req.Pod.UID {
			return api.Errorf(api.CodeNotFound, "pod %s has UID %s, not %s", key, pod.UID, req.Pod.UID)
		}
		req.Pod.Labels, req.Pod.Annotations = pod.Labels, pod.Annotations
		if ref := metav1.GetControllerOf(&pod); ref != nil {
			req.Pod.OwnerKind, req.Pod.OwnerName = ref.Kind, ref.Name
		}
		var ns corev1.Namespace
		if err := c.Get(ctx, types.NamespacedName{Name: req.Pod.Namespace}, &ns); err == nil {
			req.Namespace.Labels, req.Namespace.Annotations = ns.Labels, ns.Annotations
		}
		return nil
	}
}

func (cl *cluster) pool(name, subnet string, ips []string, mut func(*v1alpha1.SharedIPPool)) *v1alpha1.SharedIPPool {
	cl.t.Helper()
	p := &v1alpha1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	f := &v1alpha1.SharedPoolFamily{Subnet: subnet, IPs: ips}
	if netip.MustParsePrefix(subnet).Addr().Is4() {
		p.Spec.IPv4 = f
	} else {
		p.Spec.IPv6 = f
	}
	p.Spec.Default = true
	if mut != nil {
		mut(p)
	}
	if err := cl.c.Create(context.Background(), p); err != nil {
		cl.t.Fatal(err)
	}
	return p
}

// waitPool waits until every node's index knows the pool.
func waitPool(t testing.TB, name string, nodes ...*simNode) {
	t.Helper()
	for _, n := range nodes {
		testenv.Eventually(t, 10*time.Second, "node "+n.name+" to see pool "+name, func() (bool, string) {
			_, ok := n.a.idx.pool(name)
			return ok, ""
		})
	}
}

type podOpt func(*corev1.Pod)

func statefulSet(name string) podOpt {
	return func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: name, UID: uuid.NewUUID(), Controller: &yes}}
	}
}

func annotations(kv map[string]string) podOpt {
	return func(p *corev1.Pod) { p.Annotations = kv }
}

func (cl *cluster) pod(ns, name, node string, opts ...podOpt) *corev1.Pod {
	cl.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
	}
	for _, o := range opts {
		o(p)
	}
	if err := cl.c.Create(context.Background(), p); err != nil {
		cl.t.Fatal(err)
	}
	return p
}

func addReq(p *corev1.Pod, cid, ifName string) *api.AllocateRequest {
	return &api.AllocateRequest{Owner: api.Owner{ContainerID: cid, IfName: ifName}, Network: "underlay",
		Pod: api.PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}}
}

// consistency lists every claim and endpoint and checks: no address twice, every endpoint
// address claimed by that pod's interface, every claim listed by its pod's endpoint. It
// returns the claims by address.
func (cl *cluster) consistency(t testing.TB) map[string]v1alpha1.AddressClaim {
	t.Helper()
	ctx := context.Background()
	var claims v1alpha1.AddressClaimList
	if err := cl.c.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	var eps v1alpha1.AllotEndpointList
	if err := cl.c.List(ctx, &eps); err != nil {
		t.Fatal(err)
	}
	byAddr := map[string]v1alpha1.AddressClaim{}
	for _, c := range claims.Items {
		if _, dup := byAddr[c.Spec.IP]; dup {
			t.Errorf("address %s claimed twice", c.Spec.IP)
		}
		a := netip.MustParseAddr(c.Spec.IP)
		if c.Name != k8s.ClaimName(a) {
			t.Errorf("claim %s holds %s", c.Name, c.Spec.IP)
		}
		byAddr[c.Spec.IP] = c
	}
	listed := map[string]bool{}
	seen := map[string]string{}
	for _, ep := range eps.Items {
		for _, it := range ep.Spec.Interfaces {
			for _, ip := range it.IPs {
				a := netip.MustParsePrefix(ip.Address).Addr().String()
				if other, dup := seen[a]; dup {
					t.Errorf("address %s in endpoints %s and %s/%s", a, other, ep.Namespace, ep.Name)
				}
				seen[a] = ep.Namespace + "/" + ep.Name
				c, ok := byAddr[a]
				switch {
				case !ok:
					t.Errorf("endpoint %s/%s %s: %s has no claim", ep.Namespace, ep.Name, it.Interface, a)
				case c.Spec.Holder.Pod != ep.Name || c.Spec.Holder.Namespace != ep.Namespace || c.Spec.Holder.PodUID != ep.Spec.PodUID ||
					c.Spec.Holder.Interface != it.Interface || c.Spec.Holder.ContainerID != it.ContainerID || c.Spec.Holder.Node != ep.Spec.Node:
					t.Errorf("endpoint %s/%s %s %s disagrees with claim holder %+v", ep.Namespace, ep.Name, it.Interface, a, c.Spec.Holder)
				}
				listed[a] = true
			}
		}
	}
	for a := range byAddr {
		if !listed[a] {
			t.Errorf("claim of %s is in no endpoint", a)
		}
	}
	return byAddr
}

func sortedAddrs(m map[string]v1alpha1.AddressClaim) []string {
	out := make([]string, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// storm runs fn for every pod index with per-node concurrency, and returns the errors.
func storm(nodes []*simNode, pods [][]*corev1.Pod, perNode int, fn func(n *simNode, p *corev1.Pod) error) []error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var nwg sync.WaitGroup
			sem := make(chan struct{}, perNode)
			for _, p := range pods[i] {
				nwg.Add(1)
				sem <- struct{}{}
				go func() {
					defer nwg.Done()
					defer func() { <-sem }()
					if err := fn(n, p); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("%s %s: %w", n.name, p.Name, err))
						mu.Unlock()
					}
				}()
			}
			nwg.Wait()
		}()
	}
	wg.Wait()
	return errs
}
