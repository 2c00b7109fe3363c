package wire_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/proto"
)

// PodDecision.Rejected (contract 1.2) goes over the wire as proto.Marshal writes it, and both
// decoders read it back alike; an empty family means both families.
func TestRejectedOnTheWire(t *testing.T) {
	d := policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: "a"}}, Source: "s",
		Rejected: []policy.Rejection{{Pool: "b", Family: policy.IPv4, Cause: policy.CauseNoMatch, Reason: "podAffinity does not match"},
			{Pool: "c", Cause: policy.CauseFull, Reason: strings.Repeat("r", 200)}, {Pool: "d"}}}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(wire.PodDecisionToProto(d))
	if err != nil {
		t.Fatal(err)
	}
	b := wire.AppendPodDecision(nil, d)
	if string(b) != string(want) {
		t.Fatalf("AppendPodDecision:\n got %x\nwant %x", b, want)
	}
	got, err := wire.DecodePodDecision(b)
	if err != nil || !reflect.DeepEqual(got, d) {
		t.Fatalf("DecodePodDecision: %+v, %v", got, err)
	}
	var m pb.PodDecision
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if got, err := wire.PodDecisionFromProto(&m); err != nil || !reflect.DeepEqual(got, d) {
		t.Fatalf("PodDecisionFromProto: %+v, %v", got, err)
	}
}

func TestRejectedInvalidNamesField(t *testing.T) {
	for _, tc := range []struct {
		r    *pb.Rejection
		want string
	}{
		{&pb.Rejection{Reason: "x"}, "rejected[0].pool: empty pool name"},
		{&pb.Rejection{Pool: "a", Family: 7}, "rejected[0].family"},
		{&pb.Rejection{Pool: "a", Cause: 99}, "rejected[0].cause"},
	} {
		m := &pb.PodDecision{Code: pb.DecisionCode_DECISION_CODE_SKIP, Rejected: []*pb.Rejection{tc.r}}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wire.DecodePodDecision(b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodePodDecision(%v): %v, want %q", tc.r, err, tc.want)
		}
		if _, err := wire.PodDecisionFromProto(m); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PodDecisionFromProto(%v): %v, want %q", tc.r, err, tc.want)
		}
	}
}
