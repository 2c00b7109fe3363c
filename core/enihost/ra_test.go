package enihost

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/datapath/topo"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestIPv6RouterFromRouterAdvertisement: a node forwards (every Kubernetes node does), so
// the kernel takes no route or prefix from a router advertisement on an ENI whose accept_ra
// is not 2; it still records the advertising router as a neighbour flagged as a router, and
// that is where the ENI's table learns its IPv6 default route from. Host routing leaves
// accept_ra as it found it (the AWS VPC CNI sets accept_ra=2 on the primary ENI only), so
// no RA puts a secondary ENI's default route or subnet into the node's main table.
func TestIPv6RouterFromRouterAdvertisement(t *testing.T) {
	ns, vpc := newNS(t), newPeerNS(t)
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
	mac, _ := net.ParseMAC("02:00:00:00:03:01")
	router, routerMAC := raPeer(t, h, vpc, "eth1", mac)
	acceptRA := "/proc/sys/net/ipv6/conf/eth1/accept_ra"
	var before string
	must(topo.In(ns, func() error {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
			return err
		}
		b, err := os.ReadFile(acceptRA)
		before = string(b)
		return err
	}))

	enis := []ENI{{Index: 1, MAC: mac.String(), IPv6Prefixes: []netip.Prefix{netip.MustParsePrefix("2600:1f18:0:1:a::/80")}}}
	host := &Host{Handle: h}
	testenv.Eventually(t, 30*time.Second, "the ENI table's IPv6 default route via the advertising router", func() (bool, string) {
		if err := topo.In(vpc, func() error { return sendRA(router, "vpc0", routerMAC) }); err != nil {
			return false, err.Error()
		}
		if res, err := host.Sync(enis, nil); err != nil || len(res.Errors) != 0 {
			return false, fmt.Sprintf("sync: %+v %v", res, err)
		}
		rs, err := h.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: TableBase + 1}, netlink.RT_FILTER_TABLE)
		if err != nil || len(rs) != 1 {
			return false, fmt.Sprint(rs, err)
		}
		return rs[0].Gw.Equal(router.AsSlice()), fmt.Sprintf("via %s", rs[0].Gw)
	})

	must(topo.In(ns, func() error {
		b, err := os.ReadFile(acceptRA)
		if err == nil && string(b) != before {
			err = fmt.Errorf("%s is %q after host routing, was %q", acceptRA, strings.TrimSpace(string(b)), strings.TrimSpace(before))
		}
		return err
	}))
	main, err := h.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	must(err)
	for _, r := range main {
		if r.Protocol == unix.RTPROT_RA || (r.Dst != nil && r.Dst.String() == "2600:1f18:0:1::/64") {
			t.Errorf("main table route %s from the secondary ENI's router advertisement", r)
		}
	}
}

// newPeerNS makes a second network namespace for the test, standing for the VPC.
func newPeerNS(t *testing.T) netns.NsHandle {
	t.Helper()
	return namedNS(t, "allot-enihost-vpc-")
}

// sendRA sends a router advertisement (RFC 4861 4.2) from router on link, to all nodes, as
// the VPC router does: router lifetime 1800 s, its link-layer address, and an on-link /64.
// The kernel computes an ICMPv6 raw socket's checksum.
func sendRA(router netip.Addr, link string, mac net.HardwareAddr) error {
	ifi, err := net.InterfaceByName(link)
	if err != nil {
		return err
	}
	fd, err := ndpSocket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: router.As16(), ZoneId: uint32(ifi.Index)}); err != nil {
		return fmt.Errorf("bind %s%%%s: %w", router, link, err)
	}
	ra := []byte{134, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(ra[6:], 1800)
	ra = append(append(ra, 1, 1), mac...) // source link-layer address
	pi := []byte{3, 4, 64, 0x80, 0, 0, 0x0e, 0x10, 0, 0, 0x0e, 0x10, 0, 0, 0, 0}
	prefix := netip.MustParseAddr("2600:1f18:0:1::").As16()
	ra = append(append(ra, pi...), prefix[:]...) // prefix information: on-link, not autonomous
	all := netip.MustParseAddr("ff02::1").As16()
	return unix.Sendto(fd, ra, 0, &unix.SockaddrInet6{Addr: all, ZoneId: uint32(ifi.Index)})
}
