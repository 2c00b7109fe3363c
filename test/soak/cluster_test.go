package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/allot-ipam/allot/core/agent"
	"github.com/allot-ipam/allot/core/api/client"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/k8senv"
)

const (
	clusterNodes     = 3
	clusterOperators = 2
	clusterWorkers   = 8
	// podsPerWorker bounds each worker's live pods: about 27 per node, several blocks each.
	podsPerWorker = 10
	// storageRestartEvery spaces the kube-apiserver and etcd restarts of a long soak; a
	// short one gets one of each (at 30% and 60% of its time).
	storageRestartEvery = 150 * time.Second
	leaseNamespace      = "kube-system"
	leaseName           = "allot-operator"
	apiTimeout          = 5 * time.Second
)

// clusterNode is one simulated node: an allotd agent process with its own socket and store.
type clusterNode struct {
	name string
	p    *proc
	tg   network
	cli  *client.Client
}

// operatorProc is an allotd operator process; each start campaigns under a new identity,
// as a new pod of the Deployment would.
type operatorProc struct {
	p  *proc
	mu sync.Mutex
	id string
}

func (op *operatorProc) identity() string {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.id
}

// podCtr is a live pod of a worker and its container.
type podCtr struct {
	pod  *corev1.Pod
	id   string
	args string
}

