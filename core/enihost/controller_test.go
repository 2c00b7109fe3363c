package enihost_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allot-ipam/allot/core/enihost"
	"github.com/allot-ipam/allot/core/enihost/enihosttest"
)

// TestControllerRoutesPodTrafficThroughItsENI: pods on a secondary ENI and on the primary
// one reach an external address from their own address, each through the ENI that holds
// it (the VPC's strict reverse-path check drops anything else), and reach each other on the
// node; a pod whose veth appears after its address is routed once it does; a DEL removes the
// pod's rules and route; an agent restart keeps everything and a host wiped clean is
// rebuilt from the pods' namespaces.
func TestControllerRoutesPodTrafficThroughItsENI(t *testing.T) {
	w := enihosttest.New(t)
	a1, a2, a3 := netip.MustParseAddr("10.1.1.50"), netip.MustParseAddr("10.1.0.50"), netip.MustParseAddr("10.1.1.51")
	w.AddPod("p1", a1, 1)
	w.AddPod("p2", a2, 0)
	pods := []enihost.Pod{{Addr: a1, ENIIndex: 1}, {Addr: a2, ENIIndex: 0}, {Addr: a3, ENIIndex: 1}}
	state := func(context.Context) ([]enihost.ENI, []enihost.Pod, error) {
		return w.ENIs, append([]enihost.Pod(nil), pods...), nil
	}
	ctx := context.Background()
	newCtl := func() *enihost.Controller {
		return &enihost.Controller{Host: &enihost.Host{Handle: w.H}, State: state, NetnsFiles: w.NetnsFiles}
	}
	ctl := newCtl()

	out, err := ctl.SyncOnce(ctx)
	if err != nil || len(out.Errors) != 0 {
		t.Fatalf("sync: %+v %v", out, err)
	}
	// p3's address is known, its veth not yet (the interface plugin runs after IPAM).
	if len(out.Unresolved) != 1 || out.Unresolved[0] != a3 || !out.Pending() {
		t.Fatalf("unresolved %v, want [%s]", out.Unresolved, a3)
	}
	routes, _ := ctl.Host.PodRoutes()
	if routes[a1] != w.HostLink("p1") || routes[a2] != w.HostLink("p2") || len(routes) != 2 {
		t.Fatalf("pod routes %v", routes)
	}
	for _, tc := range []struct {
		pod  string
		addr netip.Addr
	}{{"p1", a1}, {"p2", a2}} {
		src, err := w.Connect(w.Pods[tc.pod], w.VPC, enihosttest.External)
		if err != nil || src != tc.addr {
			t.Fatalf("%s to the outside: source %s, %v; want %s through its ENI", tc.pod, src, err, tc.addr)
		}
	}
	// Without its from-rule the secondary-ENI pod's traffic follows the main table out of
	// eth0 and the VPC drops it: the path matters, and the next sync puts the rule back.
	w.Must(w.H.RuleDel(ctl.Host.FromRule(a1)))
	if _, err := w.Connect(w.Pods["p1"], w.VPC, enihosttest.External); err == nil {
		t.Fatal("the secondary-ENI pod reached the outside through eth0: the test cannot tell the ENIs apart")
	}
	if out, err := ctl.SyncOnce(ctx); err != nil || out.RulesAdded != 1 {
		t.Fatalf("resync after the rule was lost: %+v %v", out, err)
	}
	if src, err := w.Connect(w.Pods["p1"], w.VPC, enihosttest.External); err != nil || src != a1 {
		t.Fatalf("p1 after resync: %s, %v", src, err)
	}
	// Pod to pod across ENIs: the answer of the secondary-ENI pod stays on the node (the
	// primary pod's to-rule comes before the from-rule).
	if src, err := w.Connect(w.Pods["p2"], w.Pods["p1"], a1); err != nil || src != a2 {
		t.Fatalf("p2 -> p1: source %s, %v", src, err)
	}

	w.AddPod("p3", a3, 1)
	if out, err := ctl.SyncOnce(ctx); err != nil || out.Pending() || out.PodRoutesSet != 1 {
		t.Fatalf("sync after p3's veth appeared: %+v %v", out, err)
	}
	if src, err := w.Connect(w.Pods["p3"], w.VPC, enihosttest.External); err != nil || src != a3 {
		t.Fatalf("p3 to the outside: %s, %v", src, err)
	}

	// Agent restart: a new controller that cannot see the pods' namespaces keeps the routes.
	restarted := newCtl()
	restarted.NetnsFiles = func() ([]string, error) { return nil, nil }
	if out, err := restarted.SyncOnce(ctx); err != nil || out.Pending() || out.RulesAdded+out.RulesRemoved+out.PodRoutesSet+out.PodRoutesRemoved != 0 {
		t.Fatalf("restart changed something: %+v %v", out, err)
	}

	// DEL of p1: its rules and route go, the others stay.
	pods = pods[1:]
	out, err = ctl.SyncOnce(ctx)
	if err != nil || out.RulesRemoved != 2 || out.PodRoutesRemoved != 1 {
		t.Fatalf("after DEL: %+v %v", out, err)
	}
	if ra, _ := ctl.Host.RulePrefixes(); slices.Contains(ra, netip.PrefixFrom(a1, 32)) {
		t.Fatalf("rule of the deleted pod left: %v", ra)
	}
	if routes, _ := ctl.Host.PodRoutes(); len(routes) != 2 || routes[a1] != 0 {
		t.Fatalf("routes after DEL: %v", routes)
	}
	if src, err := w.Connect(w.Pods["p3"], w.VPC, enihosttest.External); err != nil || src != a3 {
		t.Fatalf("p3 after p1's DEL: %s, %v", src, err)
	}

	// Everything wiped (uninstall), then a new agent: rebuilt from the namespaces.
	if err := ctl.Host.RemoveAll(); err != nil {
		t.Fatal(err)
	}
	if r, _ := ctl.Host.RulePrefixes(); len(r) != 0 {
		t.Fatalf("rules left after RemoveAll: %v", r)
	}
	if routes, _ := ctl.Host.PodRoutes(); len(routes) != 0 {
		t.Fatalf("routes left after RemoveAll: %v", routes)
	}
	if out, err := newCtl().SyncOnce(ctx); err != nil || out.Pending() || out.PodRoutesSet != 2 {
		t.Fatalf("rebuild: %+v %v", out, err)
	}
	if src, err := w.Connect(w.Pods["p3"], w.VPC, enihosttest.External); err != nil || src != a3 {
		t.Fatalf("p3 after rebuild: %s, %v", src, err)
	}
}

