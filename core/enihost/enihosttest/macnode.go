package enihosttest

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/allot-ipam/allot/test/datapath/topo"
)

// MACNode is a node namespace with two links: ens5, with the primary ENI's MAC and no route,
// and ens6, with another MAC and the IPv4 default route (a VPN, a second default): only the
// MAC tells the primary.
type MACNode struct {
	t       *testing.T
	NS      netns.NsHandle
	H       *netlink.Handle
	Primary net.HardwareAddr
}

// NewMACNode builds the namespace, removed when the test ends.
func NewMACNode(t *testing.T, primary net.HardwareAddr) *MACNode {
	t.Helper()
	topo.Require(t)
	w := &World{t: t, prefix: fmt.Sprintf("allot-enih-%d", os.Getpid())}
	t.Cleanup(w.close)
	n := &MACNode{t: t, NS: w.ns("macnode"), Primary: primary}
	h, err := netlink.NewHandleAt(n.NS)
	n.must(err)
	w.H, n.H = h, h
	for _, l := range []struct {
		name string
		mac  net.HardwareAddr
	}{{"ens5", primary}, {"ens6", nil}} {
		n.must(h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l.name, HardwareAddr: l.mac}, PeerName: l.name + "p"}))
		for _, name := range []string{l.name, l.name + "p"} {
			link, err := h.LinkByName(name)
			n.must(err)
			n.must(h.LinkSetUp(link))
		}
	}
	ens6, err := h.LinkByName("ens6")
	n.must(err)
	n.must(h.AddrAdd(ens6, &netlink.Addr{IPNet: ipnet("10.1.0.10/24")}))
	n.must(h.RouteAdd(&netlink.Route{LinkIndex: ens6.Attrs().Index, Dst: ipnet("0.0.0.0/0"), Gw: net.ParseIP("10.1.0.1")}))
	return n
}

func (n *MACNode) must(err error) {
	n.t.Helper()
	if err != nil {
		n.t.Fatal(err)
	}
}

// SetSysctl writes net.ipv6.conf.<link>.<key> in the node.
func (n *MACNode) SetSysctl(link, key, v string) {
	n.t.Helper()
	n.must(topo.In(n.NS, func() error { return os.WriteFile(sysctlPath(link, key), []byte(v), 0o644) }))
}

// Sysctl reads net.ipv6.conf.<link>.<key> in the node.
func (n *MACNode) Sysctl(link, key string) string {
	n.t.Helper()
	var b []byte
	n.must(topo.In(n.NS, func() (err error) { b, err = os.ReadFile(sysctlPath(link, key)); return err }))
	return strings.TrimSpace(string(b))
}

func sysctlPath(link, key string) string { return "/proc/sys/net/ipv6/conf/" + link + "/" + key }
