package eninode

import (
	"reflect"
	"testing"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

func i32(v int32) *int32 { return &v }

// TestMergeSpecKeepsHandEdits: the agent's configuration reaches spec.eni, a field edited,
// added or removed by hand keeps the edit across the agent's syncs and configuration
// changes, and the agent takes a field back once it holds the agent's value again.
func TestMergeSpecKeepsHandEdits(t *testing.T) {
	n := &allotv1.AllotNode{}
	cfg := &allotv1.NodeENISpec{InstanceID: "i-1", PreAllocate: i32(8), SubnetIDs: []string{"subnet-a"}}
	if _, changed, err := MergeSpec(n, cfg); err != nil || !changed || !reflect.DeepEqual(n.Spec.ENI, cfg) {
		t.Fatalf("first write: %+v %v %v", n.Spec.ENI, changed, err)
	}
	if _, changed, _ := MergeSpec(n, cfg); changed {
		t.Fatal("an unchanged configuration rewrites the object")
	}
	// By hand: another subnet, security groups added, pre-allocate removed.
	n.Spec.ENI.SubnetIDs = []string{"subnet-hand"}
	n.Spec.ENI.SecurityGroups = []string{"sg-hand"}
	n.Spec.ENI.PreAllocate = nil
	if _, changed, _ := MergeSpec(n, cfg); changed {
		t.Fatalf("the agent undid hand edits: %+v", n.Spec.ENI)
	}
	// The agent's configuration changes: fields nobody touched follow it, edited ones stay.
	cfg2 := &allotv1.NodeENISpec{InstanceID: "i-1", PreAllocate: i32(16), SubnetIDs: []string{"subnet-b"}, MinAllocate: i32(4)}
	if _, changed, err := MergeSpec(n, cfg2); err != nil || !changed {
		t.Fatal(changed, err)
	}
	want := &allotv1.NodeENISpec{InstanceID: "i-1", MinAllocate: i32(4), SubnetIDs: []string{"subnet-hand"}, SecurityGroups: []string{"sg-hand"}}
	if !reflect.DeepEqual(n.Spec.ENI, want) {
		t.Fatalf("after a configuration change:\n got %+v\nwant %+v", n.Spec.ENI, want)
	}
	// Someone puts the agent's value back by hand: the agent owns the field again.
	n.Spec.ENI.SubnetIDs = []string{"subnet-b"}
	cfg3 := &allotv1.NodeENISpec{InstanceID: "i-1", PreAllocate: i32(16), SubnetIDs: []string{"subnet-c"}, MinAllocate: i32(4)}
	_, _, _ = MergeSpec(n, cfg2)
	_, _, _ = MergeSpec(n, cfg3)
	if !reflect.DeepEqual(n.Spec.ENI.SubnetIDs, []string{"subnet-c"}) {
		t.Fatalf("subnetIDs %v, want the agent's again", n.Spec.ENI.SubnetIDs)
	}
	// An object a user created before any agent: what they set stays, the rest is filled.
	hand := &allotv1.AllotNode{Spec: allotv1.AllotNodeSpec{ENI: &allotv1.NodeENISpec{SubnetTags: map[string]string{"t": "1"}, PreAllocate: i32(2)}}}
	_, _, _ = MergeSpec(hand, cfg)
	if *hand.Spec.ENI.PreAllocate != 2 || hand.Spec.ENI.InstanceID != "i-1" || hand.Spec.ENI.SubnetTags["t"] != "1" {
		t.Fatalf("pre-existing object: %+v", hand.Spec.ENI)
	}
}
