package sharedpool

import (
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStaleClaims(t *testing.T) {
	began := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	claim := func(id string, created time.Time, edit func(*v1alpha1.AddressHolder)) *v1alpha1.AddressClaim {
		c := &v1alpha1.AddressClaim{}
		c.CreationTimestamp = metav1.NewTime(created)
		c.Spec.Holder = v1alpha1.AddressHolder{Namespace: "ns", Pod: "p-" + id, ContainerID: id, Interface: "eth0", Network: "net"}
		if edit != nil {
			edit(&c.Spec.Holder)
		}
		return c
	}
	before := began.Add(-time.Minute)
	claims := []*v1alpha1.AddressClaim{
		claim("stale", before, nil),
		claim("valid", before, nil),
		claim("new", began, nil),
		claim("uncreated", time.Time{}, nil),
		claim("sts", before, func(h *v1alpha1.AddressHolder) { h.StatefulSet = "db" }),
		claim("vm", before, func(h *v1alpha1.AddressHolder) { h.VirtualMachine = "vm" }),
		claim("other-net", before, func(h *v1alpha1.AddressHolder) { h.Network = "other" }),
		claim("old", before, func(h *v1alpha1.AddressHolder) { h.Network = "" }),
	}
	valid := map[api.Owner]bool{{ContainerID: "valid", IfName: "eth0"}: true}
	got := staleClaims(claims, valid, "net", began)
	want := map[string]string{"stale": "net", "old": ""}
	if len(got) != len(want) {
		t.Fatalf("staleClaims = %v, want the claims of %v", got, want)
	}
	for id, network := range want {
		sc, ok := got[api.Owner{ContainerID: id, IfName: "eth0"}]
		if !ok || sc.network != network || sc.pod.Name != "p-"+id {
			t.Errorf("claim %s: %+v (found %v), want network %q", id, sc, ok, network)
		}
	}
}

func TestDecidedPlan(t *testing.T) {
	d := policy.PodDecision{IPv4: []policy.Candidate{{Pool: "a"}}, IPv6: []policy.Candidate{{Pool: "b"}}}
	for _, tc := range []struct {
		name string
		have map[policy.Family]bool
		want []policy.Family
	}{
		{"both", nil, []policy.Family{policy.IPv4, policy.IPv6}},
		{"has IPv4", map[policy.Family]bool{policy.IPv4: true}, []policy.Family{policy.IPv6}},
		{"has both", map[policy.Family]bool{policy.IPv4: true, policy.IPv6: true}, nil},
	} {
		plan := decidedPlan(d, tc.have)
		if len(plan) != len(tc.want) {
			t.Errorf("%s: %v, want families %v", tc.name, plan, tc.want)
			continue
		}
		for i, p := range plan {
			if p.fam != tc.want[i] || p.addr.IsValid() {
				t.Errorf("%s: plan[%d] = %+v, want family %v", tc.name, i, p, tc.want[i])
			}
		}
	}
}
