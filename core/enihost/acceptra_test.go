package enihost

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/datapath/topo"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestPrimaryAcceptRAKeepsTheDefaultRoute reproduces the loss and its fix with a real router
// advertisement: a node that learnt its IPv6 default route from the VPC router (accept_ra 1,
// not forwarding) loses it the moment forwarding is turned on, as ptp does at the first IPv6
// pod; once SetPrimaryAcceptRA set accept_ra to 2 on that link, the route survives it.
func TestPrimaryAcceptRAKeepsTheDefaultRoute(t *testing.T) {
	n := newRANode(t)
	n.loseRoute()
	n.forwarding("0")
	n.learn("the IPv6 default route, learnt again")
	ns, h := n.ns, n.h

	var logs bytes.Buffer
	var res AcceptRAResult
	err := topo.In(ns, func() (err error) {
		res, err = SetPrimaryAcceptRA(t.Context(), AcceptRAOptions{Handle: h, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		return err
	})
	if err != nil || res != (AcceptRAResult{Interface: "eth0", Why: "IPv6 default route", Before: "1", Changed: true}) {
		t.Fatalf("SetPrimaryAcceptRA: %+v %v", res, err)
	}
	if !strings.Contains(logs.String(), "sysctl=net.ipv6.conf.eth0.accept_ra from=1 to=2") {
		t.Errorf("log does not say what changed: %s", logs.String())
	}
	n.forwarding("1")
	if r, desc := raDefaultRoute(h); r == nil {
		t.Fatalf("accept_ra 2: the default route went with forwarding: %s", desc)
	}
	// Again (an agent restart): nothing to do, and the route is still there.
	err = topo.In(ns, func() error {
		res, err = SetPrimaryAcceptRA(t.Context(), AcceptRAOptions{Handle: h})
		return err
	})
	if err != nil || res.Changed || res.Before != "2" || res.Interface != "eth0" {
		t.Fatalf("second run: %+v %v", res, err)
	}
}

// TestPrimaryAcceptRARestoresALostRoute: on a node that already lost its RA-learnt route to
// forwarding (the agent's first start after IPv6 pods ran), setting accept_ra solicits the
// router, and its answer brings the route back, although the node forwards.
func TestPrimaryAcceptRARestoresALostRoute(t *testing.T) {
	n := newRANode(t)
	n.loseRoute()
	ns, vpc, h, router, routerMAC := n.ns, n.vpc, n.h, n.router, n.routerMAC
	// A solicitation goes from the link's link-local address, which is tentative for a
	// moment after the link comes up (duplicate address detection); a node's is long settled.
	testenv.Eventually(t, 30*time.Second, "eth0's link-local address past duplicate address detection", func() (bool, string) {
		l, err := h.LinkByName("eth0")
		if err != nil {
			return false, err.Error()
		}
		as, err := h.AddrList(l, netlink.FAMILY_V6)
		for _, a := range as {
			if a.IP.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				return true, ""
			}
		}
		return false, fmt.Sprint(as, err)
	})
	solicited := answerSolicitations(t, vpc, router, routerMAC)
	var res AcceptRAResult
	err := topo.In(ns, func() (err error) {
		res, err = SetPrimaryAcceptRA(t.Context(), AcceptRAOptions{Interface: "eth0", Handle: h, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
		return err
	})
	if err != nil || !res.Changed || !res.Solicited {
		t.Fatalf("SetPrimaryAcceptRA: %+v %v", res, err)
	}
	testenv.Eventually(t, 30*time.Second, "the default route, from the answer to the solicitation", func() (bool, string) {
		r, desc := raDefaultRoute(h)
		return r != nil && solicited.Load() > 0, fmt.Sprintf("%s; solicitations %d", desc, solicited.Load())
	})
}

// raNode is a node namespace whose eth0 faces a router (vpc0 in vpc), not forwarding yet.
type raNode struct {
	t         *testing.T
	ns, vpc   netns.NsHandle
	h         *netlink.Handle
	router    netip.Addr
	routerMAC net.HardwareAddr
}

func newRANode(t *testing.T) *raNode {
	n := &raNode{t: t, ns: newNS(t), vpc: newPeerNS(t)}
	h, err := netlink.NewHandleAt(n.ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	n.h = h
	n.router, n.routerMAC = raPeer(t, h, n.vpc, "eth0", nil)
	n.forwarding("0")
	return n
}

// forwarding sets net.ipv6.conf.all.forwarding in the node, as ptp does.
func (n *raNode) forwarding(v string) {
	n.t.Helper()
	if err := topo.In(n.ns, func() error { return os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte(v), 0o644) }); err != nil {
		n.t.Fatal(err)
	}
}

// learn has the router advertise until the node's main table holds the RA default route.
func (n *raNode) learn(what string) {
	n.t.Helper()
	testenv.Eventually(n.t, 30*time.Second, what, func() (bool, string) {
		if err := topo.In(n.vpc, func() error { return sendRA(n.router, "vpc0", n.routerMAC) }); err != nil {
			return false, err.Error()
		}
		r, desc := raDefaultRoute(n.h)
		return r != nil && r.Gw.Equal(n.router.AsSlice()), desc
	})
}

// loseRoute reproduces the loss: the node learns its default route from the router at
// accept_ra 1, then forwarding on removes it.
func (n *raNode) loseRoute() {
	n.t.Helper()
	n.learn("the IPv6 default route from the router advertisement")
	n.forwarding("1")
	if r, _ := raDefaultRoute(n.h); r != nil {
		n.t.Fatalf("accept_ra 1: the default route %s survived forwarding; the test no longer reproduces the loss", r)
	}
}

// answerSolicitations answers every router solicitation reaching vpc0 in vpc with an
// advertisement, until the test ends; it counts them.
func answerSolicitations(t *testing.T, vpc netns.NsHandle, router netip.Addr, mac net.HardwareAddr) *atomic.Int32 {
	t.Helper()
	var fd int
	err := topo.In(vpc, func() (err error) {
		ifi, err := net.InterfaceByName("vpc0")
		if err != nil {
			return err
		}
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
		if err != nil {
			return err
		}
		// Solicitations go to all routers (ff02::2), a group only a forwarding link joins.
		allRouters := unix.IPv6Mreq{Multiaddr: netip.MustParseAddr("ff02::2").As16(), Interface: uint32(ifi.Index)}
		if err := unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, &allRouters); err != nil {
			return err
		}
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000})
	})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() { close(done); <-stopped; unix.Close(fd) })
	go func() {
		defer close(stopped)
		buf := make([]byte, 1500)
		for {
			select {
			case <-done:
				return
			default:
			}
			m, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil || m < 1 || buf[0] != 133 {
				continue
			}
			n.Add(1)
			if err := topo.In(vpc, func() error { return sendRA(router, "vpc0", mac) }); err != nil {
				t.Errorf("answering a solicitation: %v", err)
			}
		}
	}()
	return &n
}

