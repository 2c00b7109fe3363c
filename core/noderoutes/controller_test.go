package noderoutes

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/datapath/topo"
	"github.com/allot-ipam/allot/test/k8senv"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestControllerOnAPIServer: Nodes and AllotNodes on a real API server drive the routes of
// the "node" namespace of a test topology: a route appears when a peer gets a block, moves
// when the peer's address changes, and goes when the block or the Node goes. A restarted
// controller keeps what is right and removes what is stale.
func TestControllerOnAPIServer(t *testing.T) {
	topo.Require(t)
	env := k8senv.Start(t)
	cl, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	mkNode := func(name string, ips ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := cl.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		for _, ip := range ips {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		if err := cl.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	mkNode("self", topo.NodePeer4.String())
	peer := mkNode("peer", topo.Peer4.String(), topo.Peer6.String())
	an := &v1alpha1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "peer"}}
	an.Spec.IPAM.Pools.Allocated = []v1alpha1.PoolAllocation{{Pool: "default", CIDRs: []string{"10.250.1.0/24", "fd00:250:1::/64"}}}
	if err := cl.Create(ctx, an); err != nil {
		t.Fatal(err)
	}

	run := func() context.CancelFunc {
		c, err := NewController(Options{RESTConfig: env.Config, NodeName: "self", Reconciler: &Reconciler{Handle: h}, Debounce: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(cctx) }()
		return func() { ccancel(); <-done }
	}
	routes := func() map[netip.Prefix]netip.Addr {
		out := map[netip.Prefix]netip.Addr{}
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			rs, err := h.RouteListFiltered(fam, &netlink.Route{Protocol: Protocol}, netlink.RT_FILTER_PROTOCOL)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				d, _ := prefixOf(r.Dst)
				gw, _ := netip.AddrFromSlice(r.Gw)
				out[d] = gw.Unmap()
			}
		}
		return out
	}
	waitRoutes := func(what string, want map[netip.Prefix]netip.Addr) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, what, func() (bool, string) {
			got := routes()
			return maps.Equal(got, want), fmt.Sprintf("routes %v, want %v", got, want)
		})
	}

	stop := run()
	waitRoutes("peer's blocks", map[netip.Prefix]netip.Addr{pfx("10.250.1.0/24"): topo.Peer4, pfx("fd00:250:1::/64"): topo.Peer6})

	// A new block, the IPv6 one released.
	an.Spec.IPAM.Pools.Allocated[0].CIDRs = []string{"10.250.1.0/24", "10.250.2.0/24"}
	if err := cl.Update(ctx, an); err != nil {
		t.Fatal(err)
	}
	waitRoutes("block added and removed", map[netip.Prefix]netip.Addr{pfx("10.250.1.0/24"): topo.Peer4, pfx("10.250.2.0/24"): topo.Peer4})

	// Restart with a stale route left behind: the new controller removes it and keeps the rest.
	stop()
	stale := &netlink.Route{Dst: &net.IPNet{IP: net.ParseIP("10.250.9.0").To4(), Mask: net.CIDRMask(24, 32)}, Gw: topo.Peer4.AsSlice(), Protocol: Protocol}
	if err := h.RouteAdd(stale); err != nil {
		t.Fatal(err)
	}
	stop = run()
	defer func() { stop() }()
	waitRoutes("after restart", map[netip.Prefix]netip.Addr{pfx("10.250.1.0/24"): topo.Peer4, pfx("10.250.2.0/24"): topo.Peer4})

	// The Node goes: its routes go.
	if err := cl.Delete(ctx, peer); err != nil {
		t.Fatal(err)
	}
	waitRoutes("node deleted", map[netip.Prefix]netip.Addr{})
}
