package daemonset

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api/client"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/test/k8senv"
	"golang.org/x/sys/unix"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	namespace = "kube-system"
	dsName    = "allot-agent"
	podName   = "allot-agent-x7k2p"
	nodeName  = "node-a"
	confName  = "05-allot.conflist"
	httpAddr  = "127.0.0.1:9464" // the node's namespace is the test's own
	conflist  = `{"cniVersion":"1.1.0","name":"allot","plugins":[{"type":"bridge","bridge":"allot0","isGateway":true,"ipam":{"type":"allot-cni"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
)

// rig is one node (namespace, directories) and the objects standing for its agent's Pod.
type rig struct {
	t       *testing.T
	env     *k8senv.Env
	c       ctrlclient.Client
	node    *node
	proxy   *proxy
	dir     string
	confDir string
	binDir  string
	srcDir  string
	masq    string
	config  string
	sock    string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	need(t)
	e := k8senv.Start(t)
	c, err := e.Client()
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, env: e, c: c, node: newNode(t)}
	// A short directory: unix socket paths are limited to 107 bytes.
	r.dir, err = os.MkdirTemp("", "allotds-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(r.dir) })
	r.confDir = filepath.Join(r.dir, "net.d")
	r.binDir = filepath.Join(r.dir, "bin")
	r.srcDir = filepath.Join(r.dir, "src")
	r.masq = filepath.Join(r.dir, "ip-masq-agent")
	r.sock = filepath.Join(r.dir, "allotd.sock")
	for _, d := range []string{r.confDir, r.binDir, r.srcDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The image's plugins (allot-cni is the real one), and the node's own loopback.
	cni, err := os.ReadFile(env.allotCNI)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"allot-cni": cni, "bridge": []byte("image bridge"), "loopback": []byte("image loopback")} {
		if err := os.WriteFile(filepath.Join(r.srcDir, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(r.binDir, "loopback"), []byte("node's loopback"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.writeMasq("nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1s\n")

	host := strings.TrimPrefix(e.Config.Host, "https://")
	r.proxy = newProxy(t, r.node, host)
	kc := kubeconfig(t, e.Config, r.proxy.addr())
	r.config = filepath.Join(r.dir, "allotd.yaml")
	cfg := fmt.Sprintf(`mode: agent
socket: %s
store: {path: %s}
http: {address: %q}
log: {level: debug}
datapath: {type: iptables, masqAgentConfig: %s}
cluster:
  kubeconfig: %s
  nodeName: %s
  releaseDelay: 1h
  requestDebounce: 20ms
  autoDirectNodeRoutes: true
cni:
  confDir: %s
  confName: %s
  conflist: '%s'
  binDir: %s
  srcDir: %s
  uninstall: auto
