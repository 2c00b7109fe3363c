package enihost

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/allot-ipam/allot/test/datapath/topo"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// newNS makes a network namespace for the test and removes it at the end.
func newNS(t *testing.T) netns.NsHandle {
	t.Helper()
	topo.Require(t)
	return namedNS(t, "allot-enihost-")
}

// namedNS makes a network namespace named prefix + the test's name, leaves the calling
// thread where it was and removes the namespace at the end.
func namedNS(t *testing.T, prefix string) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	name := prefix + t.Name()
	ns, err := netns.NewNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close(); _ = netns.DeleteNamed(name) })
	return ns
}

func ipnet(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}

// TestSyncRoutesPodTrafficThroughItsENI: dummy devices stand for the primary and a
// secondary ENI; a pod address of the secondary ENI leaves through it, via its subnet's
// router, and one of the primary ENI through the main table; rules go with the pod.
func TestSyncRoutesPodTrafficThroughItsENI(t *testing.T) {
	ns := newNS(t)
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	mac1, _ := net.ParseMAC("02:00:00:00:00:01")
	// veth pairs stand for the ENIs (this kernel may lack the dummy driver); the peer ends
	// stay in the namespace, up, so the links have carrier.
	links := map[string]*netlink.Veth{
		"eth0": {LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0p"},
		"eth1": {LinkAttrs: netlink.LinkAttrs{Name: "eth1", HardwareAddr: mac1}, PeerName: "eth1p"},
		"pod0": {LinkAttrs: netlink.LinkAttrs{Name: "pod0"}, PeerName: "pod0p"},
	}
	for _, name := range []string{"eth0", "eth1", "pod0"} {
		l := links[name]
		if err := h.LinkAdd(l); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{name, l.PeerName} {
			ln, err := h.LinkByName(n)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetUp(ln); err != nil {
				t.Fatal(err)
			}
		}
		ln, _ := h.LinkByName(name)
		l.Index = ln.Attrs().Index
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.AddrAdd(links["eth0"], &netlink.Addr{IPNet: ipnet("10.1.0.10/24")}))
	must(h.AddrAdd(links["eth1"], &netlink.Addr{IPNet: ipnet("10.1.1.10/24")}))
	must(h.RouteAdd(&netlink.Route{Dst: ipnet("0.0.0.0/0"), Gw: net.ParseIP("10.1.0.1")}))
	must(topo.In(ns, func() error { return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644) }))

	enis := []ENI{{Index: 0, MAC: "02:00:00:00:00:00", Subnet: netip.MustParsePrefix("10.1.0.0/24")},
		{Index: 1, MAC: "02:00:00:00:00:01", Subnet: netip.MustParsePrefix("10.1.1.0/24")}}
	pods := []Pod{{Addr: netip.MustParseAddr("10.1.1.50"), ENIIndex: 1}, {Addr: netip.MustParseAddr("10.1.0.50"), ENIIndex: 0}}
	host := &Host{Handle: h}
	res, err := host.Sync(enis, pods)
	if err != nil || len(res.Errors) != 0 || res.RulesAdded != 3 {
		t.Fatalf("sync: %+v %v", res, err)
	}
	egress := func(src string) (oif int, gw net.IP) {
		t.Helper()
		rs, err := h.RouteGetWithOptions(net.ParseIP("203.0.113.9"), &netlink.RouteGetOptions{SrcAddr: net.ParseIP(src), Iif: "pod0"})
		if err != nil || len(rs) == 0 {
			t.Fatalf("route get from %s: %v", src, err)
		}
		return rs[0].LinkIndex, rs[0].Gw
	}
	if oif, gw := egress("10.1.1.50"); oif != links["eth1"].Index || !gw.Equal(net.ParseIP("10.1.1.1")) {
		t.Fatalf("secondary-ENI pod leaves through ifindex %d via %s, want eth1 (%d) via 10.1.1.1", oif, gw, links["eth1"].Index)
	}
	if oif, _ := egress("10.1.0.50"); oif != links["eth0"].Index {
		t.Fatalf("primary-ENI pod leaves through ifindex %d, want eth0", oif)
	}
	// A restarted agent with the same state changes nothing.
	if res, err := (&Host{Handle: h}).Sync(enis, pods); err != nil || res.RulesAdded+res.RulesRemoved != 0 {
		t.Fatalf("resync: %+v %v", res, err)
	}
	// The pod goes: its rules go; an ENI not on the host yet is reported for its pods.
	res, err = host.Sync(append(enis, ENI{Index: 2, MAC: "02:00:00:00:00:02", Subnet: netip.MustParsePrefix("10.1.2.0/24")}),
		[]Pod{{Addr: netip.MustParseAddr("10.1.2.7"), ENIIndex: 2}})
	if err != nil || res.RulesRemoved != 3 || len(res.Errors) != 2 {
		t.Fatalf("pod gone: %+v %v", res, err)
	}
	if oif, _ := egress("10.1.1.50"); oif != links["eth0"].Index {
		t.Fatalf("after removal the address should follow the main table, got ifindex %d", oif)
	}
	if _, err := host.Sync(enis, pods); err != nil {
		t.Fatal(err)
	}
	if err := host.RemoveAll(); err != nil {
		t.Fatal(err)
	}
	if rules, _ := host.rules(); len(rules) != 0 {
		t.Fatalf("rules left: %v", rules)
	}
	if rs, _ := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: TableBase + 1}, netlink.RT_FILTER_TABLE); len(rs) != 0 {
		t.Fatalf("table routes left: %v", rs)
	}
}

