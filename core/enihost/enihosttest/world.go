// Package enihosttest builds a node with ENIs in network namespaces for the tests of ENI host
// routing (core/enihost, and the agent that drives it).
package enihosttest

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/allot-ipam/allot/core/enihost"
	"github.com/allot-ipam/allot/test/datapath/topo"
)

// External and External6 are addresses outside the VPC, on the VPC namespace's loopback.
var (
	External  = netip.MustParseAddr("203.0.113.9")
	External6 = netip.MustParseAddr("2001:db8:ffff::9")
)

var (
	// vpcRouter6 is the VPC router's link-local address on every ENI: the one the VPC
	// reserves for it, host routing's fallback.
	vpcRouter6 = net.IP(enihost.IPv6Router.AsSlice())
	// podGW6 is the pod's IPv6 gateway on its veth (the AWS VPC CNI's IPv6 mode).
	podGW6 = net.ParseIP("fe80::1")
)

func ipnet(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}

// World is a node in network namespaces: "host" is the node, with veth pairs standing in for
// its ENIs (eth0 the primary, eth1 a secondary one); "vpc" is the VPC on the other end of
// them (the subnets' routers, an external address 203.0.113.9, and strict reverse-path
// filtering standing in for the VPC's source check: a packet from a pod address that comes
// out of the wrong ENI is dropped; for IPv6, which has no reverse-path filter, blackhole
// rules per pod address and wrong ENI); pods are namespaces joined to the host by veths, each
// with the AWS VPC CNI's pod side (a /32 and a default route via 169.254.1.1 on-link, a /128
// and a default route via fe80::1). The VPC router answers at fe80:ec2::1 on every ENI.
type World struct {
	t      *testing.T
	prefix string
	names  []string
	Host   netns.NsHandle
	VPC    netns.NsHandle
	H      *netlink.Handle
	// Pods is written by AddPod (the test's goroutine) and read by NetnsFiles, which a
	// running Controller calls from its own: mu orders the two.
	mu   sync.Mutex
	Pods map[string]netns.NsHandle
	ENIs []enihost.ENI
}

func New(t *testing.T) *World {
	t.Helper()
	topo.Require(t)
	w := &World{t: t, prefix: fmt.Sprintf("allot-enih-%d", os.Getpid()), Pods: map[string]netns.NsHandle{}}
	t.Cleanup(w.close)
	w.Host = w.ns("host")
	w.VPC = w.ns("vpc")
	var err error
	if w.H, err = netlink.NewHandleAt(w.Host); err != nil {
		t.Fatal(err)
	}
	vh, err := netlink.NewHandleAt(w.VPC)
	if err != nil {
		t.Fatal(err)
	}
	defer vh.Close()
	macs := []string{"02:00:00:00:00:10", "02:00:00:00:00:11"}
	for i, sub := range []string{"10.1.0", "10.1.1"} {
		mac, _ := net.ParseMAC(macs[i])
		name := fmt.Sprintf("eth%d", i)
		w.Must(w.H.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac}, PeerName: "vpc" + name}))
		peer, err := w.H.LinkByName("vpc" + name)
		w.Must(err)
		w.Must(w.H.LinkSetNsFd(peer, int(w.VPC)))
		l, err := w.H.LinkByName(name)
		w.Must(err)
		w.Must(w.H.AddrAdd(l, &netlink.Addr{IPNet: ipnet(sub + ".10/24")}))
		w.Must(w.H.LinkSetUp(l))
		vl, err := vh.LinkByName("vpc" + name)
		w.Must(err)
		w.Must(vh.AddrAdd(vl, &netlink.Addr{IPNet: ipnet(sub + ".1/24")}))
		w.Must(vh.AddrAdd(vl, &netlink.Addr{IPNet: &net.IPNet{IP: vpcRouter6, Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}))
		w.Must(vh.LinkSetUp(vl))
		w.ENIs = append(w.ENIs, enihost.ENI{Index: i, MAC: macs[i], Subnet: netip.MustParsePrefix(sub + ".0/24")})
	}
	lo, err := vh.LinkByName("lo")
	w.Must(err)
	w.Must(vh.AddrAdd(lo, &netlink.Addr{IPNet: ipnet("203.0.113.9/32")}))
	w.Must(vh.AddrAdd(lo, &netlink.Addr{IPNet: ipnet(External6.String() + "/128")}))
	w.Must(vh.LinkSetUp(lo))
	hlo, err := w.H.LinkByName("lo")
	w.Must(err)
	w.Must(w.H.LinkSetUp(hlo))
	eth0, _ := w.H.LinkByName("eth0")
	w.Must(w.H.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: ipnet("0.0.0.0/0"), Gw: net.ParseIP("10.1.0.1")}))
	w.Must(w.H.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: ipnet("::/0"), Gw: vpcRouter6}))
	w.sysctl(w.Host, "net/ipv4/ip_forward", "1")
	w.sysctl(w.Host, "net/ipv6/conf/all/forwarding", "1")
	for _, k := range []string{"all", "default", "vpceth0", "vpceth1"} {
		w.sysctl(w.VPC, "net/ipv4/conf/"+k+"/rp_filter", "1")
	}
	// The IPv6 source check's blackhole rules (vpcKnows) must come before the local table,
	// whose rule is first (0) by default.
	local := netlink.NewRule()
	local.Family, local.Table, local.Priority = netlink.FAMILY_V6, unix.RT_TABLE_LOCAL, 200
	w.Must(vh.RuleAdd(local))
	local.Priority = 0
	w.Must(vh.RuleDel(local))
	return w
}

