package sharedpool

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pool(name string, age int, v4, v6 *v1alpha1.SharedPoolFamily) v1alpha1.SharedIPPool {
	return v1alpha1.SharedIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1000-int64(age), 0))},
		Spec:       v1alpha1.SharedIPPoolSpec{IPv4: v4, IPv6: v6},
	}
}

func fam(subnet string, ips ...string) *v1alpha1.SharedPoolFamily {
	return &v1alpha1.SharedPoolFamily{Subnet: subnet, IPs: ips}
}

func TestResolveUsable(t *testing.T) {
	f4 := fam("172.18.0.0/24", "172.18.0.0-172.18.0.20", "172.18.0.255")
	f4.ExcludeIPs = []string{"172.18.0.5-172.18.0.6"}
	f4.Gateway = "172.18.0.1"
	f4.Routes = []v1alpha1.RouteSpec{{Dst: "10.96.0.0/12"}, {Dst: "192.168.0.0/16", Gw: "172.18.0.254"}}
	f6 := fam("fd00::/120", "fd00::-fd00::3")
	p := pool("a", 0, f4, f6)
	reserved, errs := ReservedFrom([]v1alpha1.ReservedIP{
		{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: v1alpha1.ReservedIPSpec{IPs: []string{"172.18.0.10", "fd00::3"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: v1alpha1.ReservedIPSpec{IPs: []string{"nope"}}},
	})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `ReservedIP "bad": spec.ips[0]`) {
		t.Fatalf("errs = %v", errs)
	}
	r, err := Resolve(&p, reserved)
	if err != nil {
		t.Fatal(err)
	}
	// .0 network, .1 gateway, .5-.6 excluded, .10 reserved, .255 broadcast.
	if got := r.IPv4.Usable.String(); got != "172.18.0.2-172.18.0.4,172.18.0.7-172.18.0.9,172.18.0.11-172.18.0.20" {
		t.Fatalf("v4 usable = %s", got)
	}
	if got := r.IPv4.Configured.Size(); got != 20 {
		t.Fatalf("v4 configured = %d", got)
	}
	if got := r.IPv6.Usable.String(); got != "fd00::1-fd00::2" {
		t.Fatalf("v6 usable = %s (anycast fd00:: and reserved fd00::3 out)", got)
	}
	if len(r.IPv4.Routes) != 2 || r.IPv4.Routes[1].Gw != netip.MustParseAddr("172.18.0.254") || r.IPv4.Gateway != netip.MustParseAddr("172.18.0.1") {
		t.Fatalf("routes = %+v", r.IPv4.Routes)
	}
	if r.Get(policy.IPv6) != r.IPv6 {
		t.Fatal("Get")
	}
}

func TestResolveErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		f    *v1alpha1.SharedPoolFamily
		want string
	}{
		{fam("172.18.0.1/24", "172.18.0.5"), "spec.ipv4.subnet: \"172.18.0.1/24\" has host bits set"},
		{fam("fd00::/64", "fd00::5"), "spec.ipv4.subnet: \"fd00::/64\" is not an IPv4 subnet"},
		{fam("172.18.0.0/24", "172.18.0.5", "172.18.1.5"), "spec.ipv4.ips[1]: \"172.18.1.5\" is not inside the subnet 172.18.0.0/24"},
		{fam("172.18.0.0/24", "172.18.0.9-172.18.0.1"), "spec.ipv4.ips[0]"},
		{&v1alpha1.SharedPoolFamily{Subnet: "172.18.0.0/24", IPs: []string{"172.18.0.5"}, Gateway: "172.19.0.1"}, "spec.ipv4.gateway"},
		{&v1alpha1.SharedPoolFamily{Subnet: "172.18.0.0/24", IPs: []string{"172.18.0.5"}, Routes: []v1alpha1.RouteSpec{{Dst: "10.0.0.0/8"}}}, "spec.ipv4.routes[0].gw"},
		{&v1alpha1.SharedPoolFamily{Subnet: "172.18.0.0/24", IPs: []string{"172.18.0.5"}, Gateway: "172.18.0.0"}, "spec.ipv4.gateway: 172.18.0.0 is the network address of 172.18.0.0/24"},
		{&v1alpha1.SharedPoolFamily{Subnet: "172.18.0.0/24", IPs: []string{"172.18.0.5"}, Gateway: "172.18.0.255"}, "spec.ipv4.gateway: 172.18.0.255 is the broadcast address of 172.18.0.0/24"},
		{&v1alpha1.SharedPoolFamily{Subnet: "172.18.0.0/24", IPs: []string{"172.18.0.5"}, Gateway: "172.18.0.1", Routes: []v1alpha1.RouteSpec{{Dst: "fd00::/8"}}}, "spec.ipv4.routes[0].dst: \"fd00::/8\" is not an IPv4 CIDR"},
		{&v1alpha1.SharedPoolFamily{Subnet: "172.18.0.0/24", IPs: []string{"172.18.0.5"}, ExcludeIPs: []string{"x"}}, "spec.ipv4.excludeIPs[0]"},
	} {
		p := pool("p", 0, tc.f, nil)
		_, err := Resolve(&p, Reserved{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%+v) = %v, want %q", tc.f, err, tc.want)
		}
	}
}

