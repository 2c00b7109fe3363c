package wire

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"google.golang.org/protobuf/proto"
)

// TestAppendPodRequestRoundTrip: AppendPodRequest's bytes decode to PodRequestToProto's
// message. (core/pluginhost/wasm checks the exact bytes, free-first layout included.)
func TestAppendPodRequestRoundTrip(t *testing.T) {
	sel := &policy.LabelSelector{MatchLabels: map[string]string{"b": "2", "a": "1"},
		MatchExpressions: []policy.Requirement{{Key: "k", Operator: policy.OpIn, Values: []string{"x", ""}}}}
	reqs := []*policy.PodRequest{{}, {
		Pod:       policy.Pod{Namespace: "ns", Name: "p", UID: "u", Labels: map[string]string{"z": "1", "a": ""}, OwnerKind: "RS"},
		Namespace: policy.Namespace{Name: "ns", Annotations: map[string]string{"x": "y"}},
		Node:      policy.Node{Name: "n", Labels: map[string]string{"zone": "a"}},
		CNI:       policy.CNIRequest{IfName: "eth0", Pools: []string{"a", ""}, DefaultIPv6Pools: []string{"v6"}},
		Pools: []policy.PoolView{
			{Name: "a", Family: policy.IPv4, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Total: 300, Free: 1 << 33,
				Default: true, Excluded: []string{"10.0.0.1"}, NodeAffinity: sel, PodAffinity: &policy.LabelSelector{},
				NamespaceName: []string{strings.Repeat("n", 200)}},
			{Name: "b", Family: policy.IPv6},
		},
	}}
	for _, r := range reqs {
		b, err := AppendPodRequest(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		var got pb.PodRequest
		if err := proto.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if want := PodRequestToProto(r); !proto.Equal(&got, want) {
			t.Errorf("round trip:\n got %v\nwant %v", &got, want)
		}
	}
	bad := &policy.PodRequest{Pod: policy.Pod{Name: "\xff"}}
	if _, err := AppendPodRequest(nil, bad); err == nil || !strings.Contains(err.Error(), "pod.name") {
		t.Errorf("invalid UTF-8: %v, want an error naming pod.name", err)
	}
}
