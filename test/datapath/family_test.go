package datapath_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/datapath/topo"
)

// TestMasqueradeFamilySwitch: with datapath.enableIPv6Masquerade false (Cilium's
// enable-ipv6-masquerade) the agent keeps the IPv6 pod addresses from the datapath, so IPv4
// traffic to the outside leaves with the node's address and IPv6 traffic with the pod's own
// (the external side routes it back); switching it on again masquerades IPv6 too.
func TestMasqueradeFamilySwitch(t *testing.T) {
	topo.Require(t)
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			if im.needs != "" {
				testenv.RequireBinary(t, im.needs, "Debian package "+im.needs)
			}
			ctx := context.Background()
			tp, err := topo.New()
			if err != nil {
				t.Fatalf("topology: %v", err)
			}
			t.Cleanup(func() { tp.Close() })
			if err := startServers(t, tp.Ext); err != nil {
				t.Fatal(err)
			}
			if err := tp.RouteBack(); err != nil {
				t.Fatal(err)
			}
			dp := im.new(t, "")
			t.Cleanup(func() { _ = inNode(tp, func() error { return dp.Remove(ctx) }) })
			off := false
			for _, tc := range []struct {
				name  string
				dc    config.Datapath
				want4 netip.Addr
				want6 netip.Addr
			}{
				{"ipv6 off", config.Datapath{EnableIPv6Masquerade: &off}, topo.Node4, topo.Pod6[0]},
				{"ipv4 off", config.Datapath{EnableIPv4Masquerade: &off}, topo.Pod4[0], topo.Node6},
				{"both on (default)", config.Datapath{}, topo.Node4, topo.Node6},
			} {
				cfg := baseConfig()
				cfg.PodCIDRs = tc.dc.MasqueradedPodCIDRs(cfg.PodCIDRs)
				if err := inNode(tp, func() error { return dp.Apply(ctx, cfg) }); err != nil {
					t.Fatalf("%s: Apply: %v", tc.name, err)
				}
				for _, f := range []struct {
					ext, want netip.Addr
				}{{topo.Ext4, tc.want4}, {topo.Ext6, tc.want6}} {
					seen, err := tcpWhoami(tp, 0, netip.AddrPortFrom(f.ext, echoPort), 0)
					if err != nil {
						t.Fatalf("%s: to %s: %v", tc.name, f.ext, err)
					}
					if seen.Addr() != f.want {
						t.Fatalf("%s: %s saw %s, want %s", tc.name, f.ext, seen.Addr(), f.want)
					}
				}
			}
		})
	}
}
