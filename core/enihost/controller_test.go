package enihost

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allot-ipam/allot/test/datapath/topo"
)

// world is a node in network namespaces: "host" is the node, with veth pairs standing in for
// its ENIs (eth0 the primary, eth1 a secondary one); "vpc" is the VPC on the other end of
// them (the subnets' routers, an external address 203.0.113.9, and strict reverse-path
// filtering standing in for the VPC's source check: a packet from a pod address that comes
// out of the wrong ENI is dropped); pods are namespaces joined to the host by veths, each
// with the AWS VPC CNI's pod side (a /32 and a default route via 169.254.1.1 on-link).
type world struct {
	t      *testing.T
	prefix string
	names  []string
	host   netns.NsHandle
	vpc    netns.NsHandle
	h      *netlink.Handle
	pods   map[string]netns.NsHandle
	enis   []ENI
}

func newWorld(t *testing.T) *world {
	t.Helper()
	topo.Require(t)
	w := &world{t: t, prefix: fmt.Sprintf("allot-enih-%d", os.Getpid()), pods: map[string]netns.NsHandle{}}
	t.Cleanup(w.close)
	w.host = w.ns("host")
	w.vpc = w.ns("vpc")
	var err error
	if w.h, err = netlink.NewHandleAt(w.host); err != nil {
		t.Fatal(err)
	}
	vh, err := netlink.NewHandleAt(w.vpc)
	if err != nil {
		t.Fatal(err)
	}
	defer vh.Close()
	macs := []string{"02:00:00:00:00:10", "02:00:00:00:00:11"}
	for i, sub := range []string{"10.1.0", "10.1.1"} {
		mac, _ := net.ParseMAC(macs[i])
		name := fmt.Sprintf("eth%d", i)
		w.must(w.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac}, PeerName: "vpc" + name}))
		peer, err := w.h.LinkByName("vpc" + name)
		w.must(err)
		w.must(w.h.LinkSetNsFd(peer, int(w.vpc)))
		l, err := w.h.LinkByName(name)
		w.must(err)
		w.must(w.h.AddrAdd(l, &netlink.Addr{IPNet: ipnet(sub + ".10/24")}))
		w.must(w.h.LinkSetUp(l))
		vl, err := vh.LinkByName("vpc" + name)
		w.must(err)
		w.must(vh.AddrAdd(vl, &netlink.Addr{IPNet: ipnet(sub + ".1/24")}))
		w.must(vh.LinkSetUp(vl))
		w.enis = append(w.enis, ENI{Index: i, MAC: macs[i], Subnet: netip.MustParsePrefix(sub + ".0/24")})
	}
	lo, err := vh.LinkByName("lo")
	w.must(err)
	w.must(vh.AddrAdd(lo, &netlink.Addr{IPNet: ipnet("203.0.113.9/32")}))
	w.must(vh.LinkSetUp(lo))
	hlo, err := w.h.LinkByName("lo")
	w.must(err)
	w.must(w.h.LinkSetUp(hlo))
	eth0, _ := w.h.LinkByName("eth0")
	w.must(w.h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: ipnet("0.0.0.0/0"), Gw: net.ParseIP("10.1.0.1")}))
	w.sysctl(w.host, "net/ipv4/ip_forward", "1")
	for _, k := range []string{"all", "default", "vpceth0", "vpceth1"} {
		w.sysctl(w.vpc, "net/ipv4/conf/"+k+"/rp_filter", "1")
	}
	return w
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) sysctl(ns netns.NsHandle, key, v string) {
	w.t.Helper()
	w.must(topo.In(ns, func() error { return os.WriteFile("/proc/sys/"+key, []byte(v), 0o644) }))
}

func (w *world) ns(suffix string) netns.NsHandle {
	w.t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	w.must(err)
	defer orig.Close()
	name := w.prefix + "-" + suffix
	ns, err := netns.NewNamed(name)
	w.must(err)
	w.names = append(w.names, name)
	w.must(netns.Set(orig))
	return ns
}

func (w *world) close() {
	if w.h != nil {
		w.h.Close()
	}
	for _, n := range w.names {
		_ = netns.DeleteNamed(n)
	}
}