func (w *World) Must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *World) sysctl(ns netns.NsHandle, key, v string) {
	w.t.Helper()
	w.Must(topo.In(ns, func() error { return os.WriteFile("/proc/sys/"+key, []byte(v), 0o644) }))
}

func (w *World) ns(suffix string) netns.NsHandle {
	w.t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	w.Must(err)
	defer orig.Close()
	name := w.prefix + "-" + suffix
	ns, err := netns.NewNamed(name)
	w.Must(err)
	w.names = append(w.names, name)
	// No duplicate address detection: a link-local address still tentative would delay
	// neighbour discovery, and with it the first IPv6 packets, by a second or more.
	for _, k := range []string{"all", "default"} {
		w.Must(os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/accept_dad", []byte("0"), 0o644))
	}
	w.Must(netns.Set(orig))
	return ns
}

func (w *World) close() {
	if w.H != nil {
		w.H.Close()
	}
	for _, n := range w.names {
		_ = netns.DeleteNamed(n)
	}
}

// AddPod creates pod namespace name with addr on its eth0, joined to the host by a veth, and
// tells the VPC that addr lives behind ENI eni (what EC2 knows of secondary addresses).
func (w *World) AddPod(name string, addr netip.Addr, eni int) {
	w.t.Helper()
	ns := w.ns(name)
	w.mu.Lock()
	w.Pods[name] = ns
	w.mu.Unlock()
	host := "veth" + name
	w.Must(w.H.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: "p" + name}))
	hl, err := w.H.LinkByName(host)
	w.Must(err)
	w.Must(w.H.LinkSetUp(hl))
	peer, err := w.H.LinkByName("p" + name)
	w.Must(err)
	w.Must(w.H.LinkSetNsFd(peer, int(ns)))
	ph, err := netlink.NewHandleAt(ns)
	w.Must(err)
	defer ph.Close()
	pl, err := ph.LinkByName("p" + name)
	w.Must(err)
	w.Must(ph.LinkSetName(pl, "eth0"))
	w.Must(ph.LinkSetUp(pl))
	w.AddAddr(name, addr, eni)
}

