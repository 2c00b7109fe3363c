package noderoutes

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/allot-ipam/allot/test/datapath/topo"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

func TestPlan(t *testing.T) {
	peers := []Peer{
		{Name: "b", IPv4: addr("10.0.0.2"), IPv6: addr("fd00::2"), Blocks: []netip.Prefix{pfx("10.244.2.0/24"), pfx("fd00:244:2::/64")}},
		{Name: "self", IPv4: addr("10.0.0.1"), Blocks: []netip.Prefix{pfx("10.244.1.0/24")}},
		{Name: "c", IPv4: addr("10.0.0.3"), Blocks: []netip.Prefix{pfx("10.244.3.7/24"), pfx("fd00:244:3::/64")}}, // host bits; no IPv6 address
		{Name: "a", IPv4: addr("10.0.0.4"), Blocks: []netip.Prefix{pfx("10.244.2.0/24")}},                         // conflict with b
	}
	got, conflicts := Plan("self", peers)
	want := []Route{
		{Dst: pfx("10.244.2.0/24"), Via: addr("10.0.0.4"), Node: "a"},
		{Dst: pfx("10.244.3.0/24"), Via: addr("10.0.0.3"), Node: "c"},
		{Dst: pfx("fd00:244:2::/64"), Via: addr("fd00::2"), Node: "b"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("plan\n got %v\nwant %v", got, want)
	}
	if len(conflicts) != 1 || conflicts[0].Dst != pfx("10.244.2.0/24") || !slices.Equal(conflicts[0].Nodes, []string{"a", "b"}) {
		t.Fatalf("conflicts %+v", conflicts)
	}
	// Deterministic whatever the input order.
	slices.Reverse(peers)
	if again, _ := Plan("self", peers); !slices.Equal(again, want) {
		t.Fatalf("order-dependent plan: %v", again)
	}
}

// TestSyncInNamespaces: the "node" namespace routes the "peer" namespace's pod block via the
// peer's address on their shared link; a connection to a "pod" address in the peer works only
// with the route; a stale route of ours is removed, a foreign one never touched.
func TestSyncInNamespaces(t *testing.T) {
	topo.Require(t)
	tp, err := topo.New()
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	h, err := netlink.NewHandleAt(tp.Node)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// A pod address in the peer, on its loopback.
	if err := topo.In(tp.Peer, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		for _, a := range []string{"10.250.1.5/32", "fd00:250:1::5/128"} {
			// NODAD: a tentative IPv6 address cannot be bound, and the listener follows at once.
			if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: mustIPNet(a), Flags: unix.IFA_F_NODAD}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var ln4, ln6 net.Listener
	if err := topo.In(tp.Peer, func() (err error) {
		if ln4, err = net.Listen("tcp", "10.250.1.5:0"); err != nil {
			return err
		}
		ln6, err = net.Listen("tcp", "[fd00:250:1::5]:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln4.Close()
	defer ln6.Close()
	go acceptAll(ln4)
	go acceptAll(ln6)
	dial := func(l net.Listener) error {
		return topo.In(tp.Node, func() error {
			d := net.Dialer{Timeout: 2 * time.Second}
			c, err := d.DialContext(context.Background(), "tcp", l.Addr().String())
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	if dial(ln4) == nil {
		t.Fatal("pod reachable before any route")
	}

	r := &Reconciler{Handle: h}
	peers := []Peer{{Name: "peer", IPv4: topo.Peer4, IPv6: topo.Peer6, Blocks: []netip.Prefix{pfx("10.250.1.0/24"), pfx("fd00:250:1::/64")}}}
	plan, _ := Plan("node", peers)
	res, err := r.Sync(plan)
	if err != nil || res.Added != 2 || len(res.Errors) != 0 {
		t.Fatalf("sync: %+v %v", res, err)
	}
	if err := dial(ln4); err != nil {
		t.Fatalf("IPv4 pod not reachable through the node route: %v", err)
	}
	if err := dial(ln6); err != nil {
		t.Fatalf("IPv6 pod not reachable through the node route: %v", err)
	}
	// Idempotent.
	if res, err := r.Sync(plan); err != nil || res.Added+res.Removed+res.Replaced != 0 {
		t.Fatalf("second sync changed something: %+v %v", res, err)
	}
	// A stale route of ours (a block that left, found after a restart) goes; a foreign route
	// to a block is reported, not overridden.
	stale := &netlink.Route{Dst: mustIPNet("10.250.9.0/24"), Gw: topo.Peer4.AsSlice(), Protocol: Protocol}
	foreign := &netlink.Route{Dst: mustIPNet("10.250.7.0/24"), Gw: topo.Peer4.AsSlice(), Protocol: netlink.RouteProtocol(4)}
	for _, rt := range []*netlink.Route{stale, foreign} {
		if err := h.RouteAdd(rt); err != nil {
			t.Fatal(err)
		}
	}
	peers[0].Blocks = append(peers[0].Blocks, pfx("10.250.7.0/24"))
	plan, _ = Plan("node", peers)
	res, err = (&Reconciler{Handle: h}).Sync(plan)
	if err != nil || res.Removed != 1 || len(res.Errors) != 1 {
		t.Fatalf("restart sync: %+v %v", res, err)
	}
	if rs, _ := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: mustIPNet("10.250.7.0/24")}, netlink.RT_FILTER_DST); len(rs) != 1 || rs[0].Protocol != 4 {
		t.Fatalf("foreign route touched: %+v", rs)
	}
	// A next hop that is not on-link is an error naming it, the rest still goes in.
	plan = append(plan, Route{Dst: pfx("10.250.8.0/24"), Via: addr("192.0.2.77"), Node: "far"})
	res, _ = r.Sync(plan)
	if len(res.Errors) != 2 {
		t.Fatalf("errors %v", res.Errors)
	}
	// Uninstall: only ours go.
	if res, err := r.RemoveAll(); err != nil || res.Removed != 2 {
		t.Fatalf("remove all: %+v %v", res, err)
	}
	if dial(ln4) == nil {
		t.Fatal("pod still reachable after the routes were removed")
	}
	if rs, _ := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: mustIPNet("10.250.7.0/24")}, netlink.RT_FILTER_DST); len(rs) != 1 {
		t.Fatal("foreign route removed by RemoveAll")
	}
}

func acceptAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func mustIPNet(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}