// TestControllerRun: Run syncs at start, retries while a veth is missing and follows
// Trigger.
func TestControllerRun(t *testing.T) {
	w := enihosttest.New(t)
	a1 := netip.MustParseAddr("10.1.1.60")
	var pods []enihost.Pod
	state := make(chan []enihost.Pod, 1)
	state <- nil
	cur := func(context.Context) ([]enihost.ENI, []enihost.Pod, error) {
		select {
		case p := <-state:
			pods = p
		default:
		}
		return w.ENIs, append([]enihost.Pod(nil), pods...), nil
	}
	ctl := &enihost.Controller{Host: &enihost.Host{Handle: w.H}, State: cur, NetnsFiles: w.NetnsFiles, Retry: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx) }()
	defer func() { cancel(); <-done }()
	state <- []enihost.Pod{{Addr: a1, ENIIndex: 1}}
	ctl.Trigger()
	w.AddPod("p1", a1, 1) // after the address: found by a retry
	link := w.HostLink("p1")
	routed := func(context.Context) (bool, error) { r, err := ctl.Host.PodRoutes(); return r[a1] == link, err }
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, routed); err != nil {
		t.Fatalf("the pod's route never appeared: %v", err)
	}
}

// TestControllerRoutesIPv6PrefixThroughItsENI: a dual-stack pod whose IPv6 address comes
// from the /80 delegated to the secondary ENI reaches an external IPv6 address from that
// address through that ENI (the VPC drops it from any other), and its IPv4 address from its
// own ENI too; the prefix's rules go when the prefix goes, with the table's IPv6 route.
func TestControllerRoutesIPv6PrefixThroughItsENI(t *testing.T) {
	w := enihosttest.New(t)
	prefix := netip.MustParsePrefix("2600:1f18:0:1:a::/80")
	a4, a6 := netip.MustParseAddr("10.1.1.70"), netip.MustParseAddr("2600:1f18:0:1:a::5")
	w.AddPod("p6", a4, 1)
	w.AddAddr("p6", a6, 1)
	enis := append([]enihost.ENI(nil), w.ENIs...)
	enis[1].IPv6Prefixes = []netip.Prefix{prefix}
	pods := []enihost.Pod{{Addr: a4, ENIIndex: 1}, {Addr: a6, ENIIndex: 1}}
	state := func(context.Context) ([]enihost.ENI, []enihost.Pod, error) {
		return enis, append([]enihost.Pod(nil), pods...), nil
	}
	ctl := &enihost.Controller{Host: &enihost.Host{Handle: w.H}, State: state, NetnsFiles: w.NetnsFiles}
	ctx := context.Background()
	if out, err := ctl.SyncOnce(ctx); err != nil || out.Pending() || out.PodRoutesSet != 2 {
		t.Fatalf("sync: %+v %v", out, err)
	}
	for _, c := range []struct{ to, want netip.Addr }{{enihosttest.External6, a6}, {enihosttest.External, a4}} {
		if src, err := w.Connect(w.Pods["p6"], w.VPC, c.to); err != nil || src != c.want {
			t.Fatalf("p6 to %s: source %s, %v; want %s through the secondary ENI", c.to, src, err, c.want)
		}
	}
	// Without the prefix's from-rule the packet leaves through eth0, and the VPC drops it;
	// the next sync puts the rule back.
	w.Must(w.H.RuleDel(ctl.Host.FromPrefixRule(prefix)))
	if _, err := w.Connect(w.Pods["p6"], w.VPC, enihosttest.External6); err == nil {
		t.Fatal("the pod reached the outside from its IPv6 address through eth0: the test cannot tell the ENIs apart")
	}
	if out, err := ctl.SyncOnce(ctx); err != nil || out.RulesAdded != 1 {
		t.Fatalf("resync after the rule was lost: %+v %v", out, err)
	}
	if src, err := w.Connect(w.Pods["p6"], w.VPC, enihosttest.External6); err != nil || src != a6 {
		t.Fatalf("p6 after resync: %s, %v", src, err)
	}
	// The prefix goes (its pod's IPv6 address first): its rules, its pod route and the
	// table's IPv6 route go; IPv4 is untouched.
	enis[1].IPv6Prefixes = nil
	pods = pods[:1]
	out, err := ctl.SyncOnce(ctx)
	if err != nil || out.RulesRemoved != 2 || out.TableRoutesRemoved != 1 || out.PodRoutesRemoved != 1 {
		t.Fatalf("prefix gone: %+v %v", out, err)
	}
	if rs, _ := ctl.Host.RulePrefixes(); slices.ContainsFunc(rs, func(p netip.Prefix) bool { return p.Addr().Is6() }) {
		t.Fatalf("IPv6 rules left: %v", rs)
	}
	if src, err := w.Connect(w.Pods["p6"], w.VPC, enihosttest.External); err != nil || src != a4 {
		t.Fatalf("p6's IPv4 after the prefix went: %s, %v", src, err)
	}
}