`, r.sock, filepath.Join(r.dir, "allot.db"), httpAddr, r.masq, kc, nodeName, r.confDir, confName, conflist, r.binDir, r.srcDir)
	if err := os.WriteFile(r.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: dsName},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": dsName}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": dsName}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/allot-ipam/allot:test"}}},
			},
		},
	}
	if err := c.Create(ctx, ds); err != nil {
		t.Fatal(err)
	}
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: podName, Labels: map[string]string{"app": dsName},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: dsName, UID: ds.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/allot-ipam/allot:test"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: allotv1.IPPoolSpec{
		IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.50.0.0/16"}, MaskSize: 24},
		IPv6: &allotv1.PoolFamily{CIDRs: []string{"fd00:50::/112"}, MaskSize: 120}}}); err != nil {
		t.Fatal(err)
	}
	r.addPeer()
	// Until the test creates the node's AllotNode with its first blocks (the operator's
	// part), the agent cannot read one: an admission policy refuses an AllotNode without
	// blocks, which is what the agent creates when it finds none.
	fail := admissionv1.Fail
	if err := c.Create(ctx, &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "test-allotnode-needs-blocks"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{"allot.io"}, APIVersions: []string{"*"}, Resources: []string{"allotnodes"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: "has(object.spec.ipam) && has(object.spec.ipam.pools) && has(object.spec.ipam.pools.allocated) && size(object.spec.ipam.pools.allocated) > 0",
				Message:    "test: the operator has not given this node a block yet",
			}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-allotnode-needs-blocks"},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: "test-allotnode-needs-blocks", ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}); err != nil {
		t.Fatal(err)
	}
	// The API server applies new policies after a moment: wait until an empty one is refused.
	eventually(t, "the admission policy in force", 20*time.Second, func() (bool, string) {
		err := c.Create(ctx, &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "probe"}})
		if err == nil {
			_ = c.Delete(ctx, &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "probe"}})
			return false, "created"
		}
		return strings.Contains(err.Error(), "has not given this node a block"), err.Error()
	})
	return r
}

// The peer node: another node of the cluster on the same link (a veth pair inside the
// node's namespace stands for the link), with a block of its own. With
// cluster.autoDirectNodeRoutes the agent routes the peer's block via its InternalIP.
const (
	peerName  = "node-b"
	peerIP    = "198.19.0.2"
	peerBlock = "10.50.9.0/24"
)

func (r *rig) addPeer() {
	r.t.Helper()
	if err := r.node.in(func() error {
		for _, args := range [][]string{
			{"link", "add", "link0", "type", "veth", "peer", "name", "link1"},
			{"addr", "add", "198.19.0.1/24", "dev", "link0"},
			{"link", "set", "link0", "up"},
			{"link", "set", "link1", "up"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %v: %v: %s", args, err, out)
			}
		}
		return nil
	}); err != nil {
		r.t.Fatal(err)
	}
	ctx := context.Background()
	for name, ip := range map[string]string{nodeName: "198.19.0.1", peerName: peerIP} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := r.c.Create(ctx, n); err != nil {
			r.t.Fatal(err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		if err := r.c.Status().Update(ctx, n); err != nil {
			r.t.Fatal(err)
		}
	}
	an := &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: peerName}}
	an.Spec.IPAM.Pools.Allocated = []allotv1.PoolAllocation{{Pool: "default", CIDRs: []string{peerBlock}}}
	if err := r.c.Create(ctx, an); err != nil {
		r.t.Fatal(err)
	}
}

// peerRoute is the node's route to the peer's block, as `ip route` prints it, or "".
func (r *rig) peerRoute() string {
	r.t.Helper()
	var out []byte
	if err := r.node.in(func() error {
		var err error
		out, err = exec.Command("ip", "route", "show", peerBlock).CombinedOutput()
		return err
	}); err != nil {
		r.t.Fatalf("ip route: %v %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// giveFirstBlocks creates the node's AllotNode with its first blocks, as the operator would.
func (r *rig) giveFirstBlocks(cidrs ...string) {
	r.t.Helper()
	an := &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	an.Spec.IPAM.Pools.Allocated = []allotv1.PoolAllocation{{Pool: "default", CIDRs: cidrs}}
	if err := r.c.Create(context.Background(), an); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) writeMasq(s string) {
	r.t.Helper()
	if err := os.WriteFile(r.masq, []byte(s), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// setBlocks replaces the node's blocks, as the operator (adding) and the agent (removing)
// write them.
func (r *rig) setBlocks(cidrs ...string) {
	r.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var an allotv1.AllotNode
		if err := r.c.Get(context.Background(), types.NamespacedName{Name: nodeName}, &an); err != nil {
			return err
		}
		an.Spec.IPAM.Pools.Allocated = []allotv1.PoolAllocation{{Pool: "default", CIDRs: cidrs}}
		return r.c.Update(context.Background(), &an)
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) start() *agent {
	return startAgent(r.t, r.node, r.config, "POD_NAME="+podName, "POD_NAMESPACE="+namespace, "NODE_NAME=")
}

func (r *rig) installCNI() {
	r.t.Helper()
	out, err := exec.Command(env.allotd, "install-cni", "--bin-dir", r.binDir, "--src-dir", r.srcDir, "--plugins", "bridge,loopback").CombinedOutput()
	if err != nil {
		r.t.Fatalf("install-cni: %v\n%s", err, out)
	}
}

func (r *rig) confPath() string { return filepath.Join(r.confDir, confName) }

// socketAnswers reports whether the agent's API socket answers a status request.
func (r *rig) socketAnswers() error {
	cl := client.New(r.sock)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := cl.Status(ctx)
	return err
}

func fileNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestAgentAsDaemonSet follows one node through a DaemonSet's life: install, start (the
// network configuration appears only once the agent serves, by a rename), blocks coming and
// going (the masquerade rules follow), the ip-masq-agent file changing, a rolling update
// (everything stays; the next agent rewrites an older configuration and adopts the rules),
// and helm uninstall (the DaemonSet is deleted: configuration, then binaries, then rules go).
func TestAgentAsDaemonSet(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.installCNI()
	if got := fileNames(t, r.binDir); !slices.Equal(got, []string{".allot-install", "allot-cni", "bridge", "loopback"}) {
		t.Fatalf("bin directory after install-cni: %v", got)
	}

	// Start before the node has an AllotNode (and the agent may not create an empty one):
	// the agent listens and has restored its store, its informers sync, but it has not read
	// its AllotNode, so it is not ready and writes nothing.
	w := newWatcher(t, r.confDir, r.binDir)
	a := r.start()
	eventually(t, "the API socket", 20*time.Second, func() (bool, string) {
		err := r.socketAnswers()
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, "the agent's informer caches", 20*time.Second, func() (bool, string) {
		return strings.Contains(a.log.String(), `msg="agent caches synced"`), "not yet"
	})
	for range 10 {
		code, body, err := r.node.readyz(httpAddr)
		if err != nil || code != 503 || !strings.Contains(body, "waiting for the node's AllotNode") {
			t.Fatalf("readyz before the AllotNode was read: %d %q %v", code, body, err)
		}
		if _, err := os.Stat(r.confPath()); err == nil {
			t.Fatal("network configuration written before the agent read its AllotNode")
		}
		if s := r.node.nat(t); len(s.chains["ipv4"])+len(s.chains["ipv6"]) > 0 {
			t.Fatalf("datapath applied before the node's blocks were known: %s", s)
		}
		time.Sleep(100 * time.Millisecond) // sleep: checks nothing happens for a second of real time
	}

	// The node gets its blocks. When the configuration appears (by a rename, never written
	// in place), the socket answers and the datapath masquerades the node's blocks.
	r.giveFirstBlocks("10.50.1.0/24", "fd00:50::100/120")
	var atWrite nat
	var sockErr error
	evs := w.waitFor(t, 30*time.Second, func(e event) bool { return e.name == confName }, func() {
		sockErr = r.socketAnswers()
		atWrite = r.node.nat(t)
	})
	for _, e := range evs {
		if e.name == confName && e.mask&unix.IN_MOVED_TO == 0 {
			t.Fatalf("the configuration file was not renamed into place: %v", e)
		}
	}
	if sockErr != nil {
		t.Fatalf("configuration written while the socket does not answer: %v", sockErr)
	}
	if got := atWrite.masqueraded("ipv4"); !slices.Equal(got, []string{"10.50.1.0/24"}) {
		t.Fatalf("ipv4 masquerade when the configuration appeared: %v (%s)", got, atWrite)
	}
	if got := atWrite.masqueraded("ipv6"); !slices.Equal(got, []string{"fd00:50::100/120"}) {
		t.Fatalf("ipv6 masquerade when the configuration appeared: %v (%s)", got, atWrite)
	}
	eventually(t, "readyz 200", 10*time.Second, func() (bool, string) {
		code, body, err := r.node.readyz(httpAddr)
		return code == 200, fmt.Sprintf("%d %q %v", code, body, err)
	})
	if b, err := os.ReadFile(r.confPath()); err != nil || string(b) != conflist {
		t.Fatalf("configuration %q %v", b, err)
	}
	eventually(t, "the route to the peer's block", 10*time.Second, func() (bool, string) {
		rt := r.peerRoute()
		return strings.Contains(rt, "via "+peerIP) && strings.Contains(rt, "proto 167"), rt
	})
	if got := fileNames(t, r.confDir); !slices.Equal(got, []string{confName}) {
		t.Fatalf("configuration directory: %v", got)
	}

	// Blocks come and go; the rules follow, one chain and one jump per family throughout.
	r.setBlocks("10.50.1.0/24", "10.50.2.0/24", "fd00:50::100/120")
	eventually(t, "the new block masqueraded", 10*time.Second, func() (bool, string) {
		s := r.node.nat(t)
		return slices.Equal(s.masqueraded("ipv4"), []string{"10.50.1.0/24", "10.50.2.0/24"}), s.String()
	})
	r.setBlocks("10.50.2.0/24", "fd00:50::100/120")
	eventually(t, "the removed block no longer masqueraded", 10*time.Second, func() (bool, string) {
		s := r.node.nat(t)
		return slices.Equal(s.masqueraded("ipv4"), []string{"10.50.2.0/24"}) && slices.Equal(s.masqueraded("ipv6"), []string{"fd00:50::100/120"}), s.String()
	})
	// The ip-masq-agent file changes: re-read at its resync interval.
	r.writeMasq("nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\nresyncInterval: 1s\n")
	eventually(t, "the ip-masq-agent file applied", 10*time.Second, func() (bool, string) {
		s := r.node.nat(t)
		if len(s.chains["ipv4"]) != 1 {
			return false, s.String()
		}
		return slices.Contains(s.rules[s.chains["ipv4"][0]], "-d 192.168.0.0/16 -j RETURN"), s.String()
	})
	before := r.node.nat(t)
	confIno := inode(t, r.confPath())

	// A rolling update: the DaemonSet stays, the agent is stopped. Nothing is removed.
	a.stop()
	if !strings.Contains(a.log.String(), "stopping without uninstalling") {
		t.Fatalf("no keep decision in the log:\n%s", a.log.String())
	}
	if inode(t, r.confPath()) != confIno {
		t.Fatal("the configuration was rewritten or removed at a rolling update")
	}
	if got := fileNames(t, r.binDir); !slices.Equal(got, []string{".allot-install", "allot-cni", "bridge", "loopback"}) {
		t.Fatalf("bin directory after a rolling update's stop: %v", got)
	}
	if s := r.node.nat(t); s.String() != before.String() {
		t.Fatalf("rules changed at a rolling update's stop:\n%s\nbefore:\n%s", s, before)
	}
	if rt := r.peerRoute(); !strings.Contains(rt, "via "+peerIP) {
		t.Fatalf("the route to the peer went at a rolling update's stop: %q", rt)
	}

	// The new pod's init container runs install-cni again (nothing changes), then the agent
	// starts; an older version's configuration is replaced once it serves, and it adopts the
	// rules in force (same chain, no second jump).
	r.installCNI()
	if err := os.WriteFile(r.confPath(), []byte(`{"cniVersion":"0.4.0","name":"allot","plugins":[{"type":"bridge","ipam":{"type":"allot-cni"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	a = r.start()
	eventually(t, "the older configuration replaced", 30*time.Second, func() (bool, string) {
		b, err := os.ReadFile(r.confPath())
		return err == nil && string(b) == conflist, fmt.Sprintf("%q %v", b, err)
	})
	eventually(t, "readyz 200 after the restart", 10*time.Second, func() (bool, string) {
		code, body, err := r.node.readyz(httpAddr)
		return code == 200, fmt.Sprintf("%d %q %v", code, body, err)
	})
	if s := r.node.nat(t); s.String() != before.String() {
		t.Fatalf("rules after the restart:\n%s\nbefore:\n%s", s, before)
	}

	// helm uninstall: the DaemonSet is deleted (its pods stay until stopped: no garbage
	// collector runs here), then the agent is stopped.
	if err := r.c.Delete(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: dsName}}); err != nil {
		t.Fatal(err)
	}
	w = newWatcher(t, r.confDir, r.binDir)
	a.stop()
	if _, err := os.Stat(r.confPath()); !os.IsNotExist(err) {
		t.Fatalf("configuration still there after uninstall: %v", err)
	}
	if got := fileNames(t, r.binDir); !slices.Equal(got, []string{"loopback"}) {
		t.Fatalf("bin directory after uninstall: %v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(r.binDir, "loopback")); string(b) != "node's loopback" {
		t.Fatalf("the node's own loopback was not restored: %q", b)
	}
	if s := r.node.nat(t); len(s.chains["ipv4"])+len(s.chains["ipv6"])+s.jumps["ipv4"]+s.jumps["ipv6"] > 0 {
		t.Fatalf("rules left after uninstall: %s", s)
	}
	if rt := r.peerRoute(); rt != "" {
		t.Fatalf("route to the peer left after uninstall: %q", rt)
	}
	// Order: the configuration first (no new ADDs), then the binaries, then the rules.
	var order []string
	for _, e := range w.events() {
		if e.mask&unix.IN_DELETE != 0 && (e.name == confName || e.name == "allot-cni") {
			order = append(order, e.name)
		}
	}
	if !slices.Equal(order, []string{confName, "allot-cni"}) {
		t.Fatalf("deletions in order %v, want the configuration before allot-cni", order)
	}
	logOrder := a.log.lines("uninstalling from the node", "CNI network configuration removed", "CNI plugin removed", "datapath removed")
	if !slices.Equal(logOrder, []string{"uninstalling from the node", "CNI network configuration removed", "CNI plugin removed", "datapath removed"}) {
		t.Fatalf("uninstall steps in order %v", logOrder)
	}
}
