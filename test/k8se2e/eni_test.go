package k8se2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/daemon"
	"github.com/allot-ipam/allot/core/eni"
	"github.com/allot-ipam/allot/core/eni/eninode"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/plugins/builtin"
	"github.com/allot-ipam/allot/test/ec2fake"
	"github.com/allot-ipam/allot/test/k8senv"
)

// ENI mode end to end: allotd's operator (daemon, leader-elected) runs the ENI engine over
// the aws-eni backend (real aws-sdk-go-v2) against test/ec2fake on 127.0.0.1; allotd agents
// serve spec.ipam.pool to pods through their local API; pods are API objects bound to the
// nodes. Every check of "where an address is" is made against the fake's EC2 state.

// eniEnv is one ENI-mode cluster.
type eniEnv struct {
	t          *testing.T
	env        *k8senv.Env
	c          ctrlclient.Client
	kubeconfig string
	fake       *ec2fake.Server
	url        string
	subnets    []string
	inst       map[string]string // node -> instance ID
	typ        map[string]string // node -> instance type
	nodes      []*node
	byName     map[string]*node
	pods       map[string][]*corev1.Pod // node -> its running pods
	op         *opProc
	plugin     *config.Plugin // set: the operator's backend is this process plugin
	pre        map[string]int // node -> pre-allocate (its own or the default 8)
	prefixes   bool           // cluster.eni.prefixDelegation
	prefixes6  bool           // cluster.eni.ipv6PrefixDelegation
	mu         sync.Mutex
}

// opProc is a running operator daemon.
type opProc struct {
	cancel context.CancelFunc
	done   chan error
}

type eniSetup struct {
	nodes    int
	types    []string
	subnets  []netip.Prefix // first: the nodes' eth0 subnet
	plugin   bool           // the operator's backend is the aws-eni plugin binary (process transport)
	free     int            // fill eth0's subnet with other instances down to this many free addresses
	prefixes bool           // cluster.eni.prefixDelegation
	// ipv6 set: the first subnet's IPv6 block, and cluster.eni.ipv6PrefixDelegation on.
	ipv6 netip.Prefix
}