// addPod creates pod namespace name with addr on its eth0, joined to the host by a veth, and
// tells the VPC that addr lives behind ENI eni (what EC2 knows of secondary addresses).
func (w *world) addPod(name string, addr netip.Addr, eni int) {
	w.t.Helper()
	ns := w.ns(name)
	w.pods[name] = ns
	host := "veth" + name
	w.must(w.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: "p" + name}))
	hl, err := w.h.LinkByName(host)
	w.must(err)
	w.must(w.h.LinkSetUp(hl))
	peer, err := w.h.LinkByName("p" + name)
	w.must(err)
	w.must(w.h.LinkSetNsFd(peer, int(ns)))
	ph, err := netlink.NewHandleAt(ns)
	w.must(err)
	defer ph.Close()
	pl, err := ph.LinkByName("p" + name)
	w.must(err)
	w.must(ph.LinkSetName(pl, "eth0"))
	w.must(ph.AddrAdd(pl, &netlink.Addr{IPNet: ipnet(addr.String() + "/32")}))
	w.must(ph.LinkSetUp(pl))
	gw := net.ParseIP("169.254.1.1")
	w.must(ph.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Dst: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}))
	w.must(ph.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Dst: ipnet("0.0.0.0/0"), Gw: gw}))
	w.must(ph.NeighAdd(&netlink.Neigh{LinkIndex: pl.Attrs().Index, IP: gw, HardwareAddr: hl.Attrs().HardwareAddr, State: netlink.NUD_PERMANENT}))
	vh, err := netlink.NewHandleAt(w.vpc)
	w.must(err)
	defer vh.Close()
	vl, err := vh.LinkByName(fmt.Sprintf("vpceth%d", eni))
	w.must(err)
	mac, _ := net.ParseMAC(w.enis[eni].MAC)
	w.must(vh.NeighAdd(&netlink.Neigh{LinkIndex: vl.Attrs().Index, IP: addr.AsSlice(), HardwareAddr: mac, State: netlink.NUD_PERMANENT}))
}

func (w *world) hostLink(pod string) int {
	w.t.Helper()
	l, err := w.h.LinkByName("veth" + pod)
	w.must(err)
	return l.Attrs().Index
}

// netnsFiles are the pods' namespace files (only this test's).
func (w *world) netnsFiles() ([]string, error) {
	var out []string
	for name := range w.pods {
		out = append(out, "/var/run/netns/"+w.prefix+"-"+name)
	}
	return out, nil
}

// connect opens a TCP connection from namespace from to to:port where namespace at listens,
// and returns the source address the listener saw.
func (w *world) connect(from netns.NsHandle, at netns.NsHandle, to netip.Addr) (netip.Addr, error) {
	var ln net.Listener
	if err := topo.In(at, func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(to, 0).String())
		return err
	}); err != nil {
		return netip.Addr{}, err
	}
	defer ln.Close()
	seen := make(chan netip.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(seen)
			return
		}
		_, _ = io.WriteString(c, "ok")
		seen <- netip.MustParseAddrPort(c.RemoteAddr().String()).Addr()
		c.Close()
	}()
	err := topo.In(from, func() error {
		c, err := net.DialTimeout("tcp4", ln.Addr().String(), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, err = io.ReadAll(c)
		return err
	})
	if err != nil {
		return netip.Addr{}, err
	}
	return <-seen, nil
}

var external = netip.MustParseAddr("203.0.113.9")

