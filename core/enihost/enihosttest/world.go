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

	"github.com/allot-ipam/allot/core/enihost"
	"github.com/allot-ipam/allot/test/datapath/topo"
)

// External is an address outside the VPC, on the VPC namespace's loopback.
var External = netip.MustParseAddr("203.0.113.9")

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
// out of the wrong ENI is dropped); pods are namespaces joined to the host by veths, each
// with the AWS VPC CNI's pod side (a /32 and a default route via 169.254.1.1 on-link).
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
		w.Must(vh.LinkSetUp(vl))
		w.ENIs = append(w.ENIs, enihost.ENI{Index: i, MAC: macs[i], Subnet: netip.MustParsePrefix(sub + ".0/24")})
	}
	lo, err := vh.LinkByName("lo")
	w.Must(err)
	w.Must(vh.AddrAdd(lo, &netlink.Addr{IPNet: ipnet("203.0.113.9/32")}))
	w.Must(vh.LinkSetUp(lo))
	hlo, err := w.H.LinkByName("lo")
	w.Must(err)
	w.Must(w.H.LinkSetUp(hlo))
	eth0, _ := w.H.LinkByName("eth0")
	w.Must(w.H.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: ipnet("0.0.0.0/0"), Gw: net.ParseIP("10.1.0.1")}))
	w.sysctl(w.Host, "net/ipv4/ip_forward", "1")
	for _, k := range []string{"all", "default", "vpceth0", "vpceth1"} {
		w.sysctl(w.VPC, "net/ipv4/conf/"+k+"/rp_filter", "1")
	}
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
	w.Must(ph.AddrAdd(pl, &netlink.Addr{IPNet: ipnet(addr.String() + "/32")}))
	w.Must(ph.LinkSetUp(pl))
	gw := net.ParseIP("169.254.1.1")
	w.Must(ph.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Dst: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}))
	w.Must(ph.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Dst: ipnet("0.0.0.0/0"), Gw: gw}))
	w.Must(ph.NeighAdd(&netlink.Neigh{LinkIndex: pl.Attrs().Index, IP: gw, HardwareAddr: hl.Attrs().HardwareAddr, State: netlink.NUD_PERMANENT}))
	vh, err := netlink.NewHandleAt(w.VPC)
	w.Must(err)
	defer vh.Close()
	vl, err := vh.LinkByName(fmt.Sprintf("vpceth%d", eni))
	w.Must(err)
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
