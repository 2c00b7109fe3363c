// Package topo builds the network-namespace topology the datapath tests
// and benchmark run in, through netlink only:
//
//	pod1 ─┐                 ┌─ ext   (198.18.0.2, 2001:db8:a110::2; no route to the pods)
//	      ├─ node ── ext0 ──┘
//	pod2 ─┘      └── peer0 ── peer  (10.99.0.2, fd00:a110:99::2; routes the pod CIDR via node)
//
// Pods sit on point-to-point veth pairs (host side lxcpodN, matching the
// default pod-interface pattern "lxc+"). All addresses live only inside
// the namespaces the topology creates; Close deletes them.
package topo

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Fixed addressing of the topology.
var (
	PodCIDR4 = netip.MustParsePrefix("10.244.0.0/24")
	PodCIDR6 = netip.MustParsePrefix("fd00:a110:244::/64")
	Pod4     = [2]netip.Addr{netip.MustParseAddr("10.244.0.2"), netip.MustParseAddr("10.244.0.6")}
	Pod6     = [2]netip.Addr{netip.MustParseAddr("fd00:a110:244::2"), netip.MustParseAddr("fd00:a110:244::6")}
	podGW4   = [2]netip.Addr{netip.MustParseAddr("10.244.0.1"), netip.MustParseAddr("10.244.0.5")}
	podGW6   = [2]netip.Addr{netip.MustParseAddr("fd00:a110:244::1"), netip.MustParseAddr("fd00:a110:244::5")}

	Node4 = netip.MustParseAddr("198.18.0.1") // node address on ext0 (RFC 2544 benchmarking range)
	Node6 = netip.MustParseAddr("2001:db8:a110::1")
	Ext4  = netip.MustParseAddr("198.18.0.2")
	Ext6  = netip.MustParseAddr("2001:db8:a110::2")

	NodePeer4 = netip.MustParseAddr("10.99.0.1")
	NodePeer6 = netip.MustParseAddr("fd00:a110:99::1")
	Peer4     = netip.MustParseAddr("10.99.0.2")
	Peer6     = netip.MustParseAddr("fd00:a110:99::2")
	PeerNet6  = netip.MustParsePrefix("fd00:a110:99::/64")
)

// Interface names in the node namespace.
const (
	EgressLink = "ext0"
	PeerLink   = "peer0"
)

// Topology is a set of namespaces wired as in the package comment.
type Topology struct {
	Prefix string
	Pods   [2]netns.NsHandle
	Node   netns.NsHandle
	Ext    netns.NsHandle
	Peer   netns.NsHandle
	names  []string
}

// CheckPrivileges returns a reason to skip when the process cannot build
// the topology or load eBPF programs, "" otherwise.
func CheckPrivileges() string {
	if os.Geteuid() != 0 {
		return "needs root: creates network namespaces, iptables rules and eBPF programs"
	}
	var hdr unix.CapUserHeader
	var data [2]unix.CapUserData
	hdr.Version = unix.LINUX_CAPABILITY_VERSION_3
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return "cannot read capabilities: " + err.Error()
	}
	has := func(c int) bool { return data[c/32].Effective&(1<<(uint(c)%32)) != 0 }
	if !has(unix.CAP_NET_ADMIN) || !has(unix.CAP_SYS_ADMIN) && !has(unix.CAP_BPF) {
		return "needs CAP_NET_ADMIN and CAP_BPF (or CAP_SYS_ADMIN)"
	}
	return ""
}

