package k8se2e

// Multi-pool (IPPool) gateway and routes, through the real allot-cni: Spiderpool's pool
// `gateway` and `routes` fields (https://spidernet-io.github.io/spiderpool/, "SpiderIPPool")
// on an IPPool whose blocks are carved per node as in Cilium's multi-pool IPAM.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/ipam"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

// netPods is a CNI network served from the node's IPPool blocks (not a shared network).
const netPods = "k8s-pod-network"

func ipPool(name string, v4, v6 *allotv1.PoolFamily) *allotv1.IPPool {
	return &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: allotv1.IPPoolSpec{IPv4: v4, IPv6: v6}}
}

// routesOf renders a CNI result's routes as "dst via gw", sorted.
func routesOf(o cniOut) []string {
	var out []string
	for _, r := range o.res.Routes {
		out = append(out, r.Dst.String()+" via "+r.GW.String())
	}
	slices.Sort(out)
	return out
}

func TestMultiPoolGatewayAndRoutes(t *testing.T) {
	se := newSharedEnv(t, map[string]map[string]string{"node-1": nil})
	se.startOperator(time.Second)
	ctx := context.Background()
	se.create(
		ipPool("underlay",
			&allotv1.PoolFamily{CIDRs: []string{"10.60.0.0/16"}, MaskSize: 24, Gateway: "10.60.0.1",
				Routes: []allotv1.RouteSpec{{Dst: "10.96.0.0/12"}, {Dst: "192.168.0.0/16", Gw: "10.60.0.254"}}},
			&allotv1.PoolFamily{CIDRs: []string{"fd00:60::/64"}, MaskSize: 120, Gateway: "fd00:60::1",
				Routes: []allotv1.RouteSpec{{Dst: "fd00:96::/108"}}}),
		ipPool("plain",
			&allotv1.PoolFamily{CIDRs: []string{"10.61.0.0/16"}, MaskSize: 26},
			&allotv1.PoolFamily{CIDRs: []string{"fd00:61::/64"}, MaskSize: 120}),
	)
	n1 := se.startAgent("node-1")
	se.namespace("apps", nil, nil)

	t.Run("pool gateway and routes in the CNI result, v4 and v6", func(t *testing.T) {
		se := se.with(t)
		p := se.pod("apps", "under-1", "node-1", nil, map[string]string{annotation: "underlay"})
		out := se.add(cniCall{node: n1, pod: p, network: netPods})
		if len(out.res.IPs) != 2 {
			t.Fatalf("want one address per family: %s", out)
		}
		got := map[string]string{}
		for _, ip := range out.res.IPs {
			got[ip.Address.String()[:4]] = ip.Address.String() + " gw " + ip.Gateway.String()
			if a := ip.Address.IP.String(); a == "10.60.0.1" || a == "fd00:60::1" {
				t.Errorf("the pool's gateway %s was handed to a pod", a)
			}
		}
		// The address carries the pool CIDR's prefix length: the gateway is on-link.
		if v4 := got["10.6"]; !strings.HasPrefix(v4, "10.60.") || !strings.HasSuffix(v4, "/16 gw 10.60.0.1") {
			t.Errorf("IPv4 %q, want an address of 10.60.0.0/16 with prefix /16 and gateway 10.60.0.1", v4)
		}
		if v6 := got["fd00"]; !strings.HasPrefix(v6, "fd00:60::") || !strings.HasSuffix(v6, "/64 gw fd00:60::1") {
			t.Errorf("IPv6 %q, want an address of fd00:60::/64 with prefix /64 and gateway fd00:60::1", v6)
		}
		want := []string{"0.0.0.0/0 via 10.60.0.1", "10.96.0.0/12 via 10.60.0.1", "192.168.0.0/16 via 10.60.0.254",
			"::/0 via fd00:60::1", "fd00:96::/108 via fd00:60::1"}
		slices.Sort(want)
		if got := routesOf(out); !slices.Equal(got, want) {
			t.Errorf("routes %q, want %q", got, want)
		}
	})

	t.Run("without pool fields: the block's gateway and default routes", func(t *testing.T) {
		se := se.with(t)
		p := se.pod("apps", "plain-1", "node-1", nil, map[string]string{annotation: "plain"})
		out := se.add(cniCall{node: n1, pod: p, network: netPods})
		if len(out.res.IPs) != 2 {
			t.Fatalf("want one address per family: %s", out)
		}
		var want []string
		for _, ip := range out.res.IPs {
			ones, _ := ip.Address.Mask.Size()
			block := ip.Address.IP.Mask(ip.Address.Mask)
			if ones != 26 && ones != 120 {
				t.Errorf("%s: want the block's prefix length (26 or 120)", ip.Address.String())
			}
			gw := ipam.BlockGateway(mustPrefix(t, fmt.Sprintf("%s/%d", block, ones)))
			if ip.Gateway.String() != gw.String() {
				t.Errorf("%s: gateway %s, want the block's first usable address %s", ip.Address.String(), ip.Gateway, gw)
			}
			dst := "0.0.0.0/0"
			if gw.Is6() {
				dst = "::/0"
			}
			want = append(want, dst+" via "+gw.String())
		}
		slices.Sort(want)
		if got := routesOf(out); !slices.Equal(got, want) {
			t.Errorf("routes %q, want %q", got, want)
		}
	})

	t.Run("admission refuses a gateway outside the CIDRs, the network address, and a change", func(t *testing.T) {
		se := se.with(t)
		for _, tc := range []struct {
			f    *allotv1.PoolFamily
			want string
		}{
			{&allotv1.PoolFamily{CIDRs: []string{"10.62.0.0/16"}, MaskSize: 24, Gateway: "10.63.0.1"}, "spec.ipv4.gateway: Invalid value"},
			{&allotv1.PoolFamily{CIDRs: []string{"10.62.0.0/16"}, MaskSize: 24, Gateway: "10.62.0.0"}, "gateway must not be the network address of a CIDR"},
			{&allotv1.PoolFamily{CIDRs: []string{"10.62.0.0/16"}, MaskSize: 24, Gateway: "nope"}, "must be an IP address"},
			{&allotv1.PoolFamily{CIDRs: []string{"10.62.0.0/16"}, MaskSize: 24, Routes: []allotv1.RouteSpec{{Dst: "10.96.0.0"}}}, "spec.ipv4.routes[0].dst"},
		} {
			err := se.c.Create(ctx, ipPool("bad", tc.f, nil))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("create with %+v: %v, want an error containing %q", tc.f, err, tc.want)
			}
		}
		var p allotv1.IPPool
		if err := se.c.Get(ctx, ktypes.NamespacedName{Name: "underlay"}, &p); err != nil {
			t.Fatal(err)
		}
		p.Spec.IPv4.Gateway = "10.60.0.2"
		if err := se.c.Update(ctx, &p); err == nil || !strings.Contains(err.Error(), "gateway is immutable") {
			t.Errorf("changing the gateway: %v, want it refused as immutable", err)
		}
	})

	t.Run("a broadcast gateway: Ready is False naming the field, pods get the block's gateway", func(t *testing.T) {
		se := se.with(t)
		se.create(ipPool("bcast", &allotv1.PoolFamily{CIDRs: []string{"10.64.0.0/24"}, MaskSize: 28, Gateway: "10.64.0.255"}, nil))
		eventually(t, "bcast Ready=False", 20*time.Second, func() (bool, string) {
			var p allotv1.IPPool
			if err := se.c.Get(ctx, ktypes.NamespacedName{Name: "bcast"}, &p); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(p.Status.Conditions, allotv1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionFalse &&
				strings.Contains(c.Message, "spec.ipv4.gateway: 10.64.0.255 is the broadcast address of 10.64.0.0/24"), fmt.Sprintf("%+v", c)
		})
		p := se.pod("apps", "bcast-1", "node-1", nil, map[string]string{annotation: "bcast"})
		// node-1's IPPool watch may lag the status the test just read: the agent then reads
		// the pool from the API server (core/agent/livepools.go), and the first ADD succeeds.
		out := se.add(cniCall{node: n1, pod: p, network: netPods})
		if len(out.res.IPs) != 1 || out.res.IPs[0].Gateway.String() == "10.64.0.255" {
			t.Errorf("result %s: want one address with its block's gateway", out)
		}
	})
}

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
