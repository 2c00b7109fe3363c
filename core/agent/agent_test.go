package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/ipam"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/internal/testenv"
	ciliumannotations "github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/test/k8senv"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	if os.Getenv("ALLOT_TEST_LOG") == "" {
		klog.SetLogger(logr.Discard()) // client-go's reflector chatter while the API server is down
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

// fakeOperator hands blocks to AllotNodes the simplest way: per requested pool and family,
// the next unused blocks of the pool until the node's blocks cover the request. It stands
// in for core/operator so that the agent is tested alone.
type fakeOperator struct {
	c    client.Client
	mu   sync.Mutex
	used map[string]bool
}

func blockSize(p netip.Prefix) int64 {
	n := new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits()))
	if p.Addr().Is4() && p.Bits() <= 30 {
		n.Sub(n, big.NewInt(2))
	} else if !p.Addr().Is4() && p.Bits() <= 126 {
		n.Sub(n, big.NewInt(1))
	}
	return n.Int64()
}

func nthBlock(base netip.Prefix, mask int, i int) (netip.Prefix, bool) {
	hostBits := base.Addr().BitLen() - mask
	if i >= 1<<(mask-base.Bits()) {
		return netip.Prefix{}, false
	}
	b := new(big.Int).SetBytes(base.Addr().AsSlice())
	b.Add(b, new(big.Int).Lsh(big.NewInt(int64(i)), uint(hostBits)))
	raw := b.FillBytes(make([]byte, base.Addr().BitLen()/8))
	a, _ := netip.AddrFromSlice(raw)
	return netip.PrefixFrom(a, mask), true
}

