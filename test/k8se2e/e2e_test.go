// Package k8se2e runs allot's Kubernetes mode end to end on a real kube-apiserver and etcd
// (test/k8senv): the operator (core/operator, leader-elected) and three node agents
// (allotd's agent mode, each with its own API socket and store), pods created as API
// objects bound to the nodes, and CNI ADD/DEL driven through each agent's local API as
// allot-cni drives it.
//
// It skips under -short and when the kube-apiserver/etcd binaries are missing
// (hack/build-kube.sh builds them).
package k8se2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/agent"
	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/client"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/daemon"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/plugins/builtin"
	ciliumannotations "github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
	"github.com/allot-ipam/allot/test/k8senv"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

const annotation = ciliumannotations.DefaultAnnotation

func logger(name string) *slog.Logger {
	if os.Getenv("ALLOT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("who", name)
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func TestMain(m *testing.M) {
	if os.Getenv("ALLOT_TEST_LOG") == "" {
		klog.SetLogger(logr.Discard()) // client-go's reflector and leader-election chatter
	}
	os.Exit(m.Run())
}

func writeKubeconfig(t *testing.T, c *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Host, InsecureSkipTLSVerify: c.Insecure, CertificateAuthorityData: c.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: c.BearerToken, ClientCertificateData: c.CertData, ClientKeyData: c.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// node is one simulated node: an allotd in agent mode with its own socket and store.
type node struct {
	t      *testing.T
	name   string
	cfg    *config.Config
	d      *daemon.AgentDaemon
	cli    *client.Client
	cancel context.CancelFunc
	done   chan error
}

// agentConfig is the agent-mode configuration every test node starts from: its own socket
// and store in a temporary directory, no HTTP listener, fast request debounce.
func agentConfig(t *testing.T, name, kubeconfig string) config.Config {
	t.Helper()
	dir := t.TempDir()
	c := config.Defaults()
	c.Mode = "agent"
	c.Socket = filepath.Join(dir, "allotd.sock")
	c.Store.Path = filepath.Join(dir, "allot.db")
	c.Store.NoSync = true
	c.HTTP.Address = ""
	c.Cluster.NodeName = name
	c.Cluster.Kubeconfig = kubeconfig
	c.Cluster.RequestDebounce = 20 * time.Millisecond
	return c
}

func newNode(t *testing.T, name, kubeconfig string) *node {
	c := agentConfig(t, name, kubeconfig)
	c.Cluster.ReleaseDelay = 300 * time.Millisecond
	c.Cluster.ReclaimGrace = time.Second
	c.Cluster.ReclaimInterval = 200 * time.Millisecond
	c.Cluster.PendingTimeout = 6 * time.Second
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, name: name, cfg: &c}
	n.start()
	t.Cleanup(n.stop)
	return n
}

func (n *node) start() {
	n.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := daemon.NewAgent(ctx, n.cfg, builtin.Registry(), logger(n.name))
	if err != nil {
		cancel()
		n.t.Fatalf("%s: %v", n.name, err)
	}
	n.d, n.cancel, n.done = d, cancel, make(chan error, 1)
	go func() { n.done <- d.Serve(ctx) }()
	n.cli = client.New(n.cfg.Socket)
}

func (n *node) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	if err := <-n.done; err != nil {
		n.t.Errorf("%s stopped with %v", n.name, err)
	}
	n.cli.Close()
	n.cancel = nil
}

// add is a CNI ADD for pod through the node's socket, as allot-cni sends it.
func (n *node) add(ctx context.Context, p *corev1.Pod) (*api.Allocation, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return n.cli.Allocate(ctx, &api.AllocateRequest{
		Owner: api.Owner{ContainerID: "ctr-" + string(p.UID), IfName: "eth0"}, Network: "k8s-pod-network",
		Pod: api.PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)},
	})
}

func (n *node) del(ctx context.Context, p *corev1.Pod) error {
	return n.cli.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: "ctr-" + string(p.UID), IfName: "eth0"}})
}

type cluster struct {
	t     *testing.T
	env   *k8senv.Env
	c     ctrlclient.Client
	nodes []*node
}