// In runs fn with the calling goroutine's OS thread in namespace ns and
// restores the thread's namespace afterwards. Sockets created by fn stay
// in ns; processes started by fn are born in ns.
func In(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("set netns: %w", err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: it dies with the goroutine instead of
		// running other goroutines in the wrong namespace.
		return errors.Join(ferr, fmt.Errorf("restore netns: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// New builds the topology with namespace names starting with a unique
// prefix. On error everything created is removed.
func New() (_ *Topology, err error) {
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	t := &Topology{Prefix: fmt.Sprintf("allotdp-%d-%s", os.Getpid(), hex.EncodeToString(rnd[:]))}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	mk := func(suffix string) (netns.NsHandle, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		orig, err := netns.Get()
		if err != nil {
			return 0, err
		}
		defer orig.Close()
		name := t.Prefix + "-" + suffix
		h, err := netns.NewNamed(name) // switches this thread into it
		if err != nil {
			return 0, fmt.Errorf("create netns %s: %w", name, err)
		}
		t.names = append(t.names, name)
		if err := netns.Set(orig); err != nil {
			return 0, fmt.Errorf("restore netns: %w", err)
		}
		return h, nil
	}
	for i := range t.Pods {
		if t.Pods[i], err = mk(fmt.Sprintf("pod%d", i+1)); err != nil {
			return nil, err
		}
	}
	if t.Node, err = mk("node"); err != nil {
		return nil, err
	}
	if t.Ext, err = mk("ext"); err != nil {
		return nil, err
	}
	if t.Peer, err = mk("peer"); err != nil {
		return nil, err
	}
	if err := t.wire(); err != nil {
		return nil, err
	}
	return t, nil
}

// Name returns the name of a namespace of the topology ("node", "ext",
// "pod1", ...), as listed in /var/run/netns.
func (t *Topology) Name(suffix string) string { return t.Prefix + "-" + suffix }

func hostPrefix(a netip.Addr, bits int) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}, Flags: unix.IFA_F_NODAD}
}

// veth creates a pair with one end in each namespace, addresses them and
// brings both up.
func veth(nsA netns.NsHandle, nameA string, addrsA []*netlink.Addr, nsB netns.NsHandle, nameB string, addrsB []*netlink.Addr) error {
	ha, err := netlink.NewHandleAt(nsA)
	if err != nil {
		return err
	}
	defer ha.Close()
	hb, err := netlink.NewHandleAt(nsB)
	if err != nil {
		return err
	}
	defer hb.Close()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: nameA, MTU: 1500}, PeerName: nameB, PeerNamespace: netlink.NsFd(int(nsB))}
	if err := ha.LinkAdd(v); err != nil {
		return fmt.Errorf("veth %s/%s: %w", nameA, nameB, err)
	}
	for _, side := range []struct {
		h     *netlink.Handle
		name  string
		addrs []*netlink.Addr
	}{{ha, nameA, addrsA}, {hb, nameB, addrsB}} {
		l, err := side.h.LinkByName(side.name)
		if err != nil {
			return err
		}
		for _, a := range side.addrs {
			if err := side.h.AddrAdd(l, a); err != nil {
				return fmt.Errorf("addr %s on %s: %w", a.IPNet, side.name, err)
			}
		}
		if err := side.h.LinkSetUp(l); err != nil {
			return err
		}
	}
	return nil
}

func loUp(ns netns.NsHandle) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	return h.LinkSetUp(lo)
}

func route(ns netns.NsHandle, dst netip.Prefix, gw netip.Addr) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	r := &netlink.Route{Gw: gw.AsSlice()}
	if dst.Bits() > 0 {
		r.Dst = &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())}
	} else if dst.Addr().Is6() {
		r.Dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	if err := h.RouteAdd(r); err != nil {
		return fmt.Errorf("route %s via %s: %w", dst, gw, err)
	}
	return nil
}

func sysctl(ns netns.NsHandle, path, value string) error {
	// /proc/sys/net is resolved against the namespace of the opening
	// thread, hence In.
	return In(ns, func() error { return os.WriteFile("/proc/sys/"+path, []byte(value), 0o644) })
}

// FixedPorts are the source ports tests bind explicitly in the pods; the
// kernel never hands them out as ephemeral ports there.
const FixedPorts = "40000-47999"

