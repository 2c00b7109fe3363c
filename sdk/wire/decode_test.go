package wire_test

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// reflectPodRequest is what a plugin built with an older SDK does: proto.Unmarshal, then
// PodRequestFromProto.
func reflectPodRequest(b []byte) (*policy.PodRequest, error) {
	var m pb.PodRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return wire.PodRequestFromProto(&m)
}

func TestDecodePodRequestMatchesReflection(t *testing.T) {
	reqs := []*policy.PodRequest{{}, samplePodRequest()}
	for _, r := range reqs {
		b, err := wire.AppendPodRequest(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.DecodePodRequest(b)
		if err != nil {
			t.Fatal(err)
		}
		want, err := reflectPodRequest(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decode:\n got %+v\nwant %+v", got, want)
		}
		// proto.Marshal's own field order (free not first) decodes the same.
		b2, err := proto.Marshal(wire.PodRequestToProto(r))
		if err != nil {
			t.Fatal(err)
		}
		if got2, err := wire.DecodePodRequest(b2); err != nil || !reflect.DeepEqual(got2, want) {
			t.Errorf("decode of proto.Marshal bytes: %v\n got %+v\nwant %+v", err, got2, want)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name  string
		run   func() error
		field string
	}{
		{"unspecified code", func() error { _, err := wire.DecodePodDecision(nil); return err }, "pod decision: code: decision code unspecified"},
		{"unknown code", func() error {
			_, err := wire.DecodePodDecision(marshal(&pb.PodDecision{Code: 42}))
			return err
		}, "code: unknown decision code value 42"},
		{"unknown cause", func() error {
			_, err := wire.DecodePodDecision(marshal(&pb.PodDecision{Code: pb.DecisionCode_DECISION_CODE_NO_FIT, Cause: -3}))
			return err
		}, "pod decision: cause: unknown decision cause value -3"},
		{"empty candidate", func() error {
			_, err := wire.DecodePodDecision(marshal(&pb.PodDecision{Code: pb.DecisionCode_DECISION_CODE_DECIDED,
				Ipv4: []*pb.Candidate{{Pool: "a"}, {Pool: "b"}, {}}}))
			return err
		}, "ipv4[2].pool: empty pool name"},
		{"bad utf-8 reason", func() error {
			_, err := wire.DecodePodDecision(wire.AppendPodDecision(nil, policy.PodDecision{Code: policy.Skip, Reason: "\xff"}))
			return err
		}, "pod decision: reason: string is not valid UTF-8"},
		{"truncated decision", func() error { _, err := wire.DecodePodDecision([]byte{0x12, 0x05, 'a'}); return err }, "pod decision: reason: truncated"},
		{"bad pool cidr", func() error {
			_, err := wire.DecodePodRequest(marshal(&pb.PodRequest{Pools: []*pb.PoolView{
				{Name: "a", Family: pb.Family_FAMILY_IPV4, Cidrs: []string{"10.0.0.0/8"}},
				{Name: "b", Family: pb.Family_FAMILY_IPV4, Cidrs: []string{"10.0.0.0/8", "10.0.0.300/8"}},
			}}))
			return err
		}, `pools[1].cidrs[1]: bad CIDR "10.0.0.300/8"`},
		{"unspecified family", func() error {
			_, err := wire.DecodePodRequest(marshal(&pb.PodRequest{Pools: []*pb.PoolView{{Name: "a"}}}))
			return err
		}, "pools[0].family: family unspecified"},
		{"bad operator", func() error {
			_, err := wire.DecodePodRequest(marshal(&pb.PodRequest{Pools: []*pb.PoolView{{Name: "a", Family: 1,
				PodAffinity: &pb.LabelSelector{MatchExpressions: []*pb.Requirement{{Key: "k", Operator: "Near"}}}}}}))
			return err
		}, `pools[0].pod_affinity.match_expressions[0].operator: unknown operator "Near"`},
		{"empty key", func() error {
			_, err := wire.DecodePodRequest(marshal(&pb.PodRequest{Pools: []*pb.PoolView{{Name: "a", Family: 1}, {Name: "b", Family: 2,
				NodeAffinity: &pb.LabelSelector{MatchExpressions: []*pb.Requirement{{Operator: "Exists"}}}}}}))
			return err
		}, `pools[1].node_affinity.match_expressions[0].key: empty key`},
		{"bad utf-8 label", func() error {
			_, err := wire.DecodePodRequest([]byte{0x0a, 0x07, 0x22, 0x05, 0x0a, 0x01, 'k', 0x12, 0xff})
			return err
		}, "pod request: pod.labels"},
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

func TestAppendPodDecisionMatchesMarshal(t *testing.T) {
	ds := []policy.PodDecision{
		{},
		{Code: policy.Skip, Reason: "no annotation"},
		{Code: policy.Decided, Reason: "r", IPv4: []policy.Candidate{{Pool: "a"}, {Pool: strings.Repeat("p", 200)}},
			IPv6: []policy.Candidate{{Pool: "v6"}, {}}, Source: "ann"},
		{Code: policy.NoFit, Cause: policy.CauseFull, Reason: "full", Source: "ann"},
		{Code: policy.NoFit, Cause: -1},
	}
	for _, d := range ds {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(wire.PodDecisionToProto(d))
		if err != nil {
			t.Fatal(err)
		}
		if got := wire.AppendPodDecision(nil, d); string(got) != string(want) {
			t.Errorf("%+v:\n got %x\nwant %x", d, got, want)
		}
	}
}

// FuzzDecodePodDecision: the hand-written decoder agrees with proto.Unmarshal plus
// PodDecisionFromProto on arbitrary bytes from a plugin (never panics, same decision,
// errors wrap ErrInvalid).
func FuzzDecodePodDecision(f *testing.F) {
	f.Add(wire.AppendPodDecision(nil, policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: "a"}}, Source: "s"}))
	f.Add(wire.AppendPodDecision(nil, policy.PodDecision{Code: policy.NoFit, Cause: policy.CauseAmbiguous, Reason: "r"}))
	f.Add([]byte{0x08, 0x07})
	f.Add([]byte{0x1a, 0x00, 0x08, 0x01})
	f.Add(wire.AppendPodDecision(nil, policy.PodDecision{Code: policy.Skip, Rejected: []policy.Rejection{
		{Pool: "b", Family: policy.IPv6, Cause: policy.CauseFull, Reason: "full"}, {Pool: "c"}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := wire.DecodePodDecision(b)
		var m pb.PodDecision
		var want policy.PodDecision
		werr := proto.Unmarshal(b, &m)
		if werr == nil {
			want, werr = wire.PodDecisionFromProto(&m)
		}
		if err != nil {
			if !errors.Is(err, wire.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			if werr == nil {
				t.Fatalf("rejected %x (%v), reflection accepts it", b, err)
			}
			return
		}
		if werr != nil {
			t.Fatalf("accepted %x, reflection rejects it: %v", b, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%x:\n got %+v\nwant %+v", b, got, want)
		}
	})
}

// FuzzDecodePodRequest: same for the request decoder a plugin uses.
func FuzzDecodePodRequest(f *testing.F) {
	seed, _ := wire.AppendPodRequest(nil, samplePodRequest())
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := wire.DecodePodRequest(b)
		want, werr := reflectPodRequest(b)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%x: decode error %v, reflection error %v", b, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%x:\n got %+v\nwant %+v", b, got, want)
		}
	})
}

func BenchmarkDecodePodRequest(b *testing.B) {
	raw, err := wire.AppendPodRequest(nil, benchPodRequest(20))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := wire.DecodePodRequest(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendPodRequest(b *testing.B) {
	req := benchPodRequest(20)
	buf := make([]byte, 0, 8192)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := wire.AppendPodRequest(buf, req); err != nil {
			b.Fatal(err)
		}
	}
}

// benchPodRequest is the request of core/pluginhost/process's benchmarks: n pools, each
// with a node affinity and an excluded address.
func benchPodRequest(n int) *policy.PodRequest {
	req := &policy.PodRequest{
		Pod: policy.Pod{Namespace: "default", Name: "bench", UID: "0d6f2b1e-uid",
			Annotations: map[string]string{"kubernetes.io/psp": "restricted", "ipam.cilium.io/ip-pool": "x"},
			OwnerKind:   "ReplicaSet", OwnerName: "web-7d9f"},
		Namespace: policy.Namespace{Name: "default", Labels: map[string]string{"kubernetes.io/metadata.name": "default"}},
		Node:      policy.Node{Name: "node-1", Labels: map[string]string{"topology.kubernetes.io/zone": "z1", "kubernetes.io/os": "linux"}},
		CNI:       policy.CNIRequest{IfName: "eth0", Network: "allot", DefaultIPv4Pools: []string{"pool-00"}},
	}
	for i := range n {
		fam, cidr := policy.IPv4, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16)
		if i%2 == 1 {
			fam, cidr = policy.IPv6, netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, byte(i)}), 64)
		}
		req.Pools = append(req.Pools, policy.PoolView{
			Name: fmt.Sprintf("pool-%02d", i), Family: fam, CIDRs: []netip.Prefix{cidr},
			Total: 65534, Free: uint64(1000 * (i % 7)), Default: i%3 == 0,
			NodeAffinity: &policy.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": "z1"}},
			Excluded:     []string{cidr.Addr().Next().String()},
		})
	}
	return req
}