// TestSyncSetsENIMTU: with Host.MTU set (cluster.eni.mtu, the chart's eni.mtu), host routing
// gives the secondary ENI's link that MTU as it brings it up, as the AWS VPC CNI sets
// AWS_VPC_ENI_MTU; the primary ENI stays as the OS set it, and without MTU nothing changes.
func TestSyncSetsENIMTU(t *testing.T) {
	w := enihosttest.New(t)
	mtu := func(name string) int {
		t.Helper()
		l, err := w.H.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return l.Attrs().MTU
	}
	pods := []enihost.Pod{{Addr: netip.MustParseAddr("10.1.1.50"), ENIIndex: 1}}
	if _, err := (&enihost.Host{Handle: w.H}).Sync(w.ENIs, pods); err != nil {
		t.Fatal(err)
	}
	if mtu("eth0") != 1500 || mtu("eth1") != 1500 {
		t.Fatalf("without MTU: eth0 %d, eth1 %d, want both left at 1500", mtu("eth0"), mtu("eth1"))
	}
	res, err := (&enihost.Host{Handle: w.H, MTU: 9001}).Sync(w.ENIs, pods)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("sync: %+v %v", res, err)
	}
	if mtu("eth0") != 1500 || mtu("eth1") != 9001 {
		t.Fatalf("with MTU 9001: eth0 %d (the OS's), eth1 %d (want 9001)", mtu("eth0"), mtu("eth1"))
	}
}