// TestSoakCluster: agents and operators as allotd processes on a real API server, pods
// added and deleted while agents and the operator leader are SIGKILLed and kube-apiserver
// and etcd restart.
func TestSoakCluster(t *testing.T) {
	need(t)
	if _, err := k8senv.BinDir(); err != nil {
		testenv.Missing(t, err.Error())
	}
	t.Parallel()
	kenv := k8senv.Start(t)
	c, err := kenv.Client()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := kenv.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	hard, cancelHard := context.WithTimeout(context.Background(), env.duration+settle+2*time.Minute)
	defer cancelHard()

	// One dual-stack pool in small blocks (27 IPv4 and 31 IPv6 pod addresses per block), so
	// pods coming and going make nodes ask for blocks and give them back.
	objs := []ctrlclient.Object{
		&allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: allotv1.IPPoolSpec{
			IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.60.0.0/16"}, MaskSize: 27},
			IPv6: &allotv1.PoolFamily{CIDRs: []string{"fd00:60::/112"}, MaskSize: 123}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "soak"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}},
	}
	for i := 1; i <= clusterNodes; i++ {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i)}})
	}
	for _, o := range objs {
		if err := c.Create(hard, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}

	f := &figures{name: "cluster", duration: env.duration, workers: clusterWorkers, kills: map[string]int{}, restarts: map[string]int{}}
	var fMu sync.Mutex // f.crashes, f.failover, f.apiOutage, f.dupBlocks: written by several goroutines
	// Any exit not caused by the chaos is a failure, including an agent (re)started while the
	// API server is unreachable: it serves from its node store instead (core/agent/local.go).
	onCrash := func(p *proc, err error) {
		fMu.Lock()
		f.crashes++
		fMu.Unlock()
		t.Errorf("%s exited by itself: %v\n%s", p.name, err, p.tail(30))
	}

	var ops []*operatorProc
	for i := 1; i <= clusterOperators; i++ {
		op := &operatorProc{}
		cfgPath := filepath.Join(dir, fmt.Sprintf("operator-%d.yaml", i))
		op.p = newProc(t, fmt.Sprintf("operator-%d", i), env.allotd, filepath.Join(dir, fmt.Sprintf("operator-%d.log", i)), "--config", cfgPath)
		op.p.beforeStart = func(gen int) error {
			id := fmt.Sprintf("op-%d-g%d", i, gen)
			op.mu.Lock()
			op.id = id
			op.mu.Unlock()
			// Leases of a few seconds, so a killed leader is replaced within the soak.
			cfg := fmt.Sprintf(`mode: operator
http: {address: ""}
log: {level: info, format: text}
cluster:
  kubeconfig: %s
  leaderElection: {namespace: %s, name: %s, identity: %s, leaseDuration: 4s, renewDeadline: 3s, retryPeriod: 500ms}
`, kubeconfig, leaseNamespace, leaseName, id)
			return os.WriteFile(cfgPath, []byte(cfg), 0o600)
		}
		op.p.onCrash = onCrash
		if err := op.p.start(); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
	}

	var nodes []*clusterNode
	for i := 1; i <= clusterNodes; i++ {
		name := fmt.Sprintf("node-%d", i)
		nd := filepath.Join(dir, name)
		if err := os.MkdirAll(nd, 0o755); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(nd, "allotd.sock")
		cfgPath := filepath.Join(nd, "allotd.yaml")
		// The pending timeout stays under the CNI timeout: an ADD waiting for a block while
		// no operator leads fails with a clear error rather than a timeout.
		cfg := fmt.Sprintf(`mode: agent
socket: %s
store: {path: %s}
http: {address: ""}
log: {level: info, format: text}
cni: {uninstall: never}
cluster:
  nodeName: %s
  kubeconfig: %s
  requestDebounce: 50ms
  pendingTimeout: 12s
  releaseDelay: 2s
  reclaimGrace: 5s
  reclaimInterval: 2s
`, sock, filepath.Join(nd, "allot.db"), name, kubeconfig)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		n := &clusterNode{name: name, tg: network{name: "soak", socket: sock}, cli: client.New(sock)}
		defer n.cli.Close()
		n.p = newProc(t, "agent "+name, env.allotd, filepath.Join(nd, "allotd.log"), "--config", cfgPath)
		n.p.onCrash = onCrash
		if err := n.p.start(); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	// Up: every node has its first blocks (the operator leads, the agents asked).
	for _, n := range nodes {
		if err := serving(hard, n.tg.socket); err != nil {
			t.Fatalf("%s does not serve: %v\n%s", n.name, err, n.p.tail(30))
		}
		wctx, cancel := context.WithTimeout(hard, 2*time.Minute)
		err := waitFor(wctx, func() (bool, string) {
			var an allotv1.AllotNode
			if err := c.Get(wctx, types.NamespacedName{Name: n.name}, &an); err != nil {
				return false, err.Error()
			}
			return len(agent.Blocks(&an)["default"]) == 2, fmt.Sprintf("%+v", an.Spec.IPAM.Pools)
		})
		cancel()
		if err != nil {
			t.Fatalf("%s has no blocks: %v\n%s", n.name, err, n.p.tail(30))
		}
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %s of chaos", seed, env.duration)
	l, o := newLedger(), newOutages()
	ctx, cancel := context.WithTimeout(hard, env.duration)
	defer cancel()
	var wg sync.WaitGroup
	var bg sync.WaitGroup // failover clocks

	// Chaos. Agents and the operator leader are SIGKILLed and started again at once;
	// kube-apiserver and etcd are stopped and started (planned, so even a short soak has
	// one of each).
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 0))
		start := time.Now()
		nextAPI := start.Add(env.duration * 3 / 10)
		nextEtcd := start.Add(env.duration * 6 / 10)
		restart := func(what string, fn func(context.Context) error) {
			f.restarts[what]++
			took := restartStorage(t, hard, c, fn)
			fMu.Lock()
			f.apiOutage = max(f.apiOutage, took)
			fMu.Unlock()
		}
		for {
			wait := min(between(rng, time.Second, 5*time.Second), time.Until(nextAPI), time.Until(nextEtcd))
			if !sleep(ctx, max(wait, 0)) {
				return
			}
			now := time.Now()
			switch {
			case !now.Before(nextAPI):
				nextAPI = nextAPI.Add(storageRestartEvery)
				restart("kube-apiserver", kenv.RestartAPIServer)
			case !now.Before(nextEtcd):
				nextEtcd = nextEtcd.Add(storageRestartEvery)
				restart("etcd", kenv.RestartEtcd)
			default:
				if rng.IntN(100) < 40 {
					if op := leader(hard, c, ops); op != nil {
						old := op.identity()
						op.p.kill()
						killed := time.Now()
						f.kills["operator leader"]++
						if err := op.p.start(); err != nil {
							t.Error(err)
							return
						}
						f.restarts["operator"]++
						bg.Add(1)
						go func() {
							defer bg.Done()
							if d, ok := failover(hard, c, old, killed); ok {
								fMu.Lock()
								f.failover = max(f.failover, d)
								fMu.Unlock()
							}
						}()
						continue
					}
				}
				n := nodes[rng.IntN(len(nodes))]
				n.p.kill()
				f.kills["agent"]++
				o.down(n.name, time.Now())
				if err := n.p.start(); err != nil {
					t.Error(err)
					return
				}
				f.restarts["agent"]++
			}
		}
	}()

	// Invariants, every second: each agent's list against the ledger; blocks of all nodes.
	dupBlocks := map[string]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sleep(ctx, time.Second) {
			for _, n := range nodes {
				before := l.snapshot(n.name)
				allocs, err := allocations(ctx, n.cli, n.tg.name)
				if err != nil {
					continue // killed meanwhile
				}
				l.verify(n.name, before, allocs)
			}
			checkBlocks(ctx, c, dupBlocks)
		}
	}()

	for w := range clusterWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := nodes[w%len(nodes)]
			rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
			rt := &runtime{t: t, l: l, o: o, tg: n.tg, node: n.name, abandon: func() bool { return rng.IntN(4) == 0 }}
			var mine []podCtr
			for i := 0; ctx.Err() == nil; i++ {
				if k := len(mine); k > 0 && (k >= podsPerWorker || rng.IntN(100) < 45) {
					j := rng.IntN(k)
					pc := mine[j]
					mine = append(mine[:j], mine[j+1:]...)
					// The kubelet tears the sandbox down, then the pod object goes.
					rt.del(hard, pc.id, pc.args)
					deletePod(t, hard, c, pc.pod)
					continue
				}
				pod := createPod(ctx, c, fmt.Sprintf("w%d-%d", w, i), n.name)
				if pod == nil {
					break // the chaos is over
				}
				added := false
				for attempt := 0; !added && ctx.Err() == nil; attempt++ {
					id := fmt.Sprintf("ctr-%s-%d", pod.Name, attempt)
					args := fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s",
						pod.Namespace, pod.Name, id, pod.UID)
					if added = rt.add(hard, id, args); added {
						mine = append(mine, podCtr{pod: pod, id: id, args: args})
					} else {
						sleep(ctx, 200*time.Millisecond)
					}
				}
				if !added {
					deletePod(t, hard, c, pod)
				}
			}
		}()
	}
	wg.Wait()
	bg.Wait()

	// After the chaos: every agent serves; a GC per node with its live containers as valid
	// attachments; nothing else may remain, and no block may be on two nodes.
	for _, n := range nodes {
		if err := serving(hard, n.tg.socket); err != nil {
			t.Fatalf("%s does not serve after the chaos: %v", n.name, err)
		}
		freed, leaks, remaining := finalGC(t, hard, l, n.name, n.tg, n.cli)
		f.gcFreed += freed
		f.leaks += leaks
		f.finalAlloc += remaining
	}
	checkBlocks(hard, c, dupBlocks)
	for b := range dupBlocks {
		t.Errorf("block on two nodes: %s", b)
	}
	f.dupBlocks = len(dupBlocks)
	f.fill(l, o)
	report(f)
	checkLedger(t, l)
	t.Logf("cluster: %d ADDs, %d DELs, kills %v, restarts %v, %d containers live at the end, %d freed by GC, %d leaks",
		f.adds, f.dels, f.kills, f.restarts, f.finalAlloc, f.gcFreed, f.leaks)
	if f.adds == 0 || sum(f.kills) == 0 {
		t.Errorf("the soak did nothing: %d ADDs, %d kills", f.adds, sum(f.kills))
	}
}