// TestDecodeSharedSelectorMerge: pools with the same selector bytes share one decoded
// selector, and a pool whose selector field repeats (protobuf merges it) does not change
// the one the other pools share.
func TestDecodeSharedSelectorMerge(t *testing.T) {
	sel := &pb.LabelSelector{MatchLabels: []*pb.StringPair{{Key: "zone", Value: "z1"}}}
	m := &pb.PodRequest{Pools: []*pb.PoolView{
		{Name: "a", Family: pb.Family_FAMILY_IPV4, NodeAffinity: sel},
		{Name: "b", Family: pb.Family_FAMILY_IPV4, NodeAffinity: sel},
	}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	// A third pool whose node_affinity comes twice: {zone: z1} then {rack: r1}.
	extra, _ := proto.Marshal(&pb.PoolView{Name: "c", Family: pb.Family_FAMILY_IPV4, NodeAffinity: sel})
	more, _ := proto.Marshal(&pb.PoolView{NodeAffinity: &pb.LabelSelector{MatchLabels: []*pb.StringPair{{Key: "rack", Value: "r1"}}}})
	pool := append(extra, more...)
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendBytes(b, pool)

	got, err := wire.DecodePodRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	want, err := reflectPodRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decode:\n got %+v\nwant %+v", got, want)
	}
	if got.Pools[0].NodeAffinity != got.Pools[1].NodeAffinity {
		t.Error("equal selectors are not shared")
	}
	if l := got.Pools[2].NodeAffinity.MatchLabels; len(l) != 2 || len(got.Pools[0].NodeAffinity.MatchLabels) != 1 {
		t.Errorf("merge: pool c has %v, pool a %v", l, got.Pools[0].NodeAffinity.MatchLabels)
	}
}