func TestResolveIPv6GatewayNotSubnetRouter(t *testing.T) {
	p := pool("p", 0, nil, &v1alpha1.SharedPoolFamily{Subnet: "fd00:1::/64", IPs: []string{"fd00:1::5"}, Gateway: "fd00:1::"})
	if _, err := Resolve(&p, Reserved{}); err == nil || !strings.Contains(err.Error(), "spec.ipv6.gateway: fd00:1:: is the network address of fd00:1::/64") {
		t.Errorf("Resolve = %v, want the spec.ipv6.gateway network-address error", err)
	}
	p = pool("p", 0, nil, &v1alpha1.SharedPoolFamily{Subnet: "fd00:1::/64", IPs: []string{"fd00:1::5"}, Gateway: "fd00:1::ffff:ffff:ffff:ffff"})
	if _, err := Resolve(&p, Reserved{}); err != nil {
		t.Errorf("IPv6 has no broadcast address: Resolve = %v", err)
	}
}

func TestConflicts(t *testing.T) {
	pools := []v1alpha1.SharedIPPool{
		pool("new-same-subnet", 1, fam("172.18.0.0/24", "172.18.0.20-172.18.0.30"), nil),
		pool("old", 5, fam("172.18.0.0/24", "172.18.0.10-172.18.0.20"), nil),
		pool("disjoint-same-subnet", 0, fam("172.18.0.0/24", "172.18.0.21-172.18.0.40"), nil),
		pool("other-subnet-overlapping", 3, fam("172.18.0.0/16", "172.18.1.1"), nil),
		pool("v6-only", 4, nil, fam("fd00::/64", "fd00::1-fd00::9")),
		pool("v6-clash", 2, nil, fam("fd00::/64", "fd00::9")),
		pool("broken", 9, fam("172.18.0.0/24", "bogus"), nil),
	}
	got := Conflicts(pools)
	want := map[string]string{
		"new-same-subnet":          `shares 1 address(es) (172.18.0.20) with the older SharedIPPool "old"`,
		"other-subnet-overlapping": `subnet 172.18.0.0/16 overlaps subnet 172.18.0.0/24 of the older SharedIPPool "old"`,
		"v6-clash":                 `spec.ipv6.ips shares 1 address(es) (fd00::9) with the older SharedIPPool "v6-only"`,
		"broken":                   `spec.ipv4.ips[0]`,
	}
	if len(got) != len(want) {
		t.Fatalf("conflicts = %v", got)
	}
	for name, w := range want {
		if !strings.Contains(got[name], w) {
			t.Errorf("%s: %q, want %q", name, got[name], w)
		}
	}
	// disjoint-same-subnet only touches new-same-subnet, which lost: it is kept.
	if _, ok := got["disjoint-same-subnet"]; ok {
		t.Error("a pool overlapping only a losing pool must be kept")
	}
}
