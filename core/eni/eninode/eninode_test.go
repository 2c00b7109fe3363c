package eninode

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/allot-ipam/allot/core/eni"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/cloud"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestApplyTransitions(t *testing.T) {
	a, b, c := addr("10.0.0.1"), addr("10.0.0.2"), addr("10.0.0.3")
	tests := []struct {
		name     string
		in       map[string]allotv1.ReleaseState
		ts       []eni.Transition
		want     map[string]allotv1.ReleaseState
		rejected int
	}{
		{"mark", nil, []eni.Transition{{Addr: a, From: eni.StateNone, To: eni.StateMarked}},
			map[string]allotv1.ReleaseState{"10.0.0.1": "marked-for-release"}, 0},
		{"answer", map[string]allotv1.ReleaseState{"10.0.0.1": "marked-for-release", "10.0.0.2": "marked-for-release"},
			[]eni.Transition{{Addr: a, From: eni.StateMarked, To: eni.StateReady}, {Addr: b, From: eni.StateMarked, To: eni.StateDoNotRelease}},
			map[string]allotv1.ReleaseState{"10.0.0.1": "ready-for-release", "10.0.0.2": "do-not-release"}, 0},
		{"moved meanwhile", map[string]allotv1.ReleaseState{"10.0.0.1": "ready-for-release"},
			[]eni.Transition{{Addr: a, From: eni.StateMarked, To: eni.StateReady}, {Addr: c, From: eni.StateMarked, To: eni.StateReady}},
			map[string]allotv1.ReleaseState{"10.0.0.1": "ready-for-release"}, 2},
		{"drop last entry", map[string]allotv1.ReleaseState{"10.0.0.3": "released"},
			[]eni.Transition{{Addr: c, From: eni.StateReleased, To: eni.StateNone}}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rej := ApplyTransitions(tt.in, tt.ts)
			if !reflect.DeepEqual(got, tt.want) || len(rej) != tt.rejected {
				t.Fatalf("got %v rejected %v, want %v and %d rejected", got, rej, tt.want, tt.rejected)
			}
		})
	}
}

func TestPoolAndStatus(t *testing.T) {
	inv := cloud.NodeInventory{
		Interfaces: []cloud.Interface{
			{ID: "eni-2", Index: 2, Subnet: "s-b", Addresses: []netip.Addr{addr("10.2.0.9")}, SecurityGroups: []string{"sg-2", "sg-1"}},
			{ID: "eni-1", Index: 1, Subnet: "s-a", MAC: "02:00:00:00:00:01", Addresses: []netip.Addr{addr("10.1.0.5"), addr("10.1.0.6")}},
		},
		Subnets: []cloud.Subnet{{ID: "s-a", CIDR: netip.MustParsePrefix("10.1.0.0/24")}, {ID: "s-b", CIDR: netip.MustParsePrefix("10.2.0.0/20")}},
	}
	pool := PoolOf(inv)
	want := map[string]allotv1.PoolAddress{"10.1.0.5": {Resource: "eni-1"}, "10.1.0.6": {Resource: "eni-1"}, "10.2.0.9": {Resource: "eni-2"}}
	if !reflect.DeepEqual(pool, want) {
		t.Fatalf("pool %v", pool)
	}
	st := ENIStatusOf(inv)
	if st.InterfaceCount != 2 || st.Available != 3 || st.Interfaces[0].ID != "eni-1" || st.Interfaces[1].SubnetCIDR != "10.2.0.0/20" ||
		!reflect.DeepEqual(st.Interfaces[1].SecurityGroups, []string{"sg-1", "sg-2"}) {
		t.Fatalf("status %+v", st)
	}
	n := &allotv1.AllotNode{}
	n.Spec.IPAM.Pool = map[string]allotv1.PoolAddress{"10.1.0.5": {Resource: "eni-1"}, "bogus": {Resource: "eni-1"}}
	n.Status.IPAM.ReleaseIPs = map[string]allotv1.ReleaseState{"10.1.0.5": "marked-for-release", "nope": "released"}
	n.Status.IPAM.Used = map[string]allotv1.UsedAddress{"10.1.0.6": {}, "10.1.0.5": {}, "x": {}}
	p, bad := Pool(n)
	if len(p) != 1 || p[addr("10.1.0.5")] != "eni-1" || !reflect.DeepEqual(bad, []string{"bogus"}) {
		t.Fatalf("Pool %v %v", p, bad)
	}
	if s := States(n); len(s) != 1 || s[addr("10.1.0.5")] != eni.StateMarked {
		t.Fatalf("States %v", s)
	}
	if u := Used(n); !reflect.DeepEqual(u, []netip.Addr{addr("10.1.0.5"), addr("10.1.0.6")}) {
		t.Fatalf("Used %v", u)
	}
	if got := PoolOf(cloud.NodeInventory{}); got != nil {
		t.Fatalf("empty pool: %v", got)
	}
}

func TestParamsAndProviderID(t *testing.T) {
	def := eni.Params{PreAllocate: 8, MaxAboveWatermark: 2}
	four := int32(4)
	if p := Params(nil, def); p != nil {
		t.Fatal(p)
	}
	if p := Params(&allotv1.NodeENISpec{InstanceID: "i-1"}, def); p != nil {
		t.Fatal(p)
	}
	if p := Params(&allotv1.NodeENISpec{PreAllocate: &four}, def); p == nil || *p != (eni.Params{PreAllocate: 4, MaxAboveWatermark: 2}) {
		t.Fatal(p)
	}
	for _, tt := range []struct {
		node string
		spec *allotv1.NodeENISpec
		want string
	}{
		{"aws:///z/i-1", &allotv1.NodeENISpec{InstanceID: "i-2"}, "aws:///z/i-1"},
		{"", &allotv1.NodeENISpec{InstanceID: "i-2", Zone: "us-east-1a"}, "aws:///us-east-1a/i-2"},
		{"", nil, ""},
	} {
		if got := ProviderID(tt.node, tt.spec); got != tt.want {
			t.Errorf("ProviderID(%q, %+v) = %q, want %q", tt.node, tt.spec, got, tt.want)
		}
	}
}
