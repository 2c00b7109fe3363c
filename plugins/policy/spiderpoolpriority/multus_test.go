package spiderpoolpriority

import (
	"context"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

func TestMultusNetworkFromAnnotations(t *testing.T) {
	for _, tc := range []struct {
		anno map[string]string
		ifn  string
		want string
	}{
		{map[string]string{AnnoMultusNetworks: "macvlan-a, kube-system/macvlan-b"}, "net1", "macvlan-a"},
		{map[string]string{AnnoMultusNetworks: "macvlan-a, kube-system/macvlan-b"}, "net2", "kube-system/macvlan-b"},
		{map[string]string{AnnoMultusNetworks: "macvlan-a@eth9,macvlan-b"}, "net2", "macvlan-b"},
		{map[string]string{AnnoMultusNetworks: "macvlan-a@eth9,macvlan-b"}, "eth9", "macvlan-a"},
		{map[string]string{AnnoMultusNetworks: `[{"name":"sriov","namespace":"net","interface":"data0"},{"name":"vlan"}]`}, "data0", "net/sriov"},
		{map[string]string{AnnoMultusNetworks: `[{"name":"sriov","namespace":"net","interface":"data0"},{"name":"vlan"}]`}, "net2", "vlan"},
		{map[string]string{AnnoMultusNetworks: `[{"name":`}, "net1", ""},
		{map[string]string{AnnoMultusDefaultNetwork: "kube-system/underlay"}, "eth0", "kube-system/underlay"},
		{map[string]string{}, "eth0", ""},
		{map[string]string{AnnoMultusNetworks: "a"}, "net5", ""},
	} {
		if got := multusNetwork(tc.anno, tc.ifn); got != tc.want {
			t.Errorf("multusNetwork(%v, %s) = %q, want %q", tc.anno, tc.ifn, got, tc.want)
		}
	}
}

// The multusName filter matches an interface whose network only the pod's annotations name.
func TestMultusNameFilterFromAnnotations(t *testing.T) {
	pools := []policy.PoolView{
		{Name: "vlan10", Family: policy.IPv4, Total: 10, Free: 10, MultusName: []string{"kube-system/macvlan-10"}},
		{Name: "any", Family: policy.IPv4, Total: 10, Free: 10},
	}
	req := &policy.PodRequest{
		Pod: policy.Pod{Namespace: "app", Name: "p", Annotations: map[string]string{
			AnnoMultusNetworks: "kube-system/macvlan-10",
			AnnoIPPool:         `{"ipv4":["vlan10","any"]}`,
		}},
		CNI:   policy.CNIRequest{IfName: "net1"},
		Pools: pools,
	}
	d, err := New().SelectPodPools(context.Background(), req)
	if err != nil || d.Code != policy.Decided || len(d.IPv4) != 2 || d.IPv4[0].Pool != "vlan10" {
		t.Fatalf("net1: %+v %v", d, err)
	}
	req.CNI.IfName = "eth0" // eth0 is not on macvlan-10: the multusName pool is filtered
	d, err = New().SelectPodPools(context.Background(), req)
	if err != nil || d.Code != policy.Decided || len(d.IPv4) != 1 || d.IPv4[0].Pool != "any" {
		t.Fatalf("eth0: %+v %v", d, err)
	}
	if req.CNI.MultusName != "" {
		t.Fatal("the caller's request must not be changed")
	}
}
