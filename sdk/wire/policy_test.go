package wire_test

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"github.com/allot-ipam/allot/sdk/wire"
)

func samplePodRequest() *policy.PodRequest {
	return &policy.PodRequest{
		Pod: policy.Pod{
			Namespace: "ns", Name: "web-0", UID: "u-1",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"ipam.cilium.io/ip-pool": "blue"},
			OwnerKind:   "StatefulSet", OwnerName: "web",
		},
		Namespace: policy.Namespace{Name: "ns", Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"x": "y"}},
		Node:      policy.Node{Name: "n1", Labels: map[string]string{"zone": "z1"}},
		CNI: policy.CNIRequest{
			IfName: "eth0", Network: "net", MultusName: "ns/macvlan",
			Pools: []string{"p"}, DefaultIPv4Pools: []string{"d4"}, DefaultIPv6Pools: []string{"d6"},
		},
		Pools: []policy.PoolView{
			{
				Name: "blue", Family: policy.IPv4, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")},
				Subnet: "s", Total: 254, Free: 10, Default: true, Disabled: true, Terminating: true,
				Excluded: []string{"10.0.0.1"}, Reserved: []string{"10.0.0.2"}, AllExcluded: true, AllReserved: true,
				NodeName:      []string{"n1"},
				NodeAffinity:  &policy.LabelSelector{MatchLabels: map[string]string{"a": "b"}, MatchExpressions: []policy.Requirement{{Key: "k", Operator: "In", Values: []string{"v"}}}},
				NamespaceName: []string{"ns"},
				NamespaceAffinity: &policy.LabelSelector{
					MatchExpressions: []policy.Requirement{{Key: "k", Operator: "Exists"}},
				},
				PodAffinity: &policy.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				MultusName:  []string{"ns/macvlan"},
			},
			{Name: "v6", Family: policy.IPv6, CIDRs: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}},
		},
	}
}

// roundTrip encodes to bytes and back, as a real transport does.
func roundTrip[M proto.Message](t testing.TB, m M, fresh M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, fresh); err != nil {
		t.Fatal(err)
	}
	return fresh
}

func TestPodRequestRoundTrip(t *testing.T) {
	in := samplePodRequest()
	m := roundTrip(t, wire.PodRequestToProto(in), &pb.PodRequest{})
	out, err := wire.PodRequestFromProto(m)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip differs:\n in=%+v\nout=%+v", in, out)
	}
}

func TestDecisionsRoundTrip(t *testing.T) {
	for _, d := range []policy.PodDecision{
		{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: "a"}, {Pool: "b"}}, IPv6: []policy.Candidate{{Pool: "c"}}, Source: "pod annotation", Reason: "r"},
		{Code: policy.Skip},
		{Code: policy.NoFit, Reason: "pool blue is disabled", Cause: policy.CauseUnavailable},
		{Code: policy.NoFit, Reason: "a contract 1.0 plugin sets no cause"},
	} {
		got, err := wire.PodDecisionFromProto(roundTrip(t, wire.PodDecisionToProto(d), &pb.PodDecision{}))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(d, got) {
			t.Fatalf("pod decision: got %+v, want %+v", got, d)
		}
	}
	for _, nd := range []policy.NodeDecision{
		{Code: policy.Decided, Configs: []string{"a", "b"}, Reason: "labels"},
		{Code: policy.NoFit, Cause: policy.CauseFull, Reason: "every config is full"},
	} {
		got, err := wire.NodeDecisionFromProto(roundTrip(t, wire.NodeDecisionToProto(nd), &pb.NodeDecision{}))
		if err != nil || !reflect.DeepEqual(nd, got) {
			t.Fatalf("node decision: got %+v, %v, want %+v", got, err, nd)
		}
	}
}