// AddAddr gives pod name another address (a dual-stack pod), with the default route of its
// family, and tells the VPC that it lives behind ENI eni.
func (w *World) AddAddr(name string, addr netip.Addr, eni int) {
	w.t.Helper()
	hl, err := w.H.LinkByName("veth" + name)
	w.Must(err)
	w.mu.Lock()
	ns := w.Pods[name]
	w.mu.Unlock()
	ph, err := netlink.NewHandleAt(ns)
	w.Must(err)
	defer ph.Close()
	pl, err := ph.LinkByName("eth0")
	w.Must(err)
	w.Must(ph.AddrAdd(pl, &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())}, Flags: unix.IFA_F_NODAD}))
	gw := podGW6
	if addr.Is4() {
		gw = net.ParseIP("169.254.1.1").To4()
		w.Must(ph.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Dst: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}))
		w.Must(ph.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Dst: ipnet("0.0.0.0/0"), Gw: gw}))
	} else {
		w.Must(ph.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Dst: ipnet("::/0"), Gw: gw}))
	}
	w.Must(ph.NeighAdd(&netlink.Neigh{LinkIndex: pl.Attrs().Index, IP: gw, HardwareAddr: hl.Attrs().HardwareAddr, State: netlink.NUD_PERMANENT}))
	w.vpcKnows(addr, eni)
}

// vpcKnows tells the VPC that addr lives behind ENI eni: a neighbour entry with the ENI's MAC
// (IPv4: the subnet is on-link; IPv6: a route to the address through the ENI, and the source
// check as blackhole rules for the address arriving through any other ENI).
func (w *World) vpcKnows(addr netip.Addr, eni int) {
	w.t.Helper()
	vh, err := netlink.NewHandleAt(w.VPC)
	w.Must(err)
	defer vh.Close()
	vl, err := vh.LinkByName(fmt.Sprintf("vpceth%d", eni))
	w.Must(err)
	host := &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())}
	if addr.Is6() {
		w.Must(vh.RouteAdd(&netlink.Route{LinkIndex: vl.Attrs().Index, Dst: host, Scope: netlink.SCOPE_LINK}))
		for i := range w.ENIs {
			if i == eni {
				continue
			}
			r := netlink.NewRule()
			r.Family, r.Src, r.IifName, r.Type, r.Priority = netlink.FAMILY_V6, host, fmt.Sprintf("vpceth%d", i), unix.RTN_BLACKHOLE, 100
			w.Must(vh.RuleAdd(r))
		}
	}
	mac, _ := net.ParseMAC(w.ENIs[eni].MAC)
	w.Must(vh.NeighAdd(&netlink.Neigh{LinkIndex: vl.Attrs().Index, IP: addr.AsSlice(), HardwareAddr: mac, State: netlink.NUD_PERMANENT}))
}

func (w *World) HostLink(pod string) int {
	w.t.Helper()
	l, err := w.H.LinkByName("veth" + pod)
	w.Must(err)
	return l.Attrs().Index
}

// NetnsFiles are the pods' namespace files (only this test's).
func (w *World) NetnsFiles() ([]string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for name := range w.Pods {
		out = append(out, "/var/run/netns/"+w.prefix+"-"+name)
	}
	return out, nil
}

// Connect opens a TCP connection from namespace from to to:port where namespace at listens,
// and returns the source address the listener saw.
func (w *World) Connect(from netns.NsHandle, at netns.NsHandle, to netip.Addr) (netip.Addr, error) {
	return Connect(from, at, to)
}

// Connect opens a TCP connection from namespace from to to:port where namespace at listens,
// and returns the source address the listener saw.
func Connect(from netns.NsHandle, at netns.NsHandle, to netip.Addr) (netip.Addr, error) {
	var ln net.Listener
	if err := topo.In(at, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(to, 0).String())
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
		seen <- netip.MustParseAddrPort(c.RemoteAddr().String()).Addr().Unmap()
		c.Close()
	}()
	err := topo.In(from, func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
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
