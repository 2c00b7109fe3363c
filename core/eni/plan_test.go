package eni

import (
	"net/netip"
	"testing"

	"github.com/allot-ipam/allot/sdk/cloud"
)

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, v := range s {
		out[i] = netip.MustParseAddr(v)
	}
	return out
}

func nAddrs(base string, n int) []netip.Addr {
	a := netip.MustParseAddr(base)
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = a
		a = a.Next()
	}
	return out
}

// inv: eth0 (index 0, subnet-a) and eth1 (index 1, subnet-b), m5.xlarge-like limits.
func testInventory() cloud.NodeInventory {
	return cloud.NodeInventory{
		Interfaces: []cloud.Interface{
			{ID: "eni-1", Index: 1, Subnet: "subnet-b", Addresses: nAddrs("10.0.2.10", 14)},
			{ID: "eni-0", Index: 0, Subnet: "subnet-a", Primary: true, Addresses: nAddrs("10.0.1.10", 5)},
		},
		Subnets: []cloud.Subnet{
			{ID: "subnet-a", VPC: "vpc-1", Zone: "z1", Free: 100, Tags: map[string]string{"tier": "nodes"}},
			{ID: "subnet-b", VPC: "vpc-1", Zone: "z1", Free: 300, Tags: map[string]string{"tier": "pods"}},
			{ID: "subnet-c", VPC: "vpc-1", Zone: "z1", Free: 500},
			{ID: "subnet-d", VPC: "vpc-1", Zone: "z2", Free: 900, Tags: map[string]string{"tier": "pods"}},
			{ID: "subnet-e", VPC: "vpc-2", Zone: "z1", Free: 999},
		},
		Limits: cloud.Limits{MaxInterfaces: 4, AddressesPerInterface: 15},
	}
}

func TestEligibleAndAvailable(t *testing.T) {
	inv := testInventory()
	if got := Available(inv, Selector{First: 0}); got != 19 {
		t.Errorf("Available(first=0) = %d", got)
	}
	if got := Available(inv, Selector{First: 1}); got != 14 {
		t.Errorf("Available(first=1) = %d", got)
	}
	if el := Eligible(inv, Selector{First: 0}); el[0].ID != "eni-0" || el[1].ID != "eni-1" {
		t.Errorf("Eligible not sorted by index: %v", el)
	}
}

func TestPickInterface(t *testing.T) {
	inv := testInventory()
	// eth0 (index 0) has room: 15 - 1 - 5 = 9.
	ifc, onIfc, onSub, ok := PickInterface(inv, Selector{First: 0}, nil)
	if !ok || ifc.ID != "eni-0" || onIfc != 9 || onSub != 100 {
		t.Fatalf("first=0: %s %d %d %v", ifc.ID, onIfc, onSub, ok)
	}
	// first=1 excludes eth0; eth1 is full (14 of 14).
	if _, _, _, ok := PickInterface(inv, Selector{First: 1}, nil); ok {
		t.Fatal("first=1: a full interface was picked")
	}
	// A subnet without free addresses disqualifies its interface.
	inv.Subnets[0].Free = 0
	if _, _, _, ok := PickInterface(inv, Selector{First: 0}, nil); ok {
		t.Fatal("interface of a full subnet was picked")
	}
	inv.Subnets[0].Free = 100
	if _, _, _, ok := PickInterface(inv, Selector{First: 0}, map[string]bool{"eni-0": true}); ok {
		t.Fatal("skipped interface was picked")
	}
}

func TestAllocationAmount(t *testing.T) {
	tests := []struct{ sub, ifc, want, out int }{
		{100, 9, 8, 8},  // need bound
		{100, 9, 30, 9}, // interface bound
		{3, 9, 30, 3},   // subnet bound
		{0, 9, 30, 0},
	}
	for _, tt := range tests {
		if got := AllocationAmount(tt.sub, tt.ifc, tt.want); got != tt.out {
			t.Errorf("AllocationAmount(%d,%d,%d) = %d, want %d", tt.sub, tt.ifc, tt.want, got, tt.out)
		}
	}
}

