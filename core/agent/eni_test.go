package agent

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/eni"
	"github.com/allot-ipam/allot/core/eni/eninode"
	"github.com/allot-ipam/allot/core/ipam"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/store"
	ciliumannotations "github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/test/k8senv"
)

// TestENIHandshakeOnAPIServer plays the operator by hand against a real API server and
// checks the agent's half of ENI mode: it serves spec.ipam.pool with the subnet's prefix
// and router, reports used and pending, answers the release handshake only after taking
// the address out of its allocator (a held address gets do-not-release), never hands out
// an address in the handshake, and drops a released entry once the pool no longer lists it.
func TestENIHandshakeOnAPIServer(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const name = "eni-node"
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "allot.db"), store.Options{NoSync: true, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, err := New(Options{
		NodeName: name, RESTConfig: env.Config, Debounce: 10 * time.Millisecond, ReclaimGrace: time.Hour,
		Logger: testLogger(),
		ENI:    &ENIOptions{Spec: allotv1.NodeENISpec{InstanceID: "i-0abc", InstanceType: "m5.large", Zone: "us-east-1a"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := ciliumannotations.New(ciliumannotations.Config{})
	m, err := ipam.New(ctx, ipam.Options{
		Store: st, Logger: testLogger(),
		Policy:   func(string) policy.PoolPolicy { return pol },
		Dynamic:  &ipam.DynamicOptions{Node: name, Wait: 10 * time.Second},
		OnChange: a.Trigger,
	})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(actx, m) }()
	defer func() { cancel(); <-done }()

	eventually(t, "AllotNode with spec.eni", 10*time.Second, func() (bool, string) {
		n, err := getNode(c, name)
		return err == nil && n.Spec.ENI != nil && n.Spec.ENI.InstanceID == "i-0abc" && len(n.OwnerReferences) == 1, fmt.Sprint(err)
	})

	// The operator publishes three addresses on one ENI.
	op := eninode.Clients{Live: c, Writer: c}
	addrs := []string{"10.9.0.10", "10.9.0.11", "10.9.0.12"}
	publish := func(list []string) {
		t.Helper()
		ifc := allotv1.ENIInterface{ID: "eni-1", Index: 1, Subnet: "subnet-1", SubnetCIDR: "10.9.0.0/24", Addresses: list}
		if err := eninode.UpdateStatus(ctx, op, name, func(n *allotv1.AllotNode) bool {
			n.Status.ENI = &allotv1.ENIStatus{Interfaces: []allotv1.ENIInterface{ifc}, InterfaceCount: 1, Available: int32(len(list))}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if err := eninode.UpdateSpec(ctx, op, name, func(n *allotv1.AllotNode) bool {
			n.Spec.IPAM.Pool = map[string]allotv1.PoolAddress{}
			for _, s := range list {
				n.Spec.IPAM.Pool[s] = allotv1.PoolAddress{Resource: "eni-1"}
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	publish(addrs)

	add := func(ctx context.Context, id string) (*api.Allocation, error) {
		return m.Allocate(ctx, &api.AllocateRequest{Owner: api.Owner{ContainerID: id, IfName: "eth0"}, Network: "k8s"})
	}
	var held []string
	for i := range 2 {
		al, err := add(ctx, fmt.Sprint("c", i))
		if err != nil {
			t.Fatal(err)
		}
		ip := al.IPs[0]
		if p := netip.MustParsePrefix(ip.Address); p.Bits() != 24 || ip.Gateway != "10.9.0.1" || ip.Pool != "default" {
			t.Fatalf("allocation %+v: want a /24 of pool default with gateway 10.9.0.1", ip)
		}
		held = append(held, netip.MustParsePrefix(ip.Address).Addr().String())
	}
	eventually(t, "status.ipam.used", 10*time.Second, func() (bool, string) {
		n, _ := getNode(c, name)
		_, ok0 := n.Status.IPAM.Used[held[0]]
		_, ok1 := n.Status.IPAM.Used[held[1]]
		return len(n.Status.IPAM.Used) == 2 && ok0 && ok1, fmt.Sprint(n.Status.IPAM.Used)
	})
	free := ""
	for _, s := range addrs {
		if s != held[0] && s != held[1] {
			free = s
		}
	}

	// The operator marks all three; the agent refuses the two held and lets the free one go.
	hs := eni.Checked(eninode.Handshake{Clients: op}, eni.OperatorMayApply, "operator")
	var marks []eni.Transition
	for _, s := range addrs {
		marks = append(marks, eni.Transition{Addr: netip.MustParseAddr(s), From: eni.StateNone, To: eni.StateMarked})
	}
	if rej, err := hs.Apply(ctx, name, marks); err != nil || len(rej) != 0 {
		t.Fatalf("marks: %v %v", rej, err)
	}
	eventually(t, "the agent's answers", 10*time.Second, func() (bool, string) {
		n, _ := getNode(c, name)
		r := n.Status.IPAM.ReleaseIPs
		return r[free] == "ready-for-release" && r[held[0]] == "do-not-release" && r[held[1]] == "do-not-release", fmt.Sprint(r)
	})
	// The ready address is out of service: a new ADD waits (and counts as pending).
	wctx, wcancel := context.WithTimeout(ctx, 800*time.Millisecond)
	errc := make(chan error, 1)
	go func() { _, err := add(wctx, "c-waits"); errc <- err }()
	eventually(t, "status.ipam.pending", 5*time.Second, func() (bool, string) {
		n, _ := getNode(c, name)
		return n.Status.IPAM.Pending == 1, fmt.Sprint(n.Status.IPAM.Pending)
	})
	if err := <-errc; err == nil {
		t.Fatal("an address in the release handshake was handed out")
	}
	wcancel()
	// Forbidden moves are refused whoever tries them.
	if _, err := hs.Apply(ctx, name, []eni.Transition{{Addr: netip.MustParseAddr(free), From: eni.StateReady, To: eni.StateDoNotRelease}}); err == nil {
		t.Fatal("the operator could answer for the agent")
	}

	// The operator unassigns the free one and forgets the refusals; released stays until the
	// pool drops the address, then the agent drops the entry.
	fa := netip.MustParseAddr(free)
	if _, err := hs.Apply(ctx, name, []eni.Transition{
		{Addr: fa, From: eni.StateReady, To: eni.StateReleased},
		{Addr: netip.MustParseAddr(held[0]), From: eni.StateDoNotRelease, To: eni.StateNone},
		{Addr: netip.MustParseAddr(held[1]), From: eni.StateDoNotRelease, To: eni.StateNone},
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // sleep: checks the agent does NOT drop the entry meanwhile
	if n, _ := getNode(c, name); n.Status.IPAM.ReleaseIPs[free] != "released" {
		t.Fatalf("the agent dropped the released entry while the pool still lists it: %v", n.Status.IPAM.ReleaseIPs)
	}
	publish(held)
	eventually(t, "handshake finished", 10*time.Second, func() (bool, string) {
		n, _ := getNode(c, name)
		return len(n.Status.IPAM.ReleaseIPs) == 0, fmt.Sprint(n.Status.IPAM.ReleaseIPs)
	})
	// A held address released by its pod can go the next time.
	if err := m.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: "c0", IfName: "eth0"}}); err != nil {
		t.Fatal(err)
	}
	gone := netip.MustParseAddr(held[0])
	if _, err := hs.Apply(ctx, name, []eni.Transition{{Addr: gone, From: eni.StateNone, To: eni.StateMarked}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ready after the pod left", 10*time.Second, func() (bool, string) {
		n, _ := getNode(c, name)
		return n.Status.IPAM.ReleaseIPs[held[0]] == "ready-for-release", fmt.Sprint(n.Status.IPAM.ReleaseIPs)
	})
	for _, u := range m.Usage() {
		for _, cs := range u.CIDRs {
			if cs.Prefix.Addr() == gone || cs.Prefix.Addr() == fa {
				t.Fatalf("%s is still in the allocator", cs.Prefix)
			}
		}
	}
}

// TestENISpecHandEditSurvives: spec.eni follows the agent's configuration, but a field edited
// by hand on the AllotNode keeps the edit when the agent syncs again and when it restarts
// with another configuration (whose other fields do reach the object).
func TestENISpecHandEditSurvives(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const name = "eni-hand-node"
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	run := func(spec allotv1.NodeENISpec) func() {
		st, err := store.Open(ctx, filepath.Join(t.TempDir(), "allot.db"), store.Options{NoSync: true, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(Options{NodeName: name, RESTConfig: env.Config, Debounce: 10 * time.Millisecond, ReclaimGrace: time.Hour,
			Logger: testLogger(), ENI: &ENIOptions{Spec: spec}})
		if err != nil {
			t.Fatal(err)
		}
		pol, _ := ciliumannotations.New(ciliumannotations.Config{})
		m, err := ipam.New(ctx, ipam.Options{Store: st, Logger: testLogger(), Policy: func(string) policy.PoolPolicy { return pol },
			Dynamic: &ipam.DynamicOptions{Node: name, Wait: time.Second}, OnChange: a.Trigger})
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Run(actx, m) }()
		return func() { cancel(); <-done; _ = st.Close() }
	}
	pre := func(v int32) *int32 { return &v }
	stop := run(allotv1.NodeENISpec{InstanceID: "i-0abc", PreAllocate: pre(8), SubnetIDs: []string{"subnet-agent"}})
	eventually(t, "spec.eni from the agent's configuration", 10*time.Second, func() (bool, string) {
		n, err := getNode(c, name)
		return err == nil && n.Spec.ENI != nil && len(n.Spec.ENI.SubnetIDs) == 1 && n.Spec.ENI.SubnetIDs[0] == "subnet-agent", fmt.Sprint(n, err)
	})
	// By hand: another subnet and security groups.
	if err := eninode.UpdateSpec(ctx, eninode.Clients{Live: c, Writer: c}, name, func(n *allotv1.AllotNode) bool {
		n.Spec.ENI.SubnetIDs = []string{"subnet-hand"}
		n.Spec.ENI.SecurityGroups = []string{"sg-hand"}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	// Status writes make the agent sync again; the edit stays.
	if err := eninode.UpdateStatus(ctx, eninode.Clients{Live: c, Writer: c}, name, func(n *allotv1.AllotNode) bool {
		n.Status.ENI = &allotv1.ENIStatus{Message: "poke"}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	stop()
	// A restarted agent with a new pre-allocate: that field follows, the edits stay.
	stop = run(allotv1.NodeENISpec{InstanceID: "i-0abc", PreAllocate: pre(16), SubnetIDs: []string{"subnet-agent"}})
	defer stop()
	eventually(t, "the new pre-allocate", 10*time.Second, func() (bool, string) {
		n, err := getNode(c, name)
		return err == nil && n.Spec.ENI.PreAllocate != nil && *n.Spec.ENI.PreAllocate == 16, fmt.Sprint(n.Spec.ENI, err)
	})
	n, err := getNode(c, name)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Spec.ENI; len(got.SubnetIDs) != 1 || got.SubnetIDs[0] != "subnet-hand" || len(got.SecurityGroups) != 1 || got.SecurityGroups[0] != "sg-hand" {
		t.Fatalf("hand edits overwritten: %+v", got)
	}
}