func (t *Topology) wire() error {
	for _, ns := range []netns.NsHandle{t.Pods[0], t.Pods[1], t.Node, t.Ext, t.Peer} {
		if err := loUp(ns); err != nil {
			return err
		}
	}
	for i := range t.Pods {
		if err := veth(t.Node, fmt.Sprintf("lxcpod%d", i+1),
			[]*netlink.Addr{hostPrefix(podGW4[i], 30), hostPrefix(podGW6[i], 126)},
			t.Pods[i], "eth0",
			[]*netlink.Addr{hostPrefix(Pod4[i], 30), hostPrefix(Pod6[i], 126)}); err != nil {
			return err
		}
		if err := route(t.Pods[i], netip.MustParsePrefix("0.0.0.0/0"), podGW4[i]); err != nil {
			return err
		}
		if err := route(t.Pods[i], netip.MustParsePrefix("::/0"), podGW6[i]); err != nil {
			return err
		}
		// Tests dial from fixed source ports (FixedPorts) to check that two pods' equal
		// ports get distinct node ports; an ephemeral dial in the same pod must never
		// hold one of them (bind would fail with EADDRINUSE). The setting is per
		// namespace and covers IPv6 too.
		if err := sysctl(t.Pods[i], "net/ipv4/ip_local_reserved_ports", FixedPorts); err != nil {
			return err
		}
	}
	if err := veth(t.Node, EgressLink, []*netlink.Addr{hostPrefix(Node4, 24), hostPrefix(Node6, 64)},
		t.Ext, "eth0", []*netlink.Addr{hostPrefix(Ext4, 24), hostPrefix(Ext6, 64)}); err != nil {
		return err
	}
	if err := veth(t.Node, PeerLink, []*netlink.Addr{hostPrefix(NodePeer4, 24), hostPrefix(NodePeer6, 64)},
		t.Peer, "eth0", []*netlink.Addr{hostPrefix(Peer4, 24), hostPrefix(Peer6, 64)}); err != nil {
		return err
	}
	// The peer is "inside the cluster": it routes the pod CIDR via the
	// node. The external side deliberately has no such route.
	if err := route(t.Peer, PodCIDR4, NodePeer4); err != nil {
		return err
	}
	if err := route(t.Peer, PodCIDR6, NodePeer6); err != nil {
		return err
	}
	for _, kv := range [][2]string{
		{"net/ipv4/ip_forward", "1"},
		{"net/ipv6/conf/all/forwarding", "1"},
	} {
		if err := sysctl(t.Node, kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}

// Close deletes the namespaces (and with them every link, address, rule
// and program inside).
func (t *Topology) Close() error {
	var errs []error
	for _, h := range []netns.NsHandle{t.Pods[0], t.Pods[1], t.Node, t.Ext, t.Peer} {
		if h.IsOpen() {
			h.Close()
		}
	}
	for _, n := range t.names {
		if err := netns.DeleteNamed(n); err != nil {
			errs = append(errs, err)
		}
	}
	t.names = nil
	return errors.Join(errs...)
}

// RouteBack gives the external namespace routes to the pod CIDRs via the
// node, turning the topology into a routed one (the baseline for the
// "none" datapath, which does not masquerade).
func (t *Topology) RouteBack() error {
	if err := route(t.Ext, PodCIDR4, Node4); err != nil {
		return err
	}
	return route(t.Ext, PodCIDR6, Node6)
}

// ethtool commands (linux/ethtool.h) for the legacy per-feature ioctls.
const (
	ethtoolSRXCSUM = 0x15
	ethtoolSTXCSUM = 0x17
)

type ethtoolValue struct{ cmd, data uint32 }

type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte
}

// DisableChecksumOffload turns off TX and RX checksum offload on every
// veth of the topology. Packets then carry complete checksums, which
// receivers verify: a datapath that breaks a checksum makes them drop the
// packet. (With offload on, veth hands CHECKSUM_PARTIAL packets across and
// nobody checks.)
func (t *Topology) DisableChecksumOffload() error {
	for _, ns := range []netns.NsHandle{t.Pods[0], t.Pods[1], t.Node, t.Ext, t.Peer} {
		if err := setChecksumOffload(ns, ethtoolSTXCSUM, ethtoolSRXCSUM); err != nil {
			return err
		}
	}
	return nil
}

// CompleteChecksumsAtNode keeps TX checksum offload in the pods and the
// external namespaces, so their packets reach the node CHECKSUM_PARTIAL
// (only the pseudo-header sum in the L4 checksum field), and turns it off
// on the node's veths and RX offload everywhere else: the node completes
// each checksum in software when it sends the packet on, after the
// datapath translated it, and the receiver verifies it. A datapath that
// updates a partial checksum wrongly makes receivers drop the packet.
func (t *Topology) CompleteChecksumsAtNode() error {
	if err := setChecksumOffload(t.Node, ethtoolSTXCSUM); err != nil {
		return err
	}
	for _, ns := range []netns.NsHandle{t.Pods[0], t.Pods[1], t.Ext, t.Peer} {
		if err := setChecksumOffload(ns, ethtoolSRXCSUM); err != nil {
			return err
		}
	}
	return nil
}

// setChecksumOffload turns off the ethtool features cmds on every veth of ns.
func setChecksumOffload(ns netns.NsHandle, cmds ...uint32) error {
	return In(ns, func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, l := range links {
			if l.Type() != "veth" {
				continue
			}
			for _, cmd := range cmds {
				ev := ethtoolValue{cmd: cmd, data: 0}
				var ifr ifreqData
				copy(ifr.name[:], l.Attrs().Name)
				ifr.data = uintptr(unsafe.Pointer(&ev))
				_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
				runtime.KeepAlive(&ev)
				if errno != 0 {
					return fmt.Errorf("ethtool %#x on %s: %w", cmd, l.Attrs().Name, errno)
				}
			}
		}
		return nil
	})
}

// AddRouteSource adds src as a second address on the node's egress link
// and a default route through the external side that prefers it, for
// masquerade-to-route-source tests.
func (t *Topology) AddRouteSource(src netip.Addr) error {
	h, err := netlink.NewHandleAt(t.Node)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(EgressLink)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(l, hostPrefix(src, 24)); err != nil {
		return fmt.Errorf("addr %s: %w", src, err)
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: Ext4.AsSlice(), Src: src.AsSlice()}
	if err := h.RouteAdd(r); err != nil {
		return fmt.Errorf("default route src %s: %w", src, err)
	}
	return nil
}
