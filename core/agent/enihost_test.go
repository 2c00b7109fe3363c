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

	"github.com/vishvananda/netlink"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/eni/eninode"
	"github.com/allot-ipam/allot/core/enihost"
	"github.com/allot-ipam/allot/core/enihost/enihosttest"
	"github.com/allot-ipam/allot/core/ipam"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/store"
	ciliumannotations "github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/test/k8senv"
)

// TestENIHostRoutingFromTheAgent drives ENI host routing from a real agent (real API
// server, real store) in network namespaces: the operator, played by hand, publishes an ENI
// per device index with the MACs of the node's stand-in ENIs; pods ADDed through the agent's
// manager get a route to their veth and their rules as the agent's state says, and reach an
// external address through the ENI that holds their address; a DEL removes them; a
// restarted agent (new manager over the same store) keeps them.
func TestENIHostRoutingFromTheAgent(t *testing.T) {
	w := enihosttest.New(t)
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const name = "eni-host-node"
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "allot.db")
	a1, a2 := netip.MustParseAddr("10.1.1.50"), netip.MustParseAddr("10.1.0.50")
	// The node's IPv6 /80, delegated to the secondary ENI: p1 is dual-stack.
	prefix6 := netip.MustParsePrefix("2600:1f18:0:1:a::/80")

	// start runs an agent, its manager and the host controller; stop ends them.
	type running struct {
		a    *Agent
		m    *ipam.Manager
		ctl  *enihost.Controller
		stop func()
	}
	start := func(netnsFiles func() ([]string, error)) *running {
		t.Helper()
		st, err := store.Open(ctx, dbPath, store.Options{NoSync: true, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(Options{
			NodeName: name, RESTConfig: env.Config, Debounce: 10 * time.Millisecond, ReclaimGrace: time.Hour,
			Logger: testLogger(),
			ENI:    &ENIOptions{Spec: allotv1.NodeENISpec{InstanceID: "i-0abc", InstanceType: "m5.large", Zone: "us-east-1a"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctl := &enihost.Controller{Host: &enihost.Host{Handle: w.H}, State: a.ENIHostState, NetnsFiles: netnsFiles,
			Retry: 20 * time.Millisecond, Log: testLogger()}
		pol, _ := ciliumannotations.New(ciliumannotations.Config{})
		m, err := ipam.New(ctx, ipam.Options{
			Store: st, Logger: testLogger(),
			Policy:   func(string) policy.PoolPolicy { return pol },
			Dynamic:  &ipam.DynamicOptions{Node: name, Wait: 10 * time.Second},
			OnChange: func() { a.Trigger(); ctl.Trigger() },
		})
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{}, 2)
		go func() { _ = a.Run(actx, m); done <- struct{}{} }()
		go func() { ctl.Run(actx); done <- struct{}{} }()
		return &running{a: a, m: m, ctl: ctl, stop: func() { cancel(); <-done; <-done; _ = st.Close() }}
	}
	r := start(w.NetnsFiles)
	defer func() { r.stop() }()

	eventually(t, "AllotNode with spec.eni", 10*time.Second, func() (bool, string) {
		n, err := getNode(c, name)
		return err == nil && n.Spec.ENI != nil, fmt.Sprint(err)
	})
	op := eninode.Clients{Live: c, Writer: c}
	ifcs := []allotv1.ENIInterface{
		{ID: "eni-0", Index: 0, MAC: w.ENIs[0].MAC, Subnet: "subnet-0", SubnetCIDR: "10.1.0.0/24", Addresses: []string{a2.String()}},
		{ID: "eni-1", Index: 1, MAC: w.ENIs[1].MAC, Subnet: "subnet-1", SubnetCIDR: "10.1.1.0/24", Addresses: []string{a1.String()},
			Prefixes: []string{prefix6.String()}},
	}
	if err := eninode.UpdateStatus(ctx, op, name, func(n *allotv1.AllotNode) bool {
		n.Status.ENI = &allotv1.ENIStatus{Interfaces: ifcs, InterfaceCount: 2, Available: 2}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if err := eninode.UpdateSpec(ctx, op, name, func(n *allotv1.AllotNode) bool {
		n.Spec.IPAM.Pool = map[string]allotv1.PoolAddress{a1.String(): {Resource: "eni-1"}, a2.String(): {Resource: "eni-0"}}
		return true
	}); err != nil {
		t.Fatal(err)
	}

	eventually(t, "the pool's two addresses and the /80 in the agent", 10*time.Second, func() (bool, string) {
		n := 0
		for _, u := range r.m.Usage() {
			n += len(u.CIDRs)
		}
		return n == 3, fmt.Sprint(r.m.Usage())
	})
	// ADD two pods, one per ENI for IPv4, both with an IPv6 address of the secondary ENI's
	// /80; the interface plugin's part (the veth) comes after.
	v6 := map[netip.Addr]netip.Addr{}
	for i, ad := range []netip.Addr{a1, a2} {
		al, err := r.m.Allocate(ctx, &api.AllocateRequest{Owner: api.Owner{ContainerID: fmt.Sprint("c", i), IfName: "eth0"},
			Network: "k8s", IPs: []string{ad.String()}})
		if err != nil {
			t.Fatal(err)
		}
		if got := netip.MustParsePrefix(al.IPs[0].Address).Addr(); got != ad {
			t.Fatalf("allocation %v, want %s", al.IPs, ad)
		}
		if len(al.IPs) != 2 || !prefix6.Contains(netip.MustParsePrefix(al.IPs[1].Address).Addr()) {
			t.Fatalf("allocation %v, want an IPv6 address of %s beside %s", al.IPs, prefix6, ad)
		}
		v6[ad] = netip.MustParsePrefix(al.IPs[1].Address).Addr()
	}
	w.AddPod("p1", a1, 1)
	w.AddAddr("p1", v6[a1], 1)
	w.AddPod("p2", a2, 0)
	w.AddAddr("p2", v6[a2], 1)
	routed := func(want map[netip.Addr]int) func() (bool, string) {
		return func() (bool, string) {
			got, err := r.ctl.Host.PodRoutes()
			if err != nil || len(got) != len(want) {
				return false, fmt.Sprint(got, err)
			}
			for a, l := range want {
				if got[a] != l {
					return false, fmt.Sprint(got)
				}
			}
			return true, ""
		}
	}
	both := map[netip.Addr]int{a1: w.HostLink("p1"), a2: w.HostLink("p2"), v6[a1]: w.HostLink("p1"), v6[a2]: w.HostLink("p2")}
	eventually(t, "routes to both pods' veths", 10*time.Second, routed(both))
	check := func(pod string, want netip.Addr) {
		t.Helper()
		to := enihosttest.External
		if want.Is6() {
			to = enihosttest.External6
		}
		eventually(t, pod+" reaches the outside through the ENI of "+want.String(), 10*time.Second, func() (bool, string) {
			src, err := w.Connect(w.Pods[pod], w.VPC, to)
			return err == nil && src == want, fmt.Sprint(src, err)
		})
	}
	check("p1", a1)
	check("p2", a2)
	check("p1", v6[a1])
	check("p2", v6[a2]) // its IPv4 address leaves through eth0, its IPv6 one through eth1

	// Agent restart: the allocations come back from the store; the new agent cannot see the
	// namespaces, and keeps every route and rule all the same.
	r.stop()
	r = start(func() ([]string, error) { return nil, nil })
	eventually(t, "restarted agent's state", 10*time.Second, func() (bool, string) {
		out, err := r.ctl.SyncOnce(ctx)
		return err == nil && !out.Pending() && out.PodRoutesRemoved+out.RulesRemoved == 0, fmt.Sprint(out, err)
	})
	if ok, why := routed(both)(); !ok {
		t.Fatalf("routes after restart: %s", why)
	}
	check("p1", a1)
	check("p1", v6[a1])

	// DEL of p1: its route and rules go.
	if err := r.m.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: "c0", IfName: "eth0"}, Network: "k8s"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "p1's routes gone", 10*time.Second, routed(map[netip.Addr]int{a2: w.HostLink("p2"), v6[a2]: w.HostLink("p2")}))
	eventually(t, "p1's rules gone", 10*time.Second, func() (bool, string) {
		ra, err := r.ctl.Host.RulePrefixes()
		if err != nil {
			return false, err.Error()
		}
		for _, a := range ra {
			if a.Addr() == a1 {
				return false, "rule of p1 left"
			}
		}
		return true, ""
	})
	check("p2", a2)
	check("p2", v6[a2])

	// The /80 leaves the node (p2 released first): its rules and the ENI table's IPv6
	// route go.
	if err := r.m.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: "c1", IfName: "eth0"}, Network: "k8s"}); err != nil {
		t.Fatal(err)
	}
	if err := eninode.UpdateStatus(ctx, op, name, func(n *allotv1.AllotNode) bool {
		n.Status.ENI.Interfaces[1].Prefixes = nil
		return true
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no rule and no IPv6 table route left", 10*time.Second, func() (bool, string) {
		ra, err := r.ctl.Host.RulePrefixes()
		if err != nil || len(ra) != 0 {
			return false, fmt.Sprint(ra, err)
		}
		rs, err := w.H.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: enihost.TableBase + 1}, netlink.RT_FILTER_TABLE)
		return err == nil && len(rs) == 0, fmt.Sprint(rs, err)
	})
}