func TestPickSubnet(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*cloud.NodeInventory)
		zone  string
		rules SubnetRules
		want  string
	}{
		{name: "eth0's subnet when nothing is configured", want: "subnet-a"},
		{name: "eth0's subnet full: most free in VPC and zone", mod: func(i *cloud.NodeInventory) { i.Subnets[0].Free = 1 }, want: "subnet-c"},
		{name: "tags: most free matching, same zone only", rules: SubnetRules{Tags: map[string]string{"tier": "pods"}}, want: "subnet-b"},
		{name: "ids", rules: SubnetRules{IDs: []string{"subnet-a", "subnet-c"}}, want: "subnet-c"},
		{name: "ids and tags both apply", rules: SubnetRules{IDs: []string{"subnet-a", "subnet-c"}, Tags: map[string]string{"tier": "nodes"}}, want: "subnet-a"},
		{name: "node zone wins over eth0's", zone: "z2", want: "subnet-d"},
		{name: "nothing fits", rules: SubnetRules{IDs: []string{"subnet-e"}}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := testInventory()
			if tt.mod != nil {
				tt.mod(&inv)
			}
			s, ok := PickSubnet(inv, tt.zone, tt.rules, 2)
			if s.ID != tt.want || ok != (tt.want != "") {
				t.Fatalf("got %q %v, want %q", s.ID, ok, tt.want)
			}
		})
	}
}

func TestPickIndex(t *testing.T) {
	inv := testInventory()
	if i, ok := PickIndex(inv, 0); !ok || i != 2 {
		t.Errorf("first=0: %d %v", i, ok)
	}
	if i, ok := PickIndex(inv, 3); !ok || i != 3 {
		t.Errorf("first=3: %d %v", i, ok)
	}
	inv.Interfaces = append(inv.Interfaces, cloud.Interface{ID: "eni-3", Index: 3})
	if i, ok := PickIndex(inv, 1); !ok || i != 2 {
		t.Errorf("gap at 2: %d %v", i, ok)
	}
	inv.Interfaces = append(inv.Interfaces, cloud.Interface{ID: "eni-2", Index: 2})
	if _, ok := PickIndex(inv, 0); ok {
		t.Error("index past the interface limit")
	}
}

func TestPickRelease(t *testing.T) {
	inv := testInventory()
	used := map[netip.Addr]bool{}
	for _, a := range nAddrs("10.0.2.10", 10) { // 10 of eth1's 14 in use: 4 free there, 5 on eth0
		used[a] = true
	}
	inUse := func(a netip.Addr) bool { return used[a] }
	id, units := PickRelease(inv, Selector{First: 0}, inUse, 3)
	got := unitAddrs(units)
	if id != "eni-0" || len(got) != 3 || got[0] != netip.MustParseAddr("10.0.1.14") {
		t.Fatalf("got %s %v", id, got)
	}
	id, units = PickRelease(inv, Selector{First: 1}, inUse, 10)
	got = unitAddrs(units)
	if id != "eni-1" || len(got) != 4 {
		t.Fatalf("first=1: got %s %v", id, got)
	}
	for _, a := range got {
		if used[a] {
			t.Fatalf("picked used address %s", a)
		}
	}
	if id, got := PickRelease(inv, Selector{First: 0}, inUse, 0); id != "" || got != nil {
		t.Fatal("released without excess")
	}
	_ = addrs
}

func unitAddrs(us []Unit) []netip.Addr {
	var out []netip.Addr
	for _, u := range us {
		out = append(out, u.Addrs...)
	}
	return out
}

func TestQueueOrder(t *testing.T) {
	items := []*queued{
		{name: "release-big", deficit: -9},
		{name: "b-need-4", deficit: 4},
		{name: "idle", deficit: 0},
		{name: "need-30", deficit: 30},
		{name: "a-need-4", deficit: 4},
		{name: "release-small", deficit: -1},
	}
	order(items)
	want := []string{"need-30", "a-need-4", "b-need-4", "idle", "release-small", "release-big"}
	for i, q := range items {
		if q.name != want[i] {
			t.Fatalf("order[%d] = %s, want %s (all: %v)", i, q.name, want[i], names(items))
		}
	}
}

func names(items []*queued) []string {
	out := make([]string, len(items))
	for i, q := range items {
		out[i] = q.name
	}
	return out
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Params.PreAllocate = -1
	c.Workers = 0
	c.Params.MinAllocate, c.Params.MaxAllocate = 10, 5
	err := c.Validate()
	for _, field := range []string{"params.pre-allocate", "workers", "params.min-allocate"} {
		if err == nil || !contains(err.Error(), field) {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}