func newENIEnv(t *testing.T, s eniSetup) *eniEnv {
	daemon.RouteKlog(slog.New(slog.DiscardHandler))
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	e := &eniEnv{t: t, env: env, c: c, kubeconfig: writeKubeconfig(t, env.Config),
		inst: map[string]string{}, typ: map[string]string{}, byName: map[string]*node{},
		pods: map[string][]*corev1.Pod{}, pre: map[string]int{}, prefixes: s.prefixes, prefixes6: s.ipv6.IsValid()}
	e.fake = ec2fake.New(ec2fake.Options{Seed: 5})
	vpc := e.fake.AddVPC(ec2fake.VPC{CIDR: netip.MustParsePrefix("10.0.0.0/8")})
	for i, p := range s.subnets {
		sub := ec2fake.Subnet{VPC: vpc, AZ: "us-east-1a", CIDR: p, Tags: map[string]string{"name": fmt.Sprint("sub-", i)}}
		if i == 0 {
			sub.IPv6CIDR = s.ipv6
		}
		id, err := e.fake.AddSubnet(sub)
		if err != nil {
			t.Fatal(err)
		}
		e.subnets = append(e.subnets, id)
	}
	sg := e.fake.AddSecurityGroup(ec2fake.SecurityGroup{VPC: vpc, Name: "nodes"})
	e.url = ec2fake.Start(t, e.fake)
	if s.plugin {
		e.plugin = buildPlugin(t, e.url)
	}
	ctx := context.Background()
	for i := range s.nodes {
		name := fmt.Sprintf("eni-%02d", i)
		typ := s.types[i%len(s.types)]
		id, err := e.fake.AddInstance(ec2fake.Instance{Type: typ, Subnet: e.subnets[0], SecurityGroups: []string{sg}})
		if err != nil {
			t.Fatal(err)
		}
		e.inst[name], e.typ[name] = id, typ
		// Even nodes say who they are through the Node (providerID, labels), odd ones
		// through their agent's spec.eni.
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if i%2 == 0 {
			n.Spec.ProviderID = "aws:///us-east-1a/" + id
			n.Labels = map[string]string{"node.kubernetes.io/instance-type": typ, "topology.kubernetes.io/zone": "us-east-1a"}
		}
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	// Instances outside the cluster fill eth0's subnet up to s.free addresses, so its last
	// addresses go to eth0s and every new ENI has to go to another subnet.
	if s.free > 0 {
		for e.fake.SubnetFree(e.subnets[0]) > uint64(s.free) {
			if _, err := e.fake.AddInstance(ec2fake.Instance{Type: "t3.medium", Subnet: e.subnets[0], SecurityGroups: []string{sg}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.startOperator("op-1")
	for i := range s.nodes {
		e.startAgent(i)
	}
	return e
}

// buildPlugin builds the aws-eni plugin binary and returns its plugin entry.
func buildPlugin(t *testing.T, url string) *config.Plugin {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "aws-eni")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/allot-ipam/allot/plugins/cloud/awseni/cmd")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the aws-eni plugin: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	return &config.Plugin{
		Name: "aws-eni-process", Kind: "cloud-backend", Transport: "process", Path: bin, SHA256: hex.EncodeToString(sum[:]),
		Args: []string{"--region", "us-east-1", "--ec2-api-endpoint", url, "--aws-qps", "0", "--aws-max-backoff", "20ms"},
		Env:  []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true"},
	}
}

// eniCluster is the cluster.eni section both roles share (fast clocks for the test).
func eniCluster(backend string) config.ClusterENI {
	// These agents run in the test machine's own network namespace with the EC2 fake's
	// ENIs: no host routing there (core/enihost's tests build namespaces for it).
	off := false
	return config.ClusterENI{
		Backend:         backend,
		HostRouting:     &off,
		ReleaseDelay:    300 * time.Millisecond,
		MinPassInterval: 100 * time.Millisecond,
		ResyncInterval:  time.Second,
	}
}

func (e *eniEnv) startOperator(identity string) {
	t := e.t
	t.Helper()
	c := config.Defaults()
	c.Mode = "operator"
	c.HTTP.Address = ""
	c.Cluster.Kubeconfig = e.kubeconfig
	c.Cluster.LeaderElection = config.LeaderElection{Identity: identity, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	backend := "aws-eni"
	if e.plugin != nil {
		backend = e.plugin.Name
		c.Plugins = []config.Plugin{*e.plugin}
	} else {
		// qps 0: the client-side limiter off (the fake's buckets and faults do the
		// throttling); short backoff so retries do not dominate the test's time.
		c.Cloud.Backends = map[string]map[string]any{"aws-eni": {"region": "us-east-1", "endpoint": e.url, "qps": 0, "max-backoff": "20ms"}}
	}
	c.Cluster.ENI = eniCluster(backend)
	c.Cluster.ENI.PrefixDelegation = e.prefixes
	c.Cluster.ENI.IPv6PrefixDelegation = e.prefixes6
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.NewOperator(&c, builtin.Registry(), logger(identity))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &opProc{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- d.Serve(ctx) }()
	e.op = p
	t.Cleanup(e.stopOperator)
}

func (e *eniEnv) stopOperator() {
	if e.op == nil {
		return
	}
	e.op.cancel()
	if err := <-e.op.done; err != nil {
		e.t.Errorf("operator stopped with %v", err)
	}
	e.op = nil
}

func (e *eniEnv) startAgent(i int) {
	t := e.t
	name := fmt.Sprintf("eni-%02d", i)
	c := agentConfig(t, name, e.kubeconfig)
	c.Cluster.PendingTimeout = 40 * time.Second
	c.Cluster.ReclaimGrace = time.Hour // pods are deleted with a CNI DEL here
	c.Cluster.ENI = eniCluster("aws-eni")
	e.pre[name] = 8
	if i%2 == 1 {
		c.Cluster.ENI.Node = config.ENINode{InstanceID: e.inst[name], InstanceType: e.typ[name], Zone: "us-east-1a"}
	}
	if i == 1 {
		four := 4
		c.Cluster.ENI.Node.PreAllocate = &four // a per-node override
		e.pre[name] = 4
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, name: name, cfg: &c}
	n.start()
	t.Cleanup(n.stop)
	e.nodes = append(e.nodes, n)
	e.byName[name] = n
}

// scale makes node n run want pods (ADDs in parallel, so the ones beyond the node's free
// addresses wait as pending), or deletes pods down to want (CNI DEL, then the Pod).
func (e *eniEnv) scale(ctx context.Context, n *node, want int) error {
	e.mu.Lock()
	have := len(e.pods[n.name])
	e.mu.Unlock()
	if want < have {
		e.mu.Lock()
		gone := e.pods[n.name][want:]
		e.pods[n.name] = e.pods[n.name][:want]
		e.mu.Unlock()
		for _, p := range gone {
			if err := n.del(ctx, p); err != nil {
				return err
			}
			if err := e.c.Delete(ctx, p, ctrlclient.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, want-have)
	for i := have; i < want; i++ {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-p%d-%d", n.name, i, time.Now().UnixNano()%1e6)},
			Spec:       corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}
		if err := e.c.Create(ctx, p); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// As a kubelet's ADD comes after the pod reached the node: let the agent's
			// informer see it (else it asks the API server, which under -race with 20
			// agents starting pods at once can be slower than the lookup's deadline).
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			_ = testenv.Poll(cctx, func() (bool, string) {
				return n.d.Agent().CachedGet(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, &corev1.Pod{}) == nil, ""
			})
			ccancel()
			// The kubelet retries an ADD that failed (here: one that outlived its 30 s, as when
			// a loaded machine held up the operator's Lease renewal and with it new ENI
			// addresses); the same container's ADD again is idempotent.
			var err error
			for try := 0; try < 3; try++ {
				if _, err = n.add(ctx, p); err == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
					break
				}
			}
			if err != nil {
				errs <- fmt.Errorf("%s: ADD %s: %w", n.name, p.Name, err)
				return
			}
			e.mu.Lock()
			e.pods[n.name] = append(e.pods[n.name], p)
			e.mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	return nil
}

// scaleAll scales every node in parallel; want gives the target per node index.
// t is the (sub)test calling: FailNow must run in its goroutine.
func (e *eniEnv) scaleAll(t testing.TB, ctx context.Context, want func(i int) int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(e.nodes))
	for i, n := range e.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.scale(ctx, n, want(i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// ec2Addrs is what EC2 (the fake) says the node's instance carries: secondary address, or
// address of a delegated /28, -> ENI, every ENI (first-interface-index 0).
func (e *eniEnv) ec2Addrs(name string) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, en := range e.fake.InstanceENIs(e.inst[name]) {
		for _, a := range en.Secondary {
			out[a] = en.ID
		}
		for _, p := range en.Prefixes4 {
			for a := p.Addr(); p.Contains(a); a = a.Next() {
				out[a] = en.ID
			}
		}
	}
	return out
}

// capacity is how many addresses the node can carry: every ENI slot but eth0 is full size
// (new ENIs go to the roomy subnets); eth0 has what it got before its subnet filled up,
// and room to grow only while the subnet has some.
func (e *eniEnv) capacity(name string) int {
	l := ec2fake.DefaultTypeLimits[e.typ[name]]
	per := l.IPv4PerENI - 1
	eth0 := 0
	for _, en := range e.fake.InstanceENIs(e.inst[name]) {
		if en.Attachment.DeviceIndex == 0 {
			eth0 = len(en.Secondary)
		}
	}
	if e.fake.SubnetFree(e.subnets[0]) > 0 {
		eth0 = per
	}
	return eth0 + (l.ENIs-1)*per
}

// settled: every node's pool is what EC2 says it holds, covers its pods plus its
// pre-allocation (or its instance's capacity), and carries no excess beyond the release
// rule; the handshake is empty.
func (e *eniEnv) settled(release bool) (bool, string) {
	for _, n := range e.nodes {
		an := &allotv1.AllotNode{}
		if err := e.c.Get(context.Background(), types.NamespacedName{Name: n.name}, an); err != nil {
			return false, n.name + ": " + err.Error()
		}
		pool, _ := eninode.Pool(an)
		truth := e.ec2Addrs(n.name)
		if len(pool) != len(truth) {
			return false, fmt.Sprintf("%s: pool has %d addresses, EC2 %d", n.name, len(pool), len(truth))
		}
		for a, ifc := range pool {
			if truth[a] != ifc {
				return false, fmt.Sprintf("%s: pool says %s on %s, EC2 on %q", n.name, a, ifc, truth[a])
			}
		}
		e.mu.Lock()
		pods := len(e.pods[n.name])
		e.mu.Unlock()
		used := len(an.Status.IPAM.Used)
		if used != pods {
			return false, fmt.Sprintf("%s: status.ipam.used %d, pods %d", n.name, used, pods)
		}
		p := eni.Params{PreAllocate: e.pre[n.name]}
		if need := eni.NeededIPs(len(pool), used, p); need > 0 && len(pool) < e.capacity(n.name) {
			return false, fmt.Sprintf("%s: needs %d more (pool %d, used %d)", n.name, need, len(pool), used)
		}
		if release {
			if ex := eni.ExcessIPs(len(pool), used, p); ex > 0 {
				return false, fmt.Sprintf("%s: %d excess (pool %d, used %d, handshake %v)", n.name, ex, len(pool), used, an.Status.IPAM.ReleaseIPs)
			}
			if len(an.Status.IPAM.ReleaseIPs) > 0 {
				return false, fmt.Sprintf("%s: handshake not empty: %v", n.name, an.Status.IPAM.ReleaseIPs)
			}
		}
	}
	return true, ""
}

// checkNoDuplicates checks, against EC2, that every address a pod holds is assigned to its
// node's instance and that no address is held twice or carried by two instances.
func (e *eniEnv) checkNoDuplicates(ctx context.Context) {
	t := e.t
	t.Helper()
	if err := e.fake.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, n := range e.nodes {
		truth := e.ec2Addrs(n.name)
		allocs, err := n.cli.Allocations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, al := range allocs {
			for _, ip := range al.IPs {
				a := netip.MustParsePrefix(ip.Address).Addr()
				if who, dup := held[a.String()]; dup {
					t.Errorf("%s held by %s and %s/%s", a, who, n.name, al.Pod.Name)
				}
				held[a.String()] = n.name + "/" + al.Pod.Name
				if _, ok := truth[a]; !ok && !e.inIPv6Prefix(n.name, a) {
					t.Errorf("%s/%s holds %s, which EC2 does not assign to instance %s", n.name, al.Pod.Name, a, e.inst[n.name])
				}
			}
		}
	}
}

func (e *eniEnv) mutations() int {
	return e.fake.Calls("AssignPrivateIpAddresses") + e.fake.Calls("CreateNetworkInterface") + e.fake.Calls("UnassignPrivateIpAddresses")
}

func TestENIMode(t *testing.T) {
	begin := time.Now()
	e := newENIEnv(t, eniSetup{
		nodes: 20,
		types: []string{"m5.large", "c5.xlarge", "t3.medium", "m5.xlarge"},
		// eth0's subnet keeps 3 free addresses, far short of 20 nodes x 8 pre-allocated:
		// they go to eth0s, and every new ENI must go to the second subnet.
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("10.2.0.0/20")},
		free:    3,
	})
	ctx := context.Background()

	t.Run("pre-allocation, full subnet, new ENIs", func(t *testing.T) {
		eventually(t, "every node pre-allocated", 60*time.Second, func() (bool, string) { return e.settled(true) })
		if free := e.fake.SubnetFree(e.subnets[0]); free != 0 {
			t.Errorf("eth0's subnet still has %d free addresses", free)
		}
		secondEth := 0
		for _, en := range e.fake.ENIs() {
			if en.Attachment != nil && en.Attachment.DeviceIndex > 0 {
				if en.Subnet != e.subnets[1] {
					t.Errorf("%s (device %d) was created in %s, eth0's subnet, which had no room", en.ID, en.Attachment.DeviceIndex, en.Subnet)
				}
				secondEth++
			}
		}
		if secondEth == 0 {
			t.Fatal("no ENI was created")
		}
		// status.eni tells kubectl (and the agent) where each address lives.
		eventually(t, "status.eni of eni-03", 10*time.Second, func() (bool, string) {
			an := &allotv1.AllotNode{}
			if err := e.c.Get(ctx, types.NamespacedName{Name: "eni-03"}, an); err != nil {
				return false, err.Error()
			}
			ok := an.Status.ENI != nil && an.Status.ENI.InterfaceCount > 0 && an.Status.ENI.Interfaces[0].SubnetCIDR != "" && an.Spec.ENI != nil && an.Spec.ENI.InstanceID == e.inst["eni-03"]
			raw, _ := json.Marshal(an)
			return ok, string(raw)
		})
		t.Logf("converged in %s: %d ENIs created in the second subnet, %d EC2 calls", time.Since(begin).Round(time.Millisecond), secondEth, e.fake.Calls(""))
	})

	t.Run("scale up with surge", func(t *testing.T) {
		start := time.Now()
		e.scaleAll(t, ctx, func(i int) int { return 10 })
		eventually(t, "pods served and pre-allocation restored", 60*time.Second, func() (bool, string) { return e.settled(false) })
		e.checkNoDuplicates(ctx)
		// Pods get their subnet's prefix length and router.
		allocs, err := e.byName["eni-00"].cli.Allocations(ctx)
		if err != nil || len(allocs) == 0 {
			t.Fatal(allocs, err)
		}
		for _, al := range allocs {
			ip := al.IPs[0]
			p := netip.MustParsePrefix(ip.Address)
			want := map[bool]string{true: "10.1.0.0/24 10.1.0.1", false: "10.2.0.0/20 10.2.0.1"}[strings.HasPrefix(ip.Address, "10.1.")]
			if got := p.Masked().String() + " " + ip.Gateway; got != want {
				t.Errorf("pod address %+v: subnet and gateway %q, want %q", ip, got, want)
			}
		}
		t.Logf("200 pods served in %s", time.Since(start).Round(time.Millisecond))
	})

	t.Run("scale down releases through the handshake", func(t *testing.T) {
		start := time.Now()
		before := e.fake.Calls("UnassignPrivateIpAddresses")
		// Watch EC2 while releasing: never may a pod's address leave its instance.
		stop := make(chan struct{})
		var watch sync.WaitGroup
		watch.Add(1)
		var violations []string
		go func() {
			defer watch.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				for _, n := range e.nodes {
					allocs, err := n.cli.Allocations(ctx)
					if err != nil {
						continue
					}
					truth := e.ec2Addrs(n.name)
					for _, al := range allocs {
						for _, ip := range al.IPs {
							a := netip.MustParsePrefix(ip.Address).Addr()
							if _, ok := truth[a]; !ok {
								// The allocation list may be older than EC2's state: check again.
								if still, _ := n.cli.Allocations(ctx); holds(still, ip.Address) {
									violations = append(violations, fmt.Sprintf("%s/%s holds %s, unassigned in EC2", n.name, al.Pod.Name, a))
								}
							}
						}
					}
				}
			}
		}()
		e.scaleAll(t, ctx, func(i int) int { return 2 })
		eventually(t, "excess released", 60*time.Second, func() (bool, string) { return e.settled(true) })
		close(stop)
		watch.Wait()
		for _, v := range violations {
			t.Error(v)
		}
		e.checkNoDuplicates(ctx)
		t.Logf("released down to used + pre-allocate in %s with %d UnassignPrivateIpAddresses calls",
			time.Since(start).Round(time.Millisecond), e.fake.Calls("UnassignPrivateIpAddresses")-before)
	})

	t.Run("throttling and 5xx", func(t *testing.T) {
		start := time.Now()
		e.fake.SetRandomFault("", 0.2, "RequestLimitExceeded")
		e.fake.SetRandomFault("", 0.05, "InternalError")
		stats0 := e.fake.Stats()
		e.scaleAll(t, ctx, func(i int) int { return 5 + i%6 })
		eventually(t, "scaled up under faults", 90*time.Second, func() (bool, string) { return e.settled(false) })
		e.checkNoDuplicates(ctx)
		e.scaleAll(t, ctx, func(i int) int { return 1 })
		eventually(t, "scaled down under faults", 90*time.Second, func() (bool, string) { return e.settled(true) })
		e.fake.ClearFaults()
		e.checkNoDuplicates(ctx)
		var faults, calls int
		for action, st := range e.fake.Stats() {
			calls += st.Calls - stats0[action].Calls
			faults += st.Errors["RequestLimitExceeded"] + st.Errors["InternalError"] - stats0[action].Errors["RequestLimitExceeded"] - stats0[action].Errors["InternalError"]
		}
		if faults == 0 {
			t.Fatal("no fault was injected")
		}
		t.Logf("scaled up and down in %s; %d of %d EC2 calls failed (throttled or 5xx)", time.Since(start).Round(time.Millisecond), faults, calls)
	})

	t.Run("operator restart resumes from EC2", func(t *testing.T) {
		e.stopOperator()
		enisBefore := len(e.fake.ENIs())
		m0 := e.mutations()
		e.startOperator("op-2")
		// Nothing changed: the new operator reads EC2 and finds every node served.
		time.Sleep(3 * time.Second) // sleep: checks the new operator makes NO EC2 call meanwhile
		if got := e.mutations() - m0; got != 0 {
			t.Errorf("the restarted operator made %d mutating EC2 calls for a cluster that needed none", got)
		}
		e.scaleAll(t, ctx, func(i int) int { return 10 })
		eventually(t, "converged after restart", 60*time.Second, func() (bool, string) { return e.settled(false) })
		e.checkNoDuplicates(ctx)
		t.Logf("after restart: %d ENIs before, %d after; %d mutating calls to serve 10 pods per node", enisBefore, len(e.fake.ENIs()), e.mutations()-m0)
	})

	t.Run("deleted Node removes its AllotNode", func(t *testing.T) {
		name := "eni-19"
		n := e.byName[name]
		enis := len(e.fake.InstanceENIs(e.inst[name]))
		if err := e.c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		n.stop() // the node is gone; so is its agent
		eventually(t, "AllotNode deleted", 20*time.Second, func() (bool, string) {
			err := e.c.Get(ctx, types.NamespacedName{Name: name}, &allotv1.AllotNode{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		if got := len(e.fake.InstanceENIs(e.inst[name])); got != enis {
			t.Fatalf("ENIs of the deleted node: %d, had %d (ENIs are never removed)", got, enis)
		}
		e.nodes = slices.DeleteFunc(e.nodes, func(x *node) bool { return x.name == name })
	})
	t.Logf("TestENIMode: %s, %d EC2 calls in all", time.Since(begin).Round(time.Millisecond), e.fake.Calls(""))
}

func holds(allocs []api.Allocation, addr string) bool {
	for _, al := range allocs {
		for _, ip := range al.IPs {
			if ip.Address == addr {
				return true
			}
		}
	}
	return false
}

// TestENIModePluginProcess runs the operator's cloud backend as the aws-eni go-plugin
// process (process transport), against the same fake.
func TestENIModePluginProcess(t *testing.T) {
	testenv.Need(t, runtime.GOOS == "linux", "process plugins are tested on linux")
	e := newENIEnv(t, eniSetup{
		nodes:   3,
		types:   []string{"m5.large", "c5.xlarge"},
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")},
		plugin:  true,
	})
	ctx := context.Background()
	eventually(t, "pre-allocated through the plugin", 60*time.Second, func() (bool, string) { return e.settled(true) })
	e.scaleAll(t, ctx, func(i int) int { return 10 })
	eventually(t, "pods served through the plugin", 60*time.Second, func() (bool, string) { return e.settled(false) })
	e.checkNoDuplicates(ctx)
	e.scaleAll(t, ctx, func(i int) int { return 1 })
	eventually(t, "released through the plugin", 60*time.Second, func() (bool, string) { return e.settled(true) })
	e.checkNoDuplicates(ctx)
}
