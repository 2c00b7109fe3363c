package operator

import (
	"net/netip"
	"testing"

	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/sdk/policy"
)

// TestAddrsMatchesAllocator: the operator's count of a block's usable addresses is what the
// node's allocator will really hand out once the agent has reserved the block's gateway
// (ipam.DynamicOptions.BlockGateway): if they disagreed, an agent would ask for addresses
// the operator believes it already gave.
func TestAddrsMatchesAllocator(t *testing.T) {
	for _, s := range []string{"10.0.0.0/24", "10.0.0.0/29", "10.0.0.0/30", "10.0.0.0/31", "10.0.0.1/32", "fd00::/120", "fd00::/124", "fd00::/126", "fd00::/127", "fd00::1/128"} {
		p := netip.MustParsePrefix(s)
		fam := policy.IPv4
		if p.Addr().Is6() {
			fam = policy.IPv6
		}
		a, err := allocator.New(allocator.Config{Name: "b", Family: fam})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.AddCIDRWithGateway(p, ipam.BlockGateway(p)); err != nil {
			t.Fatal(err)
		}
		if got, want := addrs(p), int64(a.Stats().Usable); got != want {
			t.Errorf("%s: operator counts %d usable addresses, the allocator hands out %d", s, got, want)
		}
	}
}
