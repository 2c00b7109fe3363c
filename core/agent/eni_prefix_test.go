package agent

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

func TestENIIPv6PrefixesAndFamilies(t *testing.T) {
	node := &v1alpha1.AllotNode{Status: v1alpha1.AllotNodeStatus{ENI: &v1alpha1.ENIStatus{Interfaces: []v1alpha1.ENIInterface{
		{ID: "eni-1", Prefixes: []string{"10.0.0.16/28", "2600:1f18::/80", "2600:1f18::1/80", "junk"}},
	}}}}
	got := eniIPv6Prefixes(node)
	if want := []netip.Prefix{netip.MustParsePrefix("2600:1f18::/80")}; !reflect.DeepEqual(got, want) {
		t.Fatalf("prefixes %v, want %v (IPv4 prefixes come through the pool; host bits refused)", got, want)
	}
	v4 := map[netip.Addr]string{netip.MustParseAddr("10.0.0.17"): "eni-1"}
	tests := []struct {
		addrs    map[netip.Addr]string
		prefixes []netip.Prefix
		want     []policy.Family
	}{
		{nil, nil, []policy.Family{policy.IPv4}},
		{v4, nil, []policy.Family{policy.IPv4}},
		{v4, got, []policy.Family{policy.IPv4, policy.IPv6}},
		{nil, got, []policy.Family{policy.IPv4, policy.IPv6}}, // the /80 before the first /28: ADDs wait for IPv4
	}
	for i, tt := range tests {
		if f := eniFamilies(tt.addrs, tt.prefixes); !reflect.DeepEqual(f, tt.want) {
			t.Errorf("%d: families %v, want %v", i, f, tt.want)
		}
	}
}
