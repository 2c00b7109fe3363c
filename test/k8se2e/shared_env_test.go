package k8se2e

// The harness of the shared-pool tests (SharedIPPool, Spiderpool style): agents serving
// shared networks on a real API server, and the real allot-cni binary exec'd against an
// agent's socket with the CNI environment and network configuration a runtime (or Multus)
// would give it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/daemon"
	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/allot-ipam/allot/test/k8senv"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

// Shared networks the agents serve from SharedIPPools (cluster.sharedPools).
const (
	netUnderlay = "underlay" // the pod's first interface (eth0)
	netStorage  = "storage"  // a second, Multus-style interface (net1)
)

// Spiderpool's annotations, read by the spiderpool-priority policy.
const (
	annoIPPool    = "ipam.spidernet.io/ippool"
	annoIPPools   = "ipam.spidernet.io/ippools"
	annoNSDefV4   = "ipam.spidernet.io/default-ipv4-ippool"
	annoNSDefV6   = "ipam.spidernet.io/default-ipv6-ippool"
	annoMultusNet = "k8s.v1.cni.cncf.io/networks"
)

// sharedEnv is a real API server, agents serving the shared networks, and allot-cni.
type sharedEnv struct {
	t     *testing.T
	env   *k8senv.Env
	c     ctrlclient.Client
	kc    string
	cni   string // the allot-cni binary
	nodes map[string]*node
}

// newSharedEnv starts the API server, creates the Nodes (with labels) and builds allot-cni.
// Agents are started with startAgent.
func newSharedEnv(t *testing.T, nodeLabels map[string]map[string]string) *sharedEnv {
	t.Helper()
	// klog is process-global: route it before agents and operator start goroutines reading it.
	daemon.RouteKlog(slog.New(slog.DiscardHandler))
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	se := &sharedEnv{t: t, env: env, c: c, kc: writeKubeconfig(t, env.Config), cni: buildCmd(t, t.TempDir(), "allot-cni"), nodes: map[string]*node{}}
	for _, name := range sortedKeys(nodeLabels) {
		if err := c.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: nodeLabels[name]}}); err != nil {
			t.Fatal(err)
		}
	}
	return se
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sharedConfig is an agent configuration serving the shared networks; the node's block
// pools are left as the default configuration has them.
func sharedConfig(t *testing.T, name, kubeconfig string) *config.Config {
	t.Helper()
	c := agentConfig(t, name, kubeconfig)
	c.Cluster.ReclaimGrace = time.Second
	c.Cluster.ReclaimInterval = 200 * time.Millisecond
	c.Cluster.PendingTimeout = 3 * time.Second
	c.Cluster.SharedPools.Networks = []string{netUnderlay, netStorage}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &c
}

// startAgent starts allotd in agent mode for node name, in-process.
func (se *sharedEnv) startAgent(name string) *node {
	se.t.Helper()
	n := &node{t: se.t, name: name, cfg: sharedConfig(se.t, name, se.kc)}
	n.start()
	se.t.Cleanup(n.stop)
	se.nodes[name] = n
	eventually(se.t, name+": shared pools synced", 20*time.Second, func() (bool, string) {
		return n.d.Agent().Shared().Synced(), "not synced"
	})
	return n
}

// with returns the environment reporting to t (a subtest): helpers fail the test they are
// called for, never a parent.
func (se *sharedEnv) with(t *testing.T) *sharedEnv {
	c := *se
	c.t = t
	return &c
}

// cniCall is one exec of allot-cni.
type cniCall struct {
	cmd     string // ADD, DEL, CHECK
	node    *node
	pod     *corev1.Pod
	ifName  string // default eth0
	network string // default underlay
	// ipam holds extra keys of the ipam block (default_ipv4_ippool, ...).
	ipam map[string]any
	// containerID defaults to "ctr-<pod UID>".
	containerID string
	// prev is the ADD's result, sent as prevResult (CHECK).
	prev string
}

// cniOut is what allot-cni answered: a result, or the CNI error it printed.
type cniOut struct {
	res *current.Result
	err *types.Error
	raw string
}

func (o cniOut) String() string {
	if o.err != nil {
		return fmt.Sprintf("CNI error %d: %s", o.err.Code, o.err.Msg)
	}
	return o.raw
}

// addrs are the result's addresses in CIDR form, in result order.
func (o cniOut) addrs() []string {
	if o.res == nil {
		return nil
	}
	out := make([]string, len(o.res.IPs))
	for i, ip := range o.res.IPs {
		out[i] = ip.Address.String()
	}
	return out
}