// restartStorage restarts kube-apiserver or etcd and returns how long the API server did not
// serve a read: until the restart returned and a Get went through.
func restartStorage(t *testing.T, ctx context.Context, c ctrlclient.Client, restart func(context.Context) error) time.Duration {
	begin := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := restart(rctx); err != nil {
		t.Errorf("restart: %v", err)
		return time.Since(begin)
	}
	err := waitFor(rctx, func() (bool, string) {
		gctx, cancel := context.WithTimeout(rctx, apiTimeout)
		defer cancel()
		err := c.Get(gctx, types.NamespacedName{Name: "soak"}, &corev1.Namespace{})
		return err == nil, fmt.Sprint(err)
	})
	if err != nil {
		t.Errorf("the API server does not serve after the restart: %v", err)
	}
	return time.Since(begin)
}

// leader is the operator process holding the Lease, nil if none or the API server is down.
func leader(ctx context.Context, c ctrlclient.Client, ops []*operatorProc) *operatorProc {
	holder, _, err := leaseHolder(ctx, c)
	if err != nil || holder == "" {
		return nil
	}
	for _, op := range ops {
		if op.identity() == holder {
			return op
		}
	}
	return nil
}

func leaseHolder(ctx context.Context, c ctrlclient.Client) (string, time.Time, error) {
	gctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var l coordinationv1.Lease
	if err := c.Get(gctx, types.NamespacedName{Namespace: leaseNamespace, Name: leaseName}, &l); err != nil {
		return "", time.Time{}, err
	}
	var renew time.Time
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	if l.Spec.HolderIdentity == nil {
		return "", renew, nil
	}
	return *l.Spec.HolderIdentity, renew, nil
}