// TestSyncRoutesIPv6PrefixThroughItsENI: an IPv6 /80 delegated to a secondary ENI (veth
// pairs stand in for the ENIs) sends its pods' packets out of that ENI via the VPC router's
// link-local address, and one of the primary ENI through the main table; the rules name the
// prefix once; a prefix, then an ENI, that goes away leaves no rule or table route behind,
// and RemoveAll leaves nothing.
func TestSyncRoutesIPv6PrefixThroughItsENI(t *testing.T) {
	ns := newNS(t)
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	idx := map[string]int{}
	for i, name := range []string{"eth0", "eth1", "pod0"} {
		mac, _ := net.ParseMAC(fmt.Sprintf("02:00:00:00:01:%02x", i))
		must(h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac}, PeerName: name + "p"}))
		for _, n := range []string{name, name + "p"} {
			ln, err := h.LinkByName(n)
			must(err)
			must(h.LinkSetUp(ln))
			idx[n] = ln.Attrs().Index
		}
	}
	must(topo.In(ns, func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644)
	}))
	// The node's own IPv6 default route, through the primary ENI.
	must(h.RouteAdd(&netlink.Route{LinkIndex: idx["eth0"], Dst: ipnet("::/0"), Gw: net.ParseIP("fe80::1")}))

	p1, p0 := netip.MustParsePrefix("2600:1f18:0:1:a::/80"), netip.MustParsePrefix("2600:1f18:0:0:b::/80")
	a1, a0 := netip.MustParseAddr("2600:1f18:0:1:a::5"), netip.MustParseAddr("2600:1f18:0:0:b::7")
	enis := []ENI{{Index: 0, MAC: "02:00:00:00:01:00", Subnet: netip.MustParsePrefix("10.1.0.0/24"), IPv6Prefixes: []netip.Prefix{p0}},
		{Index: 1, MAC: "02:00:00:00:01:01", Subnet: netip.MustParsePrefix("10.1.1.0/24"), IPv6Prefixes: []netip.Prefix{p1}}}
	pods := []Pod{{Addr: a1, ENIIndex: 1, HostLink: idx["pod0"]}, {Addr: a0, ENIIndex: 0, HostLink: idx["pod0p"]}}
	host := &Host{Handle: h}
	res, err := host.Sync(enis, pods)
	if err != nil || len(res.Errors) != 0 || res.RulesAdded != 3 || res.PodRoutesSet != 2 {
		t.Fatalf("sync: %+v %v", res, err)
	}
	egress := func(src netip.Addr) (oif int, gw net.IP) {
		t.Helper()
		rs, err := h.RouteGetWithOptions(net.ParseIP("2001:db8::9"), &netlink.RouteGetOptions{SrcAddr: src.AsSlice(), Iif: "pod0"})
		if err != nil || len(rs) == 0 {
			t.Fatalf("route get from %s: %v", src, err)
		}
		return rs[0].LinkIndex, rs[0].Gw
	}
	if oif, gw := egress(a1); oif != idx["eth1"] || !gw.Equal(IPv6Router.AsSlice()) {
		t.Fatalf("pod of the secondary ENI's /80 leaves through ifindex %d via %s, want eth1 (%d) via %s", oif, gw, idx["eth1"], IPv6Router)
	}
	if oif, _ := egress(a0); oif != idx["eth0"] {
		t.Fatalf("pod of the primary ENI's /80 leaves through ifindex %d, want eth0", oif)
	}
	// Traffic to a pod stays on the node (the to-prefix rule and the pod's route).
	if rs, err := h.RouteGetWithOptions(a1.AsSlice(), &netlink.RouteGetOptions{SrcAddr: a0.AsSlice(), Iif: "pod0p"}); err != nil || rs[0].LinkIndex != idx["pod0"] {
		t.Fatalf("pod to pod: %v %v", rs, err)
	}
	if got, _ := host.RulePrefixes(); len(got) != 3 || got[0] != p0 || got[1] != p1 {
		t.Fatalf("rules name %v, want the two prefixes (the secondary's twice)", got)
	}
	if res, err := (&Host{Handle: h}).Sync(enis, pods); err != nil || res.RulesAdded+res.RulesRemoved+res.PodRoutesSet+res.TableRoutesRemoved != 0 {
		t.Fatalf("resync: %+v %v", res, err)
	}
	v6Table := func() []netlink.Route {
		rs, err := h.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: TableBase + 1}, netlink.RT_FILTER_TABLE)
		must(err)
		return rs
	}
	if len(v6Table()) != 1 {
		t.Fatalf("table %d IPv6 routes: %v", TableBase+1, v6Table())
	}

	// The secondary ENI's prefix goes (its pod went first): its rules and its IPv6 route go,
	// its IPv4 routes stay.
	enis[1].IPv6Prefixes = nil
	res, err = host.Sync(enis, pods[1:])
	if err != nil || res.RulesRemoved != 2 || res.TableRoutesRemoved != 1 || res.PodRoutesRemoved != 1 {
		t.Fatalf("prefix gone: %+v %v", res, err)
	}
	if rs := v6Table(); len(rs) != 0 {
		t.Fatalf("IPv6 table routes left: %v", rs)
	}
	if oif, _ := egress(a1); oif != idx["eth0"] {
		t.Fatalf("after removal the prefix should follow the main table, got ifindex %d", oif)
	}
	// The ENI goes: its IPv4 routes too.
	if res, err := host.Sync(enis[:1], pods[1:]); err != nil || res.TableRoutesRemoved != 2 {
		t.Fatalf("ENI gone: %+v %v", res, err)
	}
	enis[1].IPv6Prefixes = []netip.Prefix{p1}
	if _, err := host.Sync(enis, pods); err != nil {
		t.Fatal(err)
	}
	must(host.RemoveAll())
	if rules, _ := host.rules(); len(rules) != 0 {
		t.Fatalf("rules left: %v", rules)
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		if rs, _ := h.RouteListFiltered(fam, &netlink.Route{Table: TableBase + 1}, netlink.RT_FILTER_TABLE); len(rs) != 0 {
			t.Fatalf("table routes left: %v", rs)
		}
	}
	if routes, _ := host.PodRoutes(); len(routes) != 0 {
		t.Fatalf("pod routes left: %v", routes)
	}
}