func (c cniCall) withDefaults() cniCall {
	if c.ifName == "" {
		c.ifName = "eth0"
	}
	if c.network == "" {
		c.network = netUnderlay
	}
	if c.containerID == "" {
		c.containerID = "ctr-" + string(c.pod.UID)
	}
	return c
}

// exec runs allot-cni as the runtime would for c and returns its answer. A failure without
// a CNI error on stdout fails the test.
func (se *sharedEnv) exec(c cniCall) cniOut {
	se.t.Helper()
	out, err := se.execRaw(context.Background(), c)
	if err != nil {
		se.t.Fatal(err)
	}
	return out
}

func (se *sharedEnv) execRaw(ctx context.Context, c cniCall) (cniOut, error) {
	c = c.withDefaults()
	ipam := map[string]any{"type": "allot-cni", "socket": c.node.cfg.Socket, "timeout": "20s"}
	for k, v := range c.ipam {
		ipam[k] = v
	}
	netconf := map[string]any{"cniVersion": "1.1.0", "name": c.network, "type": "macvlan", "master": "eth0", "ipam": ipam}
	if c.prev != "" {
		netconf["prevResult"] = json.RawMessage(c.prev)
	}
	conf, err := json.Marshal(netconf)
	if err != nil {
		return cniOut{}, err
	}
	cmd := exec.CommandContext(ctx, se.cni)
	cmd.Env = []string{
		"CNI_COMMAND=" + c.cmd, "CNI_CONTAINERID=" + c.containerID, "CNI_NETNS=/var/run/netns/" + c.containerID,
		"CNI_IFNAME=" + c.ifName, "CNI_PATH=/opt/cni/bin",
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=" + c.pod.Namespace + ";K8S_POD_NAME=" + c.pod.Name +
			";K8S_POD_INFRA_CONTAINER_ID=" + c.containerID + ";K8S_POD_UID=" + string(c.pod.UID),
	}
	cmd.Stdin = bytes.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	out := cniOut{raw: stdout.String()}
	var exitErr *exec.ExitError
	switch {
	case runErr == nil:
		if c.cmd == "ADD" {
			r, err := current.NewResult(stdout.Bytes())
			if err != nil {
				return out, fmt.Errorf("ADD printed no result: %v: %s", err, stdout.String())
			}
			out.res = r.(*current.Result)
		}
	case errors.As(runErr, &exitErr):
		var e types.Error
		if err := json.Unmarshal(stdout.Bytes(), &e); err != nil || e.Msg == "" {
			return out, fmt.Errorf("allot-cni %s failed without a CNI error on stdout: %v\nstdout: %s\nstderr: %s", c.cmd, runErr, stdout.String(), stderr.String())
		}
		out.err = &e
	default:
		return out, runErr
	}
	return out, nil
}

// add is a CNI ADD that must succeed.
func (se *sharedEnv) add(c cniCall) cniOut {
	se.t.Helper()
	c.cmd = "ADD"
	out := se.exec(c)
	if out.err != nil {
		se.t.Fatalf("ADD %s/%s %s: %s", c.pod.Namespace, c.pod.Name, c.withDefaults().ifName, out)
	}
	return out
}

// addFails is a CNI ADD that must fail with code and a message containing every part.
func (se *sharedEnv) addFails(c cniCall, code uint, parts ...string) cniOut {
	se.t.Helper()
	c.cmd = "ADD"
	out := se.exec(c)
	if out.err == nil {
		se.t.Fatalf("ADD %s/%s succeeded with %v, want CNI error %d", c.pod.Namespace, c.pod.Name, out.addrs(), code)
	}
	if out.err.Code != code {
		se.t.Errorf("ADD %s/%s: CNI error %d, want %d: %s", c.pod.Namespace, c.pod.Name, out.err.Code, code, out.err.Msg)
	}
	for _, p := range parts {
		if !strings.Contains(out.err.Msg, p) {
			se.t.Errorf("ADD %s/%s: CNI error %q does not contain %q", c.pod.Namespace, c.pod.Name, out.err.Msg, p)
		}
	}
	return out
}

// del is a CNI DEL that must succeed.
func (se *sharedEnv) del(c cniCall) {
	se.t.Helper()
	c.cmd = "DEL"
	if out := se.exec(c); out.err != nil {
		se.t.Fatalf("DEL %s/%s: %s", c.pod.Namespace, c.pod.Name, out)
	}
}

// namespace creates a namespace with labels and annotations.
func (se *sharedEnv) namespace(name string, labels, annotations map[string]string) {
	se.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations}}
	if err := se.c.Create(context.Background(), ns); err != nil {
		se.t.Fatal(err)
	}
}

