package eninode_test

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/allot-ipam/allot/core/eni/eninode"
	"github.com/allot-ipam/allot/sdk/cloud"
)

// A /28 reaches spec.ipam.pool as its 16 addresses and status.eni as one prefix, with the
// node's /80.
func TestPoolAndStatusOfPrefixes(t *testing.T) {
	inv := cloud.NodeInventory{Interfaces: []cloud.Interface{{
		ID: "eni-1", Index: 1, Subnet: "s",
		Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.5")},
		Prefixes:  []netip.Prefix{netip.MustParsePrefix("10.0.0.16/28"), netip.MustParsePrefix("2600:1f18::/80")},
	}}}
	pool := eninode.PoolOf(inv)
	if len(pool) != 17 || pool["10.0.0.16"].Resource != "eni-1" || pool["10.0.0.31"].Resource != "eni-1" {
		t.Fatalf("pool has %d entries: %v", len(pool), pool)
	}
	if _, v6 := pool["2600:1f18::"]; v6 {
		t.Fatal("the /80 was expanded into the pool")
	}
	st := eninode.ENIStatusOf(inv)
	ifc := st.Interfaces[0]
	if !reflect.DeepEqual(ifc.Addresses, []string{"10.0.0.5"}) || !reflect.DeepEqual(ifc.Prefixes, []string{"10.0.0.16/28", "2600:1f18::/80"}) || st.Available != 17 {
		t.Fatalf("status %+v", st)
	}
}