// failover is how long after killed the Lease was held by someone other than old.
func failover(ctx context.Context, c ctrlclient.Client, old string, killed time.Time) (time.Duration, bool) {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := waitFor(wctx, func() (bool, string) {
		h, _, err := leaseHolder(wctx, c)
		return err == nil && h != "" && h != old, fmt.Sprintf("holder %q %v", h, err)
	})
	return time.Since(killed), err == nil
}

// checkBlocks records every pair of nodes whose blocks overlap.
func checkBlocks(ctx context.Context, c ctrlclient.Client, dups map[string]bool) {
	lctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var list allotv1.AllotNodeList
	if err := c.List(lctx, &list); err != nil {
		return // the API server is restarting
	}
	type held struct {
		node string
		b    netip.Prefix
	}
	var all []held
	for i := range list.Items {
		for _, bs := range agent.Blocks(&list.Items[i]) {
			for _, b := range bs {
				all = append(all, held{list.Items[i].Name, b})
			}
		}
	}
	slices.SortFunc(all, func(a, b held) int { return a.b.Addr().Compare(b.b.Addr()) })
	for i := range all {
		for j := i + 1; j < len(all) && all[j].b.Overlaps(all[i].b); j++ {
			if all[i].node != all[j].node {
				dups[fmt.Sprintf("%s (%s) and %s (%s)", all[i].b, all[i].node, all[j].b, all[j].node)] = true
			}
		}
	}
}

// createPod creates a pod bound to node, retrying while the API server is down; nil when ctx
// ends first.
func createPod(ctx context.Context, c ctrlclient.Client, name, node string) *corev1.Pod {
	for {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "soak", Name: name},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}
		cctx, cancel := context.WithTimeout(ctx, apiTimeout)
		err := c.Create(cctx, p)
		if apierrors.IsAlreadyExists(err) {
			// An earlier attempt went through although its answer was lost.
			err = c.Get(cctx, ctrlclient.ObjectKeyFromObject(p), p)
		}
		cancel()
		if err == nil {
			return p
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return nil
		}
	}
}

// deletePod deletes a pod (at once: there is no kubelet), retrying while the API server is
// down.
func deletePod(t *testing.T, ctx context.Context, c ctrlclient.Client, p *corev1.Pod) {
	for {
		dctx, cancel := context.WithTimeout(ctx, apiTimeout)
		err := c.Delete(dctx, p, ctrlclient.GracePeriodSeconds(0))
		cancel()
		if err == nil || apierrors.IsNotFound(err) {
			return
		}
		if !sleep(ctx, 200*time.Millisecond) {
			t.Errorf("pod %s/%s not deleted: %v", p.Namespace, p.Name, errors.Join(err, ctx.Err()))
			return
		}
	}
}