func (o *fakeOperator) reconcile(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var nodes allotv1.AllotNodeList
	if err := o.c.List(ctx, &nodes); err != nil {
		return err
	}
	o.used = map[string]bool{}
	for _, n := range nodes.Items {
		for _, a := range n.Spec.IPAM.Pools.Allocated {
			for _, c := range a.CIDRs {
				o.used[c] = true
			}
		}
	}
	for _, n := range nodes.Items {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			var cur allotv1.AllotNode
			if err := o.c.Get(ctx, types.NamespacedName{Name: n.Name}, &cur); err != nil {
				return err
			}
			changed := false
			for _, r := range cur.Spec.IPAM.Pools.Requested {
				var pool allotv1.IPPool
				if err := o.c.Get(ctx, types.NamespacedName{Name: r.Pool}, &pool); err != nil {
					continue
				}
				for _, f := range []struct {
					spec *allotv1.PoolFamily
					need int64
					is4  bool
				}{{pool.Spec.IPv4, r.Needed.IPv4, true}, {pool.Spec.IPv6, r.Needed.IPv6, false}} {
					if f.spec == nil || f.need == 0 {
						continue
					}
					idx := slices.IndexFunc(cur.Spec.IPAM.Pools.Allocated, func(a allotv1.PoolAllocation) bool { return a.Pool == r.Pool })
					if idx < 0 {
						cur.Spec.IPAM.Pools.Allocated = append(cur.Spec.IPAM.Pools.Allocated, allotv1.PoolAllocation{Pool: r.Pool})
						idx = len(cur.Spec.IPAM.Pools.Allocated) - 1
					}
					pa := &cur.Spec.IPAM.Pools.Allocated[idx]
					var have int64
					for _, c := range pa.CIDRs {
						if p := netip.MustParsePrefix(c); p.Addr().Is4() == f.is4 {
							have += blockSize(p)
						}
					}
				next:
					for have < f.need {
						for _, cs := range f.spec.CIDRs {
							base := netip.MustParsePrefix(cs)
							for i := 0; ; i++ {
								b, ok := nthBlock(base, int(f.spec.MaskSize), i)
								if !ok {
									break
								}
								if !o.used[b.String()] {
									o.used[b.String()] = true
									pa.CIDRs = append(pa.CIDRs, b.String())
									have += blockSize(b)
									changed = true
									continue next
								}
							}
						}
						break // pool exhausted
					}
				}
			}
			cur.Spec.IPAM.Pools.Allocated = slices.DeleteFunc(cur.Spec.IPAM.Pools.Allocated, func(a allotv1.PoolAllocation) bool { return len(a.CIDRs) == 0 })
			if !changed {
				return nil
			}
			return o.c.Update(ctx, &cur)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (o *fakeOperator) run(ctx context.Context) {
	for {
		_ = o.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type agentRig struct {
	t     *testing.T
	env   *k8senv.Env
	c     client.Client
	node  string
	dir   string
	st    *store.Store
	m     *ipam.Manager
	a     *Agent
	stop  context.CancelFunc
	done  chan struct{}
	grace time.Duration
	cfg   *rest.Config // instead of env.Config, if set
}

func (r *agentRig) start() {
	r.t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(r.dir, "allot.db"), store.Options{NoSync: true, Logger: testLogger()})
	if err != nil {
		r.t.Fatal(err)
	}
	cfg := r.cfg
	if cfg == nil {
		cfg = r.env.Config
	}
	a, err := New(Options{
		NodeName: r.node, RESTConfig: cfg,
		PreAllocation: map[string]int{"default": 8},
		Debounce:      20 * time.Millisecond, ReleaseDelay: 200 * time.Millisecond,
		ReclaimGrace: r.grace, ReclaimInterval: 100 * time.Millisecond,
		Logger: testLogger().With("node", r.node),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	pol, _ := ciliumannotations.New(ciliumannotations.Config{})
	m, err := ipam.New(context.Background(), ipam.Options{
		Store: st, Logger: testLogger(),
		Policy:     func(string) policy.PoolPolicy { return pol },
		Dynamic:    &ipam.DynamicOptions{Node: r.node, Wait: 10 * time.Second, RefreshPools: a.RefreshPools},
		PodContext: a.PodContext, OnChange: a.Trigger,
	})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.st, r.m, r.a, r.stop, r.done = st, m, a, cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		if err := a.Run(ctx, m); err != nil {
			r.t.Errorf("agent: %v", err)
		}
	}()
}

func (r *agentRig) shutdown() {
	r.stop()
	<-r.done
	_ = r.st.Close()
}

func eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

func mkPod(t *testing.T, c client.Client, ns, name, node string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
	}
	if err := c.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

func addReq(p *corev1.Pod, cid string) *api.AllocateRequest {
	return &api.AllocateRequest{Owner: api.Owner{ContainerID: cid, IfName: "eth0"}, Network: "k8s",
		Pod: api.PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}}
}

func getNode(c client.Client, name string) (*allotv1.AllotNode, error) {
	var n allotv1.AllotNode
	err := c.Get(context.Background(), types.NamespacedName{Name: name}, &n)
	return &n, err
}

func TestAgentOnAPIServer(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, p := range []*allotv1.IPPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: allotv1.IPPoolSpec{
			IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.10.0.0/24"}, MaskSize: 28},
			IPv6: &allotv1.PoolFamily{CIDRs: []string{"fd00:10::/120"}, MaskSize: 124}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "blue"}, Spec: allotv1.IPPoolSpec{
			IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.20.0.0/24"}, MaskSize: 28}}},
	} {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "team-blue", Annotations: map[string]string{ciliumannotations.DefaultAnnotation: "blue"}}},
	} {
		if err := c.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	op := &fakeOperator{c: c}
	go op.run(ctx)

	r := &agentRig{t: t, env: env, c: c, node: "node-a", dir: t.TempDir(), grace: 300 * time.Millisecond}
	r.start()
	defer func() { r.shutdown() }()

	// The agent creates its AllotNode and asks for the default pool's pre-allocation.
	eventually(t, "default block", 20*time.Second, func() (bool, string) {
		n, err := getNode(c, "node-a")
		if err != nil {
			return false, err.Error()
		}
		return len(Blocks(n)["default"]) == 2, fmt.Sprintf("%+v", n.Spec.IPAM.Pools)
	})
	n, _ := getNode(c, "node-a")
	if got := n.Spec.IPAM.Pools.Requested; !slices.Equal(got, []allotv1.PoolRequest{{Pool: "default", Needed: allotv1.AddressCounts{IPv4: 8, IPv6: 8}}}) {
		t.Fatalf("requested %+v", got)
	}

	// Default pool: no annotation anywhere.
	p1 := mkPod(t, c, "plain", "p1", "node-a", nil)
	a1, err := r.m.Allocate(ctx, addReq(p1, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(a1.IPs) != 2 || a1.IPs[0].Address != "10.10.0.1/28" || a1.IPs[1].Address != "fd00:10::1/124" {
		t.Fatalf("p1 got %+v", a1.IPs)
	}
	// 1 in use + 8 pre-allocated, rounded up to 8: 16 per family, more than one /28 (14).
	eventually(t, "requests and a second block", 10*time.Second, func() (bool, string) {
		n, _ := getNode(c, "node-a")
		ok := slices.Equal(n.Spec.IPAM.Pools.Requested, []allotv1.PoolRequest{{Pool: "default", Needed: allotv1.AddressCounts{IPv4: 16, IPv6: 16}}}) &&
			len(Blocks(n)["default"]) == 4 // v4 14+14 >= 16; v6 15+15 >= 16
		return ok, fmt.Sprintf("%+v", n.Spec.IPAM.Pools)
	})
	eventually(t, "usage in status", 10*time.Second, func() (bool, string) {
		n, _ := getNode(c, "node-a")
		s := n.Status.IPAM.Pools
		return len(s) == 1 && s[0].IPv4 != nil && *s[0].IPv4 == allotv1.FamilyUsage{Used: 1, Available: 28}, fmt.Sprintf("%+v", s)
	})
	n, _ = getNode(c, "node-a")
	t.Logf("after p1: allocated %v, status v6 %+v", n.Spec.IPAM.Pools.Allocated, n.Status.IPAM.Pools[0].IPv6)

	// Namespace annotation: a pool the node has no block of. The ADD waits as pending,
	// the agent asks for the pool, the block arrives, the ADD completes.
	p2 := mkPod(t, c, "team-blue", "p2", "node-a", nil)
	a2, err := r.m.Allocate(ctx, addReq(p2, "c2"))
	if err != nil {
		t.Fatal(err)
	}
	if len(a2.IPs) != 1 || a2.IPs[0].Pool != "blue" || a2.IPs[0].Address != "10.20.0.1/28" {
		t.Fatalf("p2 got %+v", a2.IPs)
	}
	// Pod annotation beats the namespace's; it counts only when the pod is created.
	p3 := mkPod(t, c, "team-blue", "p3", "node-a", map[string]string{ciliumannotations.DefaultAnnotation: "default"})
	a3, err := r.m.Allocate(ctx, addReq(p3, "c3"))
	if err != nil || a3.IPs[0].Pool != "default" {
		t.Fatalf("p3: %+v %v", a3, err)
	}
	p3.Annotations[ciliumannotations.DefaultAnnotation] = "blue"
	if err := c.Update(ctx, p3); err != nil {
		t.Fatal(err)
	}
	again, err := r.m.Allocate(ctx, addReq(p3, "c3"))
	if err != nil || again.IPs[0].Address != a3.IPs[0].Address {
		t.Fatalf("repeated ADD after the annotation changed: %+v %v", again, err)
	}

	// DEL of the only blue pod: the blue block is given back (after the release delay) and
	// the request for blue disappears.
	if err := r.m.Release(ctx, &api.ReleaseRequest{Owner: a2.Owner}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "blue block given back", 10*time.Second, func() (bool, string) {
		n, _ := getNode(c, "node-a")
		_, held := Blocks(n)["blue"]
		asked := slices.ContainsFunc(n.Spec.IPAM.Pools.Requested, func(r allotv1.PoolRequest) bool { return r.Pool == "blue" })
		return !held && !asked, fmt.Sprintf("%+v", n.Spec.IPAM.Pools)
	})
	if u := usage(r.m, "blue", policy.IPv4); len(u.CIDRs) != 0 {
		t.Fatalf("blue block still local: %+v", u)
	}

	// Restart with a pod deleted meanwhile: its addresses are reclaimed; the others stay.
	p4 := mkPod(t, c, "plain", "p4", "node-a", nil)
	a4, err := r.m.Allocate(ctx, addReq(p4, "c4"))
	if err != nil {
		t.Fatal(err)
	}
	r.shutdown()
	if err := c.Delete(ctx, p4, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	r.start()
	eventually(t, "p4 reclaimed", 20*time.Second, func() (bool, string) {
		allocs, _ := r.m.Allocations(ctx)
		var owners []string
		for _, al := range allocs {
			owners = append(owners, al.Owner.ContainerID)
		}
		return slices.Equal(owners, []string{"c1", "c3"}), fmt.Sprint(owners)
	})
	// The restored allocations are held in the blocks that came back: p1's address is not
	// handed out again.
	p5 := mkPod(t, c, "plain", "p5", "node-a", nil)
	a5, err := r.m.Allocate(ctx, addReq(p5, "c5"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range a5.IPs {
		if ip.Address == a1.IPs[0].Address || ip.Address == a1.IPs[1].Address || ip.Address == a3.IPs[0].Address {
			t.Fatalf("p5 got %s, still held", ip.Address)
		}
	}
	_ = a4

	// A storm of ADDs costs a few writes of the node object, not one per ADD (debounce).
	before := r.a.metrics.writesSpec()
	var wg sync.WaitGroup
	begin := time.Now()
	errs := make(chan error, 40)
	for i := range 40 {
		p := mkPod(t, c, "plain", fmt.Sprintf("storm-%d", i), "node-a", nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.m.Allocate(ctx, addReq(p, fmt.Sprintf("s%d", i))); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	took := time.Since(begin)
	eventually(t, "storm requests written", 10*time.Second, func() (bool, string) {
		n, _ := getNode(c, "node-a")
		// 43 in use + 8, rounded up to 8: 56 per family.
		return slices.Equal(n.Spec.IPAM.Pools.Requested, []allotv1.PoolRequest{{Pool: "default", Needed: allotv1.AddressCounts{IPv4: 56, IPv6: 56}}}), fmt.Sprintf("%+v", n.Spec.IPAM.Pools.Requested)
	})
	writes := r.a.metrics.writesSpec() - before
	t.Logf("40 concurrent ADDs (the node growing its blocks meanwhile) in %s: %v spec writes of the AllotNode", took.Round(time.Millisecond), writes)
	if writes > 20 {
		t.Fatalf("%v spec writes for 40 ADDs", writes)
	}

	// A pod the API server does not know.
	ghost := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "plain", Name: "ghost", UID: "nope"}}
	_, err = r.m.Allocate(ctx, addReq(ghost, "c9"))
	if api.CodeOf(err) != api.CodeNotFound || !strings.Contains(err.Error(), "pod plain/ghost not found") {
		t.Fatalf("ghost pod: %v", err)
	}
}

func usage(m *ipam.Manager, name string, fam policy.Family) ipam.PoolUsage {
	for _, u := range m.Usage() {
		if u.Name == name && u.Family == fam {
			return u
		}
	}
	return ipam.PoolUsage{}
}

func TestAgentSurvivesAPIServerRestart(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Create(ctx, &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: allotv1.IPPoolSpec{
		IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.10.0.0/24"}, MaskSize: 27}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}); err != nil {
		t.Fatal(err)
	}
	op := &fakeOperator{c: c}
	go op.run(ctx)
	r := &agentRig{t: t, env: env, c: c, node: "node-a", dir: t.TempDir(), grace: time.Minute}
	r.start()
	defer func() { r.shutdown() }()
	eventually(t, "default block", 20*time.Second, func() (bool, string) {
		n, err := getNode(c, "node-a")
		if err != nil {
			return false, err.Error()
		}
		return len(Blocks(n)["default"]) == 1 && len(usage(r.m, "default", policy.IPv4).CIDRs) == 1, fmt.Sprintf("%+v", n.Spec.IPAM.Pools)
	})
	var pods []*corev1.Pod
	for i := range 4 {
		pods = append(pods, mkPod(t, c, "plain", fmt.Sprint("p", i), "node-a", nil))
	}
	// The node serves a pod before the outage: its first ADD starts the pod informers
	// (ondemand.go), which then bring the others.
	if _, err := r.m.Allocate(ctx, addReq(pods[3], "c3")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pods in the agent's cache", 10*time.Second, func() (bool, string) {
		var pl corev1.PodList
		err := r.a.cache.List(ctx, &pl)
		return err == nil && len(pl.Items) == 4, fmt.Sprint(len(pl.Items), err)
	})

	env.StopAPIServer()
	// CNI keeps working for the pool the node holds, from the cache and local state.
	for i, p := range pods[:3] {
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		a, err := r.m.Allocate(actx, addReq(p, fmt.Sprint("c", i)))
		acancel()
		if err != nil {
			t.Fatalf("ADD %d with the API server down: %v", i, err)
		}
		t.Logf("ADD with the API server down: %s", a.IPs[0].Address)
	}
	// sleep: real time with the API server down: the agent's writes fail and back off meanwhile
	time.Sleep(500 * time.Millisecond)
	if err := env.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	// The agent catches up: its usage reaches the API server.
	eventually(t, "status after the restart", 30*time.Second, func() (bool, string) {
		n, err := getNode(c, "node-a")
		if err != nil {
			return false, err.Error()
		}
		s := n.Status.IPAM.Pools
		return len(s) == 1 && s[0].IPv4 != nil && s[0].IPv4.Used == 4, fmt.Sprintf("%+v", s)
	})
	// And a new pod created after the restart is served.
	p := mkPod(t, c, "plain", "late", "node-a", nil)
	if _, err := r.m.Allocate(ctx, addReq(p, "c-late")); err != nil {
		t.Fatal(err)
	}
	if apierrors.IsNotFound(nil) {
		t.Fatal("unreachable")
	}
}

// TestAgentNodeRead: NodeRead closes only once the blocks of the node's AllotNode are in the
// manager (the agent daemon writes the network configuration and applies the datapath then).
func TestAgentNodeRead(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: allotv1.IPPoolSpec{
		IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.30.0.0/24"}, MaskSize: 28}}}); err != nil {
		t.Fatal(err)
	}
	n := &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "node-r"}}
	n.Spec.IPAM.Pools.Allocated = []allotv1.PoolAllocation{{Pool: "default", CIDRs: []string{"10.30.0.16/28", "10.30.0.32/28"}}}
	if err := c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	r := &agentRig{t: t, env: env, c: c, node: "node-r", dir: t.TempDir(), grace: time.Minute}
	r.start()
	defer r.shutdown()
	select {
	case <-r.a.NodeRead():
	case <-time.After(20 * time.Second):
		t.Fatal("NodeRead not closed 20 s after start")
	}
	u := usage(r.m, "default", policy.IPv4)
	var got []string
	for _, cs := range u.CIDRs {
		got = append(got, cs.Prefix.String())
	}
	if !slices.Equal(got, []string{"10.30.0.16/28", "10.30.0.32/28"}) {
		t.Fatalf("blocks in the manager when NodeRead closed: %v", got)
	}
}

// TestAgentPodInformersOnDemand: a node that has served no ADD watches only its AllotNode
// and the IPPools; its first ADD starts the pod, namespace and Node informers, and a
// restart with allocations in the store starts them for the reclaim (TestAgentOnAPIServer
// reclaims that way).
func TestAgentPodInformersOnDemand(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Create(ctx, &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: allotv1.IPPoolSpec{
		IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.40.0.0/24"}, MaskSize: 28}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-d", Labels: map[string]string{"zone": "z1"}}}); err != nil {
		t.Fatal(err)
	}
	go (&fakeOperator{c: c}).run(ctx)
	cnt := &k8senv.Counter{}
	r := &agentRig{t: t, env: env, c: c, node: "node-d", dir: t.TempDir(), grace: time.Minute, cfg: cnt.Wrap(env.Config)}
	r.start()
	defer func() { r.shutdown() }()
	eventually(t, "a block", 20*time.Second, func() (bool, string) {
		return len(usage(r.m, "default", policy.IPv4).CIDRs) > 0, "no block yet"
	})
	onDemand := []string{"WATCH pods", "WATCH namespaces", "WATCH nodes"}
	for _, k := range onDemand {
		if n := cnt.Snapshot()[k]; n != 0 {
			t.Fatalf("%d %s before any ADD: %v", n, k, cnt.Snapshot())
		}
	}
	// The AllotNode is still owned by the Node (read live, not from an informer).
	n, _ := getNode(c, "node-d")
	if len(n.OwnerReferences) != 1 || n.OwnerReferences[0].Name != "node-d" {
		t.Fatalf("owner references %+v", n.OwnerReferences)
	}

	// The first ADD is served (from live reads while the informers sync) and starts them.
	p := mkPod(t, c, "plain", "p1", "node-d", nil)
	if _, err := r.m.Allocate(ctx, addReq(p, "c1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod informers started", 20*time.Second, func() (bool, string) {
		s := cnt.Snapshot()
		for _, k := range onDemand {
			if s[k] == 0 {
				return false, fmt.Sprint(s)
			}
		}
		return r.a.onDemandSynced(), "not synced"
	})
	var node corev1.Node
	if err := r.a.CachedGet(ctx, types.NamespacedName{Name: "node-d"}, &node); err != nil || node.Labels["zone"] != "z1" {
		t.Fatalf("Node from the cache: %v %v", node.Labels, err)
	}

	// A restart with p1's allocation in the store starts them again at once, for the reclaim.
	r.shutdown()
	before := cnt.Snapshot()["WATCH pods"]
	r.start()
	eventually(t, "pod informers started after the restart", 20*time.Second, func() (bool, string) {
		return cnt.Snapshot()["WATCH pods"] > before && r.a.onDemandSynced(), fmt.Sprint(cnt.Snapshot())
	})
}

// TestAgentStatusWrite: the agent writes status.ipam.pools as an update of the status on the
// informer's copy; when the operator wrote the status since (a Conflict), as a merge patch of
// status.ipam.pools. Either way the operator's fields stay as the operator wrote them.
// TestAgentCreateRetryReadsNodeOnce: the retries of a refused AllotNode create reuse the
// owner read from the Node for the first attempt, and the AllotNode gets the Node's UID.
func TestAgentCreateRetryReadsNodeOnce(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: allotv1.IPPoolSpec{
		IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.50.0.0/24"}, MaskSize: 28}}}); err != nil {
		t.Fatal(err)
	}
	k8sNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-o"}}
	if err := c.Create(ctx, k8sNode); err != nil {
		t.Fatal(err)
	}
	const refused = 3
	failing := rest.CopyConfig(env.Config)
	left := &atomic.Int32{}
	left.Store(refused)
	failing.Wrap(func(rt http.RoundTripper) http.RoundTripper { return refuseCreates{rt: rt, left: left} })
	cnt := &k8senv.Counter{}
	r := &agentRig{t: t, env: env, c: c, node: "node-o", dir: t.TempDir(), grace: time.Minute, cfg: cnt.Wrap(failing)}
	r.start()
	defer r.shutdown()
	var n *allotv1.AllotNode
	eventually(t, "the AllotNode", 30*time.Second, func() (bool, string) {
		n, err = getNode(c, "node-o")
		return err == nil, fmt.Sprint(err)
	})
	if len(n.OwnerReferences) != 1 || n.OwnerReferences[0].UID != k8sNode.UID {
		t.Fatalf("owner references %+v, want the Node's UID %s", n.OwnerReferences, k8sNode.UID)
	}
	s := cnt.Snapshot()
	if s["POST allotnodes"] != refused+1 || s["GET nodes"] != 1 {
		t.Fatalf("%d creates (%d refused) read the Node %d times, want once: %v", s["POST allotnodes"], refused, s["GET nodes"], s)
	}
}

// refuseCreates answers the first left creates of AllotNodes with HTTP 500 instead of sending
// them, as an API server that times them out.
type refuseCreates struct {
	rt   http.RoundTripper
	left *atomic.Int32
}

func (f refuseCreates) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/allotnodes") && f.left.Add(-1) >= 0 {
		return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader("refused by the test")), Request: req}, nil
	}
	return f.rt.RoundTrip(req)
}

func TestAgentStatusWrite(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "node-s"}}); err != nil {
		t.Fatal(err)
	}
	cnt := &k8senv.Counter{}
	a, err := New(Options{NodeName: "node-s", RESTConfig: cnt.Wrap(env.Config), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	pools := func(used int64) allotv1.NodeIPAMStatus {
		return allotv1.NodeIPAMStatus{Pools: []allotv1.PoolUsage{{Pool: "default", IPv4: &allotv1.FamilyUsage{Used: used, Available: 14}}}}
	}
	check := func(used int64, names string) {
		t.Helper()
		n, err := getNode(c, "node-s")
		if err != nil {
			t.Fatal(err)
		}
		if !equalStatus(n.Status.IPAM, pools(used)) || n.Status.PoolNames != names {
			t.Fatalf("status %+v: want used %d, poolNames %q", n.Status, used, names)
		}
	}
	// Current copy: one update, no patch.
	cur, _ := getNode(c, "node-s")
	if err := a.writeStatus(ctx, cur, pools(1)); err != nil {
		t.Fatal(err)
	}
	check(1, "")
	if s := cnt.Snapshot(); s["PUT allotnodes/status"] != 1 || s["PATCH allotnodes/status"] != 0 {
		t.Fatalf("requests %v: want one status update", s)
	}
	// The operator writes its part of the status after the agent's copy was taken: the
	// update conflicts, the patch lands, the operator's field stays.
	stale, _ := getNode(c, "node-s")
	op, _ := getNode(c, "node-s")
	op.Status.PoolNames = "default"
	if err := c.Status().Update(ctx, op); err != nil {
		t.Fatal(err)
	}
	if err := a.writeStatus(ctx, stale, pools(2)); err != nil {
		t.Fatal(err)
	}
	check(2, "default")
	if s := cnt.Snapshot(); s["PUT allotnodes/status"] != 2 || s["PATCH allotnodes/status"] != 1 {
		t.Fatalf("requests %v: want a second update, refused, then a patch", s)
	}
}
