package operator

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-ipam/allot/core/eni"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/cloud"
)

func TestENINodeState(t *testing.T) {
	def := eni.Params{PreAllocate: 8}
	two, one, no := int32(2), int32(1), false
	labelled := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelInstanceType: "m5.large", LabelZoneBeta: "us-east-1b"}},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///us-east-1b/i-node"},
	}
	for _, tc := range []struct {
		name string
		an   allotv1.AllotNode
		node *corev1.Node
		want eni.NodeState
	}{
		{
			name: "from the Node",
			an:   allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
			node: labelled,
			want: eni.NodeState{Ref: cloud.NodeRef{Name: "n1", ProviderID: "aws:///us-east-1b/i-node", InstanceType: "m5.large", Zone: "us-east-1b"}, Used: []netip.Addr{}},
		},
		{
			name: "spec.eni wins over labels, Node's providerID over the instance ID",
			an: allotv1.AllotNode{
				ObjectMeta: metav1.ObjectMeta{Name: "n2"},
				Spec: allotv1.AllotNodeSpec{ENI: &allotv1.NodeENISpec{InstanceID: "i-agent", InstanceType: "c5.xlarge", Zone: "us-east-1c",
					PreAllocate: &two, FirstInterfaceIndex: &one, SubnetIDs: []string{"subnet-1"}, SecurityGroups: []string{"sg-1"}, PrefixDelegation: &no}},
				Status: allotv1.AllotNodeStatus{IPAM: allotv1.NodeIPAMStatus{Pending: 3, Used: map[string]allotv1.UsedAddress{"10.0.0.2": {}, "10.0.0.1": {}}}},
			},
			node: labelled,
			want: eni.NodeState{
				Ref:  cloud.NodeRef{Name: "n2", ProviderID: "aws:///us-east-1b/i-node", InstanceType: "c5.xlarge", Zone: "us-east-1c"},
				Used: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")}, Pending: 3,
				Params: &eni.Params{PreAllocate: 2}, FirstInterfaceIndex: func() *int { v := 1; return &v }(),
				SubnetIDs: []string{"subnet-1"}, SecurityGroups: []string{"sg-1"}, PrefixDelegation: &no,
			},
		},
		{
			name: "no Node: the agent's instance ID",
			an:   allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "n3"}, Spec: allotv1.AllotNodeSpec{ENI: &allotv1.NodeENISpec{InstanceID: "i-3", Zone: "z"}}},
			node: &corev1.Node{},
			want: eni.NodeState{Ref: cloud.NodeRef{Name: "n3", ProviderID: "aws:///z/i-3", Zone: "z"}, Used: []netip.Addr{}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eniNodeState(&tc.an, tc.node, def, nil); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestAnswersFingerprint(t *testing.T) {
	an := &allotv1.AllotNode{}
	an.Status.IPAM.ReleaseIPs = map[string]allotv1.ReleaseState{"10.0.0.2": "marked-for-release", "10.0.0.1": "ready-for-release", "10.0.0.3": "do-not-release"}
	if got := answers(an); got != "10.0.0.1=ready-for-release;10.0.0.3=do-not-release;" {
		t.Fatal(got)
	}
}

// TestENINodeConfigFromLabel: a node label selects named per-node settings (the AWS VPC
// CNI's ENIConfig): subnets and security groups of the node's new ENIs. A field of spec.eni
// (the agent's or a hand edit) wins over them; subnet IDs and tags, and group IDs and tags,
// go together; a label naming no entry is an error naming the label; the label key can be
// the zone's, one entry per zone.
func TestENINodeConfigFromLabel(t *testing.T) {
	o := &ENIOptions{NodeConfigs: map[string]NodeENIConfig{
		"pods-a":     {SubnetIDs: []string{"subnet-a"}, SecurityGroupTags: map[string]string{"tier": "pods"}},
		"us-east-1b": {SubnetTags: map[string]string{"zone": "b"}, SecurityGroups: []string{"sg-b"}},
	}}
	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels}}
	}
	state := func(t *testing.T, o *ENIOptions, n *corev1.Node, spec *allotv1.NodeENISpec) eni.NodeState {
		t.Helper()
		nc, err := o.nodeConfig(n)
		if err != nil {
			t.Fatal(err)
		}
		return eniNodeState(&allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: allotv1.AllotNodeSpec{ENI: spec}}, n, eni.Params{}, nc)
	}
	s := state(t, o, node(map[string]string{DefaultNodeConfigLabel: "pods-a"}), nil)
	if !reflect.DeepEqual(s.SubnetIDs, []string{"subnet-a"}) || s.SubnetTags != nil || s.SecurityGroupTags["tier"] != "pods" || s.SecurityGroups != nil {
		t.Fatalf("from the label: %+v", s)
	}
	s = state(t, o, node(map[string]string{DefaultNodeConfigLabel: "pods-a"}), &allotv1.NodeENISpec{SubnetTags: map[string]string{"hand": "1"}})
	if s.SubnetIDs != nil || s.SubnetTags["hand"] != "1" || s.SecurityGroupTags["tier"] != "pods" {
		t.Fatalf("spec.eni's subnet tags must replace the config's subnets, groups still from it: %+v", s)
	}
	s = state(t, o, node(nil), nil)
	if s.SubnetIDs != nil || s.SecurityGroupTags != nil {
		t.Fatalf("unlabelled node: %+v", s)
	}
	if _, err := o.nodeConfig(node(map[string]string{DefaultNodeConfigLabel: "nope"})); err == nil || !strings.Contains(err.Error(), "allot.io/eni-config=nope") {
		t.Fatalf("unknown entry: %v", err)
	}
	byZone := &ENIOptions{NodeConfigs: o.NodeConfigs, NodeConfigLabel: LabelZone}
	s = state(t, byZone, node(map[string]string{LabelZone: "us-east-1b", DefaultNodeConfigLabel: "pods-a"}), nil)
	if s.SubnetTags["zone"] != "b" || !reflect.DeepEqual(s.SecurityGroups, []string{"sg-b"}) {
		t.Fatalf("by zone: %+v", s)
	}
}

func TestENINodeChange(t *testing.T) {
	a := eni.NodeState{Ref: cloud.NodeRef{Name: "n1"}, Pending: 1}
	b := eni.NodeState{Ref: cloud.NodeRef{Name: "n1"}, Pending: 2}
	tests := []struct {
		name            string
		prev            eni.NodeState
		known           bool
		s               eni.NodeState
		prevHS, hs      string
		upsert, trigger bool
	}{
		{"first sight", eni.NodeState{}, false, a, "", "", true, false},
		{"changed", a, true, b, "", "", true, false},
		{"same, no answers", a, true, a, "", "", false, false},
		{"same, new answer", a, true, a, "", "10.0.0.5=ready", false, true},
		{"same, same answer", a, true, a, "x", "x", false, false},
		{"same, answers gone", a, true, a, "x", "", false, false},
	}
	for _, tt := range tests {
		up, tr := eniNodeChange(tt.prev, tt.known, tt.s, tt.prevHS, tt.hs)
		if up != tt.upsert || tr != tt.trigger {
			t.Errorf("%s: upsert %v trigger %v, want %v %v", tt.name, up, tr, tt.upsert, tt.trigger)
		}
	}
}