// TestControllerRoutesPodTrafficThroughItsENI: pods on a secondary ENI and on the primary
// one reach an external address from their own address, each through the ENI that holds it
// (the VPC's strict reverse-path check drops anything else), and reach each other on the
// node; a pod whose veth appears after its address is routed once it does; a DEL removes the
// pod's rules and route; an agent restart keeps everything and a host wiped clean is
// rebuilt from the pods' namespaces.
func TestControllerRoutesPodTrafficThroughItsENI(t *testing.T) {
	w := newWorld(t)
	a1, a2, a3 := netip.MustParseAddr("10.1.1.50"), netip.MustParseAddr("10.1.0.50"), netip.MustParseAddr("10.1.1.51")
	w.addPod("p1", a1, 1)
	w.addPod("p2", a2, 0)
	pods := []Pod{{Addr: a1, ENIIndex: 1}, {Addr: a2, ENIIndex: 0}, {Addr: a3, ENIIndex: 1}}
	state := func(context.Context) ([]ENI, []Pod, error) { return w.enis, append([]Pod(nil), pods...), nil }
	ctx := context.Background()
	newCtl := func() *Controller { return &Controller{Host: &Host{Handle: w.h}, State: state, NetnsFiles: w.netnsFiles} }
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
	if routes[a1] != w.hostLink("p1") || routes[a2] != w.hostLink("p2") || len(routes) != 2 {
		t.Fatalf("pod routes %v", routes)
	}
	for _, tc := range []struct {
		pod  string
		addr netip.Addr
	}{{"p1", a1}, {"p2", a2}} {
		src, err := w.connect(w.pods[tc.pod], w.vpc, external)
		if err != nil || src != tc.addr {
			t.Fatalf("%s to the outside: source %s, %v; want %s through its ENI", tc.pod, src, err, tc.addr)
		}
	}
	// Without its from-rule the secondary-ENI pod's traffic follows the main table out of
	// eth0 and the VPC drops it: the path matters, and the next sync puts the rule back.
	rules, _ := ctl.Host.rules()
	w.must(w.h.RuleDel(rules[ruleKey{a1, FromPodPriority, TableBase + 1}]))
	if _, err := w.connect(w.pods["p1"], w.vpc, external); err == nil {
		t.Fatal("the secondary-ENI pod reached the outside through eth0: the test cannot tell the ENIs apart")
	}
	if out, err := ctl.SyncOnce(ctx); err != nil || out.RulesAdded != 1 {
		t.Fatalf("resync after the rule was lost: %+v %v", out, err)
	}
	if src, err := w.connect(w.pods["p1"], w.vpc, external); err != nil || src != a1 {
		t.Fatalf("p1 after resync: %s, %v", src, err)
	}
	// Pod to pod across ENIs: the answer of the secondary-ENI pod stays on the node (the
	// primary pod's to-rule comes before the from-rule).
	if src, err := w.connect(w.pods["p2"], w.pods["p1"], a1); err != nil || src != a2 {
		t.Fatalf("p2 -> p1: source %s, %v", src, err)
	}

	w.addPod("p3", a3, 1)
	if out, err := ctl.SyncOnce(ctx); err != nil || out.Pending() || out.PodRoutesSet != 1 {
		t.Fatalf("sync after p3's veth appeared: %+v %v", out, err)
	}
	if src, err := w.connect(w.pods["p3"], w.vpc, external); err != nil || src != a3 {
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
	rules, _ = ctl.Host.rules()
	for k := range rules {
		if k.addr == a1 {
			t.Fatalf("rule of the deleted pod left: %s", k)
		}
	}
	if routes, _ := ctl.Host.PodRoutes(); len(routes) != 2 || routes[a1] != 0 {
		t.Fatalf("routes after DEL: %v", routes)
	}
	if src, err := w.connect(w.pods["p3"], w.vpc, external); err != nil || src != a3 {
		t.Fatalf("p3 after p1's DEL: %s, %v", src, err)
	}

	// Everything wiped (uninstall), then a new agent: rebuilt from the namespaces.
	if err := ctl.Host.RemoveAll(); err != nil {
		t.Fatal(err)
	}
	if r, _ := ctl.Host.rules(); len(r) != 0 {
		t.Fatalf("rules left after RemoveAll: %v", r)
	}
	if routes, _ := ctl.Host.PodRoutes(); len(routes) != 0 {
		t.Fatalf("routes left after RemoveAll: %v", routes)
	}
	if out, err := newCtl().SyncOnce(ctx); err != nil || out.Pending() || out.PodRoutesSet != 2 {
		t.Fatalf("rebuild: %+v %v", out, err)
	}
	if src, err := w.connect(w.pods["p3"], w.vpc, external); err != nil || src != a3 {
		t.Fatalf("p3 after rebuild: %s, %v", src, err)
	}
}

// TestControllerRun: Run syncs at start, retries while a veth is missing and follows
// Trigger.
func TestControllerRun(t *testing.T) {
	w := newWorld(t)
	a1 := netip.MustParseAddr("10.1.1.60")
	var pods []Pod
	state := make(chan []Pod, 1)
	state <- nil
	cur := func(context.Context) ([]ENI, []Pod, error) {
		select {
		case p := <-state:
			pods = p
		default:
		}
		return w.enis, append([]Pod(nil), pods...), nil
	}
	ctl := &Controller{Host: &Host{Handle: w.h}, State: cur, NetnsFiles: w.netnsFiles, Retry: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx) }()
	defer func() { cancel(); <-done }()
	state <- []Pod{{Addr: a1, ENIIndex: 1}}
	ctl.Trigger()
	w.addPod("p1", a1, 1) // after the address: found by a retry
	link := w.hostLink("p1")
	routed := func(context.Context) (bool, error) { r, err := ctl.Host.PodRoutes(); return r[a1] == link, err }
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, routed); err != nil {
		t.Fatalf("the pod's route never appeared: %v", err)
	}
}