func (cl *cluster) pod(ns, name string, nd *node, annotations map[string]string) *corev1.Pod {
	cl.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       corev1.PodSpec{NodeName: nd.name, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if err := cl.c.Create(context.Background(), p); err != nil {
		cl.t.Fatal(err)
	}
	return p
}

func (cl *cluster) allotNode(name string) *allotv1.AllotNode {
	var n allotv1.AllotNode
	_ = cl.c.Get(context.Background(), types.NamespacedName{Name: name}, &n)
	return &n
}

func eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

func inBlocks(n *allotv1.AllotNode, pool, addr string) bool {
	a := netip.MustParsePrefix(addr).Addr()
	for _, b := range agent.Blocks(n)[pool] {
		if b.Contains(a) {
			return true
		}
	}
	return false
}

// checkInvariants: no block held by two nodes, no address held twice in the cluster, every
// address inside a block its node holds.
func (cl *cluster) checkInvariants(ctx context.Context) {
	t := cl.t
	t.Helper()
	blocks := map[netip.Prefix]string{}
	addrs := map[string]string{}
	for _, nd := range cl.nodes {
		an := cl.allotNode(nd.name)
		for pool, bs := range agent.Blocks(an) {
			for _, b := range bs {
				for o, who := range blocks {
					if o.Overlaps(b) {
						t.Errorf("block %s (%s/%s) overlaps %s (%s)", b, nd.name, pool, o, who)
					}
				}
				blocks[b] = nd.name + "/" + pool
			}
		}
		allocs, err := nd.cli.Allocations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, al := range allocs {
			for _, ip := range al.IPs {
				if who, dup := addrs[ip.Address]; dup {
					t.Errorf("%s held by %s and %s/%s", ip.Address, who, nd.name, al.Owner)
				}
				addrs[ip.Address] = nd.name + "/" + al.Owner.String()
				if !inBlocks(an, ip.Pool, ip.Address) {
					t.Errorf("%s (%s/%s) is outside the node's blocks of pool %s", ip.Address, nd.name, al.Pod.Name, ip.Pool)
				}
			}
		}
	}
}

func TestThreeNodes(t *testing.T) {
	// klog is process-global: route it before the operator and agents start goroutines that
	// read it (allotd runs one role per process, this test runs them all in one).
	daemon.RouteKlog(slog.New(slog.DiscardHandler))
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kubeconfig := writeKubeconfig(t, env.Config)

	for _, p := range []*allotv1.IPPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: allotv1.IPPoolSpec{
			IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.10.0.0/24"}, MaskSize: 28},
			IPv6: &allotv1.PoolFamily{CIDRs: []string{"fd00:10::/116"}, MaskSize: 124}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "blue"}, Spec: allotv1.IPPoolSpec{
			IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.20.0.0/24"}, MaskSize: 28}}},
		// One block of 2 addresses (a /31, RFC 3021): exhausted by the 3rd pod until a CIDR
		// is added.
		{ObjectMeta: metav1.ObjectMeta{Name: "tiny"}, Spec: allotv1.IPPoolSpec{
			IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.40.0.0/31"}, MaskSize: 31}}},
	} {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "team-blue", Annotations: map[string]string{annotation: "blue"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "team-tiny", Annotations: map[string]string{annotation: "tiny"}}},
	} {
		if err := c.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 3; i++ {
		if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}

	// The operator, leader-elected on a Lease, in-process.
	var opWG sync.WaitGroup
	opCtx, opCancel := context.WithCancel(ctx)
	opWG.Add(1)
	go func() {
		defer opWG.Done()
		err := operator.Run(opCtx, operator.Options{
			RESTConfig: env.Config, Identity: "op-1", Logger: logger("operator"),
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
			StatusDelay: 100 * time.Millisecond,
		})
		if err != nil {
			t.Errorf("operator: %v", err)
		}
	}()
	defer func() { opCancel(); opWG.Wait() }()

	cl := &cluster{t: t, env: env, c: c}
	for i := 1; i <= 3; i++ {
		cl.nodes = append(cl.nodes, newNode(t, fmt.Sprintf("node-%d", i), kubeconfig))
	}
	n1, n2, n3 := cl.nodes[0], cl.nodes[1], cl.nodes[2]

	// Every agent asks for the default pool's pre-allocation and gets a block per family.
	for _, nd := range cl.nodes {
		eventually(t, nd.name+" default blocks", 30*time.Second, func() (bool, string) {
			an := cl.allotNode(nd.name)
			return len(agent.Blocks(an)["default"]) == 2, fmt.Sprintf("%+v", an.Spec.IPAM.Pools)
		})
	}

	t.Run("default pool", func(t *testing.T) {
		for i, nd := range cl.nodes {
			p := cl.pod("plain", fmt.Sprintf("web-%d", i), nd, nil)
			a, err := nd.add(ctx, p)
			if err != nil {
				t.Fatalf("%s: %v", nd.name, err)
			}
			if len(a.IPs) != 2 || a.IPs[0].Pool != "default" || a.IPs[1].Pool != "default" {
				t.Fatalf("%s: %+v", nd.name, a.IPs)
			}
			if an := cl.allotNode(nd.name); !inBlocks(an, "default", a.IPs[0].Address) || !inBlocks(an, "default", a.IPs[1].Address) {
				t.Fatalf("%s: %v outside its blocks %v", nd.name, a.IPs, agent.Blocks(an))
			}
		}
	})

	t.Run("namespace annotation", func(t *testing.T) {
		p := cl.pod("team-blue", "api-0", n2, nil)
		a, err := n2.add(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.IPs) != 1 || a.IPs[0].Pool != "blue" || !strings.HasPrefix(a.IPs[0].Address, "10.20.0.") {
			t.Fatalf("got %+v", a.IPs)
		}
	})

	t.Run("pod annotation", func(t *testing.T) {
		p := cl.pod("team-blue", "api-1", n2, map[string]string{annotation: "default"})
		a, err := n2.add(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if a.IPs[0].Pool != "default" {
			t.Fatalf("got %+v", a.IPs)
		}
		// Only at creation: the same ADD after the annotation changed returns the same.
		p.Annotations[annotation] = "blue"
		if err := c.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		b, err := n2.add(ctx, p)
		if err != nil || b.IPs[0].Address != a.IPs[0].Address {
			t.Fatalf("repeated ADD: %+v %v", b, err)
		}
	})

	var tinyPods []*corev1.Pod
	t.Run("exhaustion then growth", func(t *testing.T) {
		for i := range 2 {
			p := cl.pod("team-tiny", fmt.Sprintf("t-%d", i), n3, nil)
			if _, err := n3.add(ctx, p); err != nil {
				t.Fatalf("pod %d: %v", i, err)
			}
			tinyPods = append(tinyPods, p)
		}
		// The 3rd waits as pending: the node asks for 3, the pool has no second block.
		p7 := cl.pod("team-tiny", "t-2", n3, nil)
		tinyPods = append(tinyPods, p7)
		type res struct {
			a   *api.Allocation
			err error
		}
		done := make(chan res, 1)
		begin := time.Now()
		go func() { a, err := n3.add(ctx, p7); done <- res{a, err} }()
		eventually(t, "request for 3 tiny addresses", 10*time.Second, func() (bool, string) {
			an := cl.allotNode("node-3")
			for _, r := range an.Spec.IPAM.Pools.Requested {
				if r.Pool == "tiny" && r.Needed.IPv4 == 3 {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", an.Spec.IPAM.Pools.Requested)
		})
		select {
		case r := <-done:
			t.Fatalf("the 3rd ADD returned before the pool grew: %+v %v", r.a, r.err)
		case <-time.After(300 * time.Millisecond):
		}
		// The pool grows at run time; the operator hands the new block; the ADD completes.
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			var pool allotv1.IPPool
			if err := c.Get(ctx, types.NamespacedName{Name: "tiny"}, &pool); err != nil {
				return err
			}
			pool.Spec.IPv4.CIDRs = append(pool.Spec.IPv4.CIDRs, "10.40.0.2/31")
			return c.Update(ctx, &pool)
		})
		if err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			var pool allotv1.IPPool
			_ = c.Get(ctx, types.NamespacedName{Name: "tiny"}, &pool)
			an := cl.allotNode("node-3")
			t.Fatalf("the 3rd ADD after growth: %v\npool %+v %+v\nnode %+v %+v", r.err, pool.Spec.IPv4, pool.Status, an.Spec, an.Status)
		}
		if r.a.IPs[0].Address != "10.40.0.2/31" {
			t.Fatalf("3rd pod got %+v", r.a.IPs)
		}
		t.Logf("pending ADD served %s after the pool grew (waited %s in all)", r.a.IPs[0].Address, time.Since(begin).Round(time.Millisecond))
	})

	t.Run("exhausted pool times out clearly", func(t *testing.T) {
		for i := 3; i < 4; i++ {
			p := cl.pod("team-tiny", fmt.Sprintf("t-%d", i), n3, nil)
			if _, err := n3.add(ctx, p); err != nil {
				t.Fatalf("pod %d: %v", i, err)
			}
			tinyPods = append(tinyPods, p)
		}
		p := cl.pod("team-tiny", "t-4", n3, nil)
		begin := time.Now()
		_, err := n3.add(ctx, p)
		if api.CodeOf(err) != api.CodeExhausted {
			t.Fatalf("got %v (%v)", err, api.CodeOf(err))
		}
		want := `pool "tiny": no free IPv4 address on node node-3; requested a new block from the operator, none arrived within 6s`
		if err.Error() != want {
			t.Fatalf("error\n got %q\nwant %q", err, want)
		}
		t.Logf("exhausted ADD failed after %s: %v", time.Since(begin).Round(time.Millisecond), err)
	})

	t.Run("blocks released", func(t *testing.T) {
		for _, p := range tinyPods {
			if err := n3.del(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "tiny blocks given back by node-3", 15*time.Second, func() (bool, string) {
			an := cl.allotNode("node-3")
			_, held := agent.Blocks(an)["tiny"]
			return !held, fmt.Sprintf("%+v", an.Spec.IPAM.Pools)
		})
		// ... and the operator can hand them to another node.
		p := cl.pod("team-tiny", "t-on-1", n1, nil)
		a, err := n1.add(ctx, p)
		if err != nil || !strings.HasPrefix(a.IPs[0].Address, "10.40.0.") {
			t.Fatalf("tiny on node-1: %+v %v", a, err)
		}
	})

	t.Run("agent restart reclaims deleted pods", func(t *testing.T) {
		keep := cl.pod("plain", "keep", n1, nil)
		gone := cl.pod("plain", "gone", n1, nil)
		ak, err := n1.add(ctx, keep)
		if err != nil {
			t.Fatal(err)
		}
		ag, err := n1.add(ctx, gone)
		if err != nil {
			t.Fatal(err)
		}
		n1.stop()
		if err := c.Delete(ctx, gone, ctrlclient.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		n1.start()
		eventually(t, "the deleted pod's addresses reclaimed", 20*time.Second, func() (bool, string) {
			allocs, err := n1.cli.Allocations(ctx)
			if err != nil {
				return false, err.Error()
			}
			var pods []string
			for _, al := range allocs {
				pods = append(pods, al.Pod.Name)
			}
			return !slices.Contains(pods, "gone") && slices.Contains(pods, "keep"), fmt.Sprint(pods)
		})
		// The kept pod still holds its addresses, and nobody else gets them.
		again, err := n1.add(ctx, keep)
		if err != nil || again.IPs[0].Address != ak.IPs[0].Address {
			t.Fatalf("kept pod after restart: %+v %v", again, err)
		}
		t.Logf("reclaimed %v of deleted pod", ag.IPs)
	})

	t.Run("API server restart", func(t *testing.T) {
		early := cl.pod("plain", "during-outage", n2, nil)
		eventually(t, "pod in node-2's cache", 10*time.Second, func() (bool, string) {
			var p corev1.Pod
			err := n2.d.Agent().CachedGet(ctx, types.NamespacedName{Namespace: "plain", Name: "during-outage"}, &p)
			return err == nil, fmt.Sprint(err)
		})
		env.StopAPIServer()
		// CNI keeps working for pools the node holds.
		a, err := n2.add(ctx, early)
		if err != nil {
			t.Fatalf("ADD with the API server down: %v", err)
		}
		t.Logf("ADD with the API server down: %v", a.IPs)
		time.Sleep(5 * time.Second) // sleep: past the operator's real RenewDeadline: it loses the Lease
		if err := env.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		// Agents and operator recover: a pool node-1 holds no block of is served there. (The
		// pod is created first and seen in node-1's cache: informers have reconnected.)
		p := cl.pod("team-blue", "after-outage", n1, nil)
		eventually(t, "node-1's informers reconnected", 60*time.Second, func() (bool, string) {
			var q corev1.Pod
			err := n1.d.Agent().CachedGet(ctx, types.NamespacedName{Namespace: "team-blue", Name: "after-outage"}, &q)
			return err == nil, fmt.Sprint(err)
		})
		// The operator leads again only after its Lease is re-acquired, which a loaded machine
		// can stretch past the agent's wait for a block; the kubelet retries a failed ADD, and
		// so does this test.
		begin := time.Now()
		var b *api.Allocation
		eventually(t, "a blue address on node-1 after the restart", 90*time.Second, func() (bool, string) {
			var err error
			b, err = n1.add(ctx, p)
			return err == nil, fmt.Sprint(err)
		})
		t.Logf("blue block for node-1 after the restart in %s", time.Since(begin).Round(time.Millisecond))
		if b.IPs[0].Pool != "blue" {
			t.Fatalf("ADD after the restart: %+v", b)
		}
		for i, nd := range cl.nodes {
			p := cl.pod("plain", fmt.Sprintf("after-%d", i), nd, nil)
			if _, err := nd.add(ctx, p); err != nil {
				t.Fatalf("%s after the restart: %v", nd.name, err)
			}
		}
		eventually(t, "node-2's usage published after the restart", 20*time.Second, func() (bool, string) {
			allocs, _ := n2.cli.Allocations(ctx)
			var used int64
			for _, al := range allocs {
				for _, ip := range al.IPs {
					if ip.Pool == "default" && !strings.Contains(ip.Address, ":") {
						used++
					}
				}
			}
			for _, u := range cl.allotNode("node-2").Status.IPAM.Pools {
				if u.Pool == "default" && u.IPv4 != nil && u.IPv4.Used == used {
					return true, ""
				}
			}
			return false, fmt.Sprintf("want %d used: %+v", used, cl.allotNode("node-2").Status.IPAM.Pools)
		})
	})

	t.Run("invariants", func(t *testing.T) { cl.checkInvariants(ctx) })

	// The operator answers requests in addresses the agents can hand out: a /28 gives 14, a
	// /124 15 (network/broadcast and subnet-router anycast are never handed out).
	t.Run("requests covered in usable addresses", func(t *testing.T) {
		for _, nd := range cl.nodes {
			eventually(t, nd.name+" requests covered", 10*time.Second, func() (bool, string) {
				an := cl.allotNode(nd.name)
				for _, r := range an.Spec.IPAM.Pools.Requested {
					var have [2]int64
					for _, b := range agent.Blocks(an)[r.Pool] {
						i := 0
						if !b.Addr().Is4() {
							i = 1
						}
						have[i] += usableIn(b)
					}
					if have[0] < r.Needed.IPv4 || have[1] < r.Needed.IPv6 {
						return false, fmt.Sprintf("pool %s: need %+v, blocks give %v (%v)", r.Pool, r.Needed, have, agent.Blocks(an)[r.Pool])
					}
				}
				return true, ""
			})
		}
	})
}

// usableIn is what core/allocator hands out of a block.
func usableIn(p netip.Prefix) int64 {
	hb := p.Addr().BitLen() - p.Bits()
	n := int64(1) << min(hb, 62)
	if hb >= 2 {
		if p.Addr().Is4() {
			n -= 2
		} else {
			n--
		}
	}
	return n
}