// TestIPv6RouterLearntPerENI: the IPv6 default route of a secondary ENI's table goes via
// the router the kernel learnt on that ENI's link: an RA-installed default route's next hop
// first, else a neighbour flagged as a router, else IPv6Router; a change shows at the next sync,
// and a router learnt stays once the kernel forgets it.
func TestIPv6RouterLearntPerENI(t *testing.T) {
	ns := newNS(t)
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mac, _ := net.ParseMAC("02:00:00:00:02:01")
	must(h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth1", HardwareAddr: mac}, PeerName: "eth1p"}))
	var eth1 int
	for _, n := range []string{"eth1", "eth1p"} {
		l, err := h.LinkByName(n)
		must(err)
		must(h.LinkSetUp(l))
		if n == "eth1" {
			eth1 = l.Attrs().Index
		}
	}
	enis := []ENI{{Index: 1, MAC: mac.String(), IPv6Prefixes: []netip.Prefix{netip.MustParsePrefix("2600:1f18:0:1:a::/80")}}}
	host := &Host{Handle: h}
	wantVia := func(want string) {
		t.Helper()
		if res, err := host.Sync(enis, nil); err != nil || len(res.Errors) != 0 {
			t.Fatalf("sync: %+v %v", res, err)
		}
		rs, err := h.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: TableBase + 1}, netlink.RT_FILTER_TABLE)
		must(err)
		if len(rs) != 1 || !rs[0].Gw.Equal(net.ParseIP(want)) || rs[0].LinkIndex != eth1 {
			t.Fatalf("table %d: %v, want one default route via %s dev eth1", TableBase+1, rs, want)
		}
	}
	wantVia(IPv6Router.String())

	// A router advertisement on eth1, as the kernel records it: default via the router's
	// link-local address, proto ra. One on another link does not count.
	ra := &netlink.Route{LinkIndex: eth1, Dst: ipnet("::/0"), Gw: net.ParseIP("fe80::a1"), Protocol: unix.RTPROT_RA, Priority: 1024}
	must(h.RouteAdd(ra))
	wantVia("fe80::a1")
	must(h.RouteDel(ra))

	// No RA route, but a neighbour the kernel marked as a router.
	nb := &netlink.Neigh{LinkIndex: eth1, Family: netlink.FAMILY_V6, IP: net.ParseIP("fe80::b2"),
		HardwareAddr: mac, State: netlink.NUD_REACHABLE, Flags: netlink.NTF_ROUTER}
	must(h.NeighAdd(nb))
	wantVia("fe80::b2")
	// The neighbour entry expires: the router learnt stays, in this process and in a
	// restarted agent's (from the ENI's table).
	must(h.NeighDel(nb))
	wantVia("fe80::b2")
	host = &Host{Handle: h}
	wantVia("fe80::b2")
}