// pod creates a pod bound to node.
func (se *sharedEnv) pod(ns, name, node string, labels, annotations map[string]string) *corev1.Pod {
	se.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if err := se.c.Create(context.Background(), p); err != nil {
		se.t.Fatal(err)
	}
	return p
}

// sharedPool builds a SharedIPPool.
func sharedPool(name string, v4, v6 *allotv1.SharedPoolFamily, sel allotv1.PoolSelection) *allotv1.SharedIPPool {
	return &allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: allotv1.SharedIPPoolSpec{IPv4: v4, IPv6: v6, PoolSelection: sel}}
}

func fam(subnet string, ips ...string) *allotv1.SharedPoolFamily {
	return &allotv1.SharedPoolFamily{Subnet: subnet, IPs: ips}
}

// create creates objects, failing the test on error.
func (se *sharedEnv) create(objs ...ctrlclient.Object) {
	se.t.Helper()
	for _, o := range objs {
		if err := se.c.Create(context.Background(), o); err != nil {
			se.t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

// waitPools waits until every agent's view of the shared pools satisfies ok (the agents
// learn pools, reserved addresses and claims from informers, asynchronously). The view is
// what the agent reports on its local API (allotctl pools).
func (se *sharedEnv) waitPools(what string, ok func(pools map[string]uint64) bool) {
	se.t.Helper()
	for _, name := range sortedKeys(se.nodes) {
		n := se.nodes[name]
		eventually(se.t, name+": "+what, 20*time.Second, func() (bool, string) {
			ps, err := n.cli.Pools(context.Background())
			if err != nil {
				return false, err.Error()
			}
			free := map[string]uint64{}
			for _, p := range ps {
				free[p.Name+"/"+p.Family] = p.Free
			}
			return ok(free), fmt.Sprint(free)
		})
	}
}

// havePools waits until every agent knows every named pool (name/family keys, e.g.
// "blue/ipv4").
func (se *sharedEnv) havePools(keys ...string) {
	se.t.Helper()
	se.waitPools(fmt.Sprintf("pools %v known", keys), func(free map[string]uint64) bool {
		for _, k := range keys {
			if _, ok := free[k]; !ok {
				return false
			}
		}
		return true
	})
}

// claims lists every AddressClaim, keyed by address.
func (se *sharedEnv) claims() map[netip.Addr]allotv1.AddressClaim {
	se.t.Helper()
	var l allotv1.AddressClaimList
	if err := se.c.List(context.Background(), &l); err != nil {
		se.t.Fatal(err)
	}
	out := map[netip.Addr]allotv1.AddressClaim{}
	for _, c := range l.Items {
		a, err := allotk8s.ParseClaimName(c.Name)
		if err != nil {
			se.t.Errorf("claim %s: %v", c.Name, err)
			continue
		}
		if a.String() != c.Spec.IP {
			se.t.Errorf("claim %s holds spec.ip %s", c.Name, c.Spec.IP)
		}
		out[a] = c
	}
	return out
}

// endpoint reads a pod's AllotEndpoint; nil when there is none.
func (se *sharedEnv) endpoint(ns, name string) *allotv1.AllotEndpoint {
	se.t.Helper()
	var ep allotv1.AllotEndpoint
	err := se.c.Get(context.Background(), ktypes.NamespacedName{Namespace: ns, Name: name}, &ep)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		se.t.Fatal(err)
	}
	return &ep
}

// inRange reports whether the address of cidr (with prefix length) lies in [from, to].
func inRange(cidr, from, to string) bool {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	a := p.Addr()
	return netip.MustParseAddr(from).Compare(a) <= 0 && a.Compare(netip.MustParseAddr(to)) <= 0
}

// poolsJSON is the ipam.spidernet.io/ippool annotation value naming pools per family.
func poolsJSON(v4, v6 []string) string {
	b, _ := json.Marshal(map[string][]string{"ipv4": nonNil(v4), "ipv6": nonNil(v6)})
	return string(b)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func jsonList(names ...string) string {
	b, _ := json.Marshal(nonNil(names))
	return string(b)
}

// startOperator runs the operator in-process (leader-elected, shared-pool status and
// garbage collection with a short grace) until the test ends.
func (se *sharedEnv) startOperator(gcGrace time.Duration) {
	se.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := operator.Run(ctx, operator.Options{
			RESTConfig: se.env.Config, Identity: "op-shared", Logger: logger("operator"),
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
			StatusDelay: 100 * time.Millisecond,
			SharedPools: operator.SharedPoolOptions{GCGrace: gcGrace},
		})
		if err != nil {
			se.t.Errorf("operator: %v", err)
		}
	}()
	se.t.Cleanup(func() { cancel(); <-done })
}