// TestPrimaryAcceptRAFindsThePrimary: without an IPv6 default route (not learnt yet, or
// already lost) the primary is the IPv4 default route's link; a given interface is taken
// as is; each failure names the interface and the sysctl.
func TestPrimaryAcceptRAFindsThePrimary(t *testing.T) {
	ns := newNS(t)
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	run := func(o AcceptRAOptions) (res AcceptRAResult, err error) {
		o.Handle = h
		err = topo.In(ns, func() error { res, err = SetPrimaryAcceptRA(t.Context(), o); return err })
		return res, err
	}
	if _, err := run(AcceptRAOptions{}); err == nil || !strings.Contains(err.Error(), "no IPv6 or IPv4 default route") {
		t.Fatalf("no default route: %v", err)
	}
	for _, name := range []string{"ens5", "ens6"} {
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{name, name + "p"} {
			l, err := h.LinkByName(n)
			if err == nil {
				err = h.LinkSetUp(l)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	ens6, _ := h.LinkByName("ens6")
	if err := h.AddrAdd(ens6, &netlink.Addr{IPNet: ipnet("10.1.0.10/24")}); err != nil {
		t.Fatal(err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: ens6.Attrs().Index, Dst: ipnet("0.0.0.0/0"), Gw: net.ParseIP("10.1.0.1")}); err != nil {
		t.Fatal(err)
	}
	res, err := run(AcceptRAOptions{})
	if err != nil || res.Interface != "ens6" || res.Why != "IPv4 default route" || !res.Changed {
		t.Fatalf("by the IPv4 default route: %+v %v", res, err)
	}
	res, err = run(AcceptRAOptions{Interface: "ens5"})
	if err != nil || res.Interface != "ens5" || res.Why != "given" || res.Before != "1" || !res.Changed {
		t.Fatalf("given: %+v %v", res, err)
	}
	for _, c := range []struct {
		o    AcceptRAOptions
		want string
	}{
		{AcceptRAOptions{Interface: "eth9"}, "net.ipv6.conf.eth9.accept_ra: interface eth9: "},
		{AcceptRAOptions{Interface: "ens5", ProcSys: t.TempDir()}, "net.ipv6.conf.ens5.accept_ra: interface ens5 has no IPv6 configuration"},
		{AcceptRAOptions{Interface: "ens5", ProcSys: readOnlySysctl(t, "ens5")}, "net.ipv6.conf.ens5.accept_ra: interface ens5: setting 2 (was "},
	} {
		if _, err := run(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.o, err, c.want)
		}
	}
}

// readOnlySysctl is a sysctl tree whose accept_ra of link cannot be written, even by root:
// a read-only sysctl of the kernel (mode 0444) stands for the read-only /proc/sys of an
// unprivileged container.
func readOnlySysctl(t *testing.T, link string) string {
	dir := t.TempDir()
	p := filepath.Join(dir, "net", "ipv6", "conf", link)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/sys/kernel/osrelease", filepath.Join(p, "accept_ra")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// raPeer makes link (with mac, if set) in h's namespace, its peer vpc0 in vpc holding the
// router's link-local address, both up; it returns the router's address and MAC.
func raPeer(t *testing.T, h *netlink.Handle, vpc netns.NsHandle, link string, mac net.HardwareAddr) (netip.Addr, net.HardwareAddr) {
	t.Helper()
	routerMAC, _ := net.ParseMAC("02:00:00:00:04:a1")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: link, HardwareAddr: mac}, PeerName: "vpc0", PeerHardwareAddr: routerMAC}))
	l, err := h.LinkByName(link)
	must(err)
	peer, err := h.LinkByName("vpc0")
	must(err)
	must(h.LinkSetNsFd(peer, int(vpc)))
	must(h.LinkSetUp(l))
	router := netip.MustParseAddr("fe80::a1")
	must(topo.In(vpc, func() error {
		l, err := netlink.LinkByName("vpc0")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet(router.String() + "/64"), Flags: unix.IFA_F_NODAD}); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	}))
	return router, routerMAC
}

// raDefaultRoute is the main table's IPv6 default route the kernel learnt from an RA.
func raDefaultRoute(h *netlink.Handle) (*netlink.Route, string) {
	rs, err := h.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err.Error()
	}
	for _, r := range rs {
		if (r.Dst == nil || isDefault(r.Dst)) && r.Protocol == unix.RTPROT_RA {
			return &r, r.String()
		}
	}
	return nil, fmt.Sprintf("no RA default route in %v", rs)
}