func TestNodeRequestRoundTrip(t *testing.T) {
	in := &policy.NodeRequest{
		Node: policy.Node{Name: "n", Labels: map[string]string{"rack": "1"}},
		Configs: []policy.CIDRConfigView{
			{
				Name:         "c1",
				NodeSelector: policy.LabelSelector{MatchLabels: map[string]string{"rack": "1"}},
				IPv4:         &policy.CIDRSpec{CIDR: netip.MustParsePrefix("10.0.0.0/16"), PerNodeMaskSize: 24},
				IPv6:         &policy.CIDRSpec{CIDR: netip.MustParsePrefix("fd00::/48"), PerNodeMaskSize: 120},
				FreeBlocks:   7,
			},
			{Name: "c2", IPv4: &policy.CIDRSpec{CIDR: netip.MustParsePrefix("10.1.0.0/16"), PerNodeMaskSize: 26}},
		},
	}
	out, err := wire.NodeRequestFromProto(roundTrip(t, wire.NodeRequestToProto(in), &pb.NodeRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip differs:\n in=%+v\nout=%+v", in, out)
	}
}

func TestFromProtoRejects(t *testing.T) {
	tests := []struct {
		name  string
		run   func() error
		field string
	}{
		{"nil pod decision", func() error { _, err := wire.PodDecisionFromProto(nil); return err }, "missing message"},
		{"unspecified code", func() error { _, err := wire.PodDecisionFromProto(&pb.PodDecision{}); return err }, "code: decision code unspecified"},
		{"unknown code", func() error {
			_, err := wire.PodDecisionFromProto(&pb.PodDecision{Code: 42})
			return err
		}, "code: unknown decision code value 42"},
		{"empty candidate", func() error {
			_, err := wire.PodDecisionFromProto(&pb.PodDecision{Code: pb.DecisionCode_DECISION_CODE_DECIDED,
				Ipv4: []*pb.Candidate{{Pool: "a"}, {Pool: "b"}, {}}})
			return err
		}, "ipv4[2].pool: empty pool name"},
		{"nil candidate", func() error {
			_, err := wire.PodDecisionFromProto(&pb.PodDecision{Code: pb.DecisionCode_DECISION_CODE_DECIDED,
				Ipv6: []*pb.Candidate{nil}})
			return err
		}, "ipv6[0]: missing message"},
		{"node decision unknown code", func() error {
			_, err := wire.NodeDecisionFromProto(&pb.NodeDecision{Code: -1})
			return err
		}, "node decision: code: unknown decision code value -1"},
		{"unknown cause", func() error {
			_, err := wire.PodDecisionFromProto(&pb.PodDecision{Code: pb.DecisionCode_DECISION_CODE_NO_FIT, Cause: 99})
			return err
		}, "pod decision: cause: unknown decision cause value 99"},
		{"node decision unknown cause", func() error {
			_, err := wire.NodeDecisionFromProto(&pb.NodeDecision{Code: pb.DecisionCode_DECISION_CODE_NO_FIT, Cause: -2})
			return err
		}, "node decision: cause: unknown decision cause value -2"},
		{"node decision empty config", func() error {
			_, err := wire.NodeDecisionFromProto(&pb.NodeDecision{Code: pb.DecisionCode_DECISION_CODE_DECIDED, Configs: []string{""}})
			return err
		}, "configs[0]: empty config name"},
		{"bad pool cidr", func() error {
			_, err := wire.PodRequestFromProto(&pb.PodRequest{Pools: []*pb.PoolView{
				{Name: "a", Family: pb.Family_FAMILY_IPV4, Cidrs: []string{"10.0.0.0/8"}},
				{Name: "b", Family: pb.Family_FAMILY_IPV4, Cidrs: []string{"10.0.0.0/8", "10.0.0.300/8"}},
			}})
			return err
		}, `pools[1].cidrs[1]: bad CIDR "10.0.0.300/8"`},
		{"unspecified family", func() error {
			_, err := wire.PodRequestFromProto(&pb.PodRequest{Pools: []*pb.PoolView{{Name: "a"}}})
			return err
		}, "pools[0].family: family unspecified"},
		{"bad operator", func() error {
			_, err := wire.PodRequestFromProto(&pb.PodRequest{Pools: []*pb.PoolView{{Name: "a", Family: 1,
				PodAffinity: &pb.LabelSelector{MatchExpressions: []*pb.Requirement{{Key: "k", Operator: "Near"}}}}}})
			return err
		}, `pools[0].pod_affinity.match_expressions[0].operator: unknown operator "Near"`},
		{"bad node cidr", func() error {
			_, err := wire.NodeRequestFromProto(&pb.NodeRequest{Configs: []*pb.CIDRConfigView{{Name: "c", Ipv4: &pb.CIDRSpec{Cidr: "x"}}}})
			return err
		}, `configs[0].ipv4.cidr: bad CIDR "x"`},
		{"wrong family node cidr", func() error {
			_, err := wire.NodeRequestFromProto(&pb.NodeRequest{Configs: []*pb.CIDRConfigView{{Name: "c", Ipv6: &pb.CIDRSpec{Cidr: "10.0.0.0/8", PerNodeMaskSize: 24}}}})
			return err
		}, `configs[0].ipv6.cidr: CIDR "10.0.0.0/8" is of the wrong family`},
		{"mask too small", func() error {
			_, err := wire.NodeRequestFromProto(&pb.NodeRequest{Configs: []*pb.CIDRConfigView{{Name: "c", Ipv4: &pb.CIDRSpec{Cidr: "10.0.0.0/16", PerNodeMaskSize: 8}}}})
			return err
		}, "configs[0].ipv4.per_node_mask_size: 8 outside /16../32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if err == nil {
				t.Fatal("want error")
			}
			if !errors.Is(err, wire.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not contain %q", err, tt.field)
			}
		})
	}
}

// FuzzPodDecisionFromProto: arbitrary bytes from a plugin never panic the host and either
// decode to a valid decision or an ErrInvalid naming a field.
func FuzzPodDecisionFromProto(f *testing.F) {
	seed, _ := proto.Marshal(wire.PodDecisionToProto(policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: "a"}}}))
	f.Add(seed)
	f.Add([]byte{0x08, 0x07})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.PodDecision
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		d, err := wire.PodDecisionFromProto(&m)
		if err != nil {
			if !errors.Is(err, wire.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for _, c := range append(d.IPv4, d.IPv6...) {
			if c.Pool == "" {
				t.Fatal("empty pool accepted")
			}
		}
	})
}
