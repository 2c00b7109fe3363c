package agent

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

func TestPoolRoutingErrorsNameTheField(t *testing.T) {
	v4 := func(gw string, routes ...v1alpha1.RouteSpec) *v1alpha1.PoolFamily {
		return &v1alpha1.PoolFamily{CIDRs: []string{"10.8.0.0/16", "10.9.0.0/16"}, MaskSize: 24, Gateway: gw, Routes: routes}
	}
	for _, tc := range []struct {
		fam  policy.Family
		f    *v1alpha1.PoolFamily
		want string
	}{
		{policy.IPv4, v4("10.8.0.0"), "spec.ipv4.gateway: 10.8.0.0 is the network address of 10.8.0.0/16"},
		{policy.IPv4, v4("10.9.255.255"), "spec.ipv4.gateway: 10.9.255.255 is the broadcast address of 10.9.0.0/16"},
		{policy.IPv4, v4("10.10.0.1"), "spec.ipv4.gateway: 10.10.0.1 lies in none of spec.ipv4.cidrs"},
		{policy.IPv4, v4("fd00::1"), "spec.ipv4.gateway: \"fd00::1\" is not an IPv4 address"},
		{policy.IPv4, v4("10.8.0.1", v1alpha1.RouteSpec{Dst: "10.96.0.0/12"}, v1alpha1.RouteSpec{Dst: "fd00::/8"}), "spec.ipv4.routes[1].dst"},
		{policy.IPv4, v4("", v1alpha1.RouteSpec{Dst: "10.96.0.0/12", Gw: "x"}), "spec.ipv4.routes[0].gw: \"x\" is not an IPv4 address"},
		{policy.IPv6, &v1alpha1.PoolFamily{CIDRs: []string{"fd00:8::/96"}, MaskSize: 112, Gateway: "fd00:8::"}, "spec.ipv6.gateway: fd00:8:: is the network address of fd00:8::/96"},
	} {
		if _, err := PoolRouting(tc.fam, tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PoolRouting(%s, %+v) = %v, want %q", tc.fam, tc.f, err, tc.want)
		}
	}
	r, err := PoolRouting(policy.IPv4, v4("10.9.0.1", v1alpha1.RouteSpec{Dst: "10.96.0.1/12"}, v1alpha1.RouteSpec{Dst: "192.168.0.0/16", Gw: "10.9.0.254"}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Gateway != netip.MustParseAddr("10.9.0.1") || len(r.Subnets) != 2 || len(r.Routes) != 2 ||
		r.Routes[0].Dst != netip.MustParsePrefix("10.96.0.0/12") || r.Routes[0].GW.IsValid() || r.Routes[1].GW != netip.MustParseAddr("10.9.0.254") {
		t.Errorf("PoolRouting = %+v", r)
	}
	if r, err := PoolRouting(policy.IPv6, nil); err != nil || r.Gateway.IsValid() || r.Routes != nil {
		t.Errorf("nil family: %+v %v", r, err)
	}
}
