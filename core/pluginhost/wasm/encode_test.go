package wasm

import (
	"bytes"
	"errors"
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

// richRequest sets every field of a pod request, with maps of several keys (sorted on the
// wire) and a pool body longer than 127 bytes (a two-byte length).
func richRequest() *policy.PodRequest {
	sel := &policy.LabelSelector{
		MatchLabels: map[string]string{"zone": "a", "rack": "r1", "tier": ""},
		MatchExpressions: []policy.Requirement{
			{Key: "tier", Operator: policy.OpIn, Values: []string{"web", "", "api"}},
			{Key: "gpu", Operator: policy.OpDoesNotExist},
		},
	}
	r := podRequest("web-0", map[string]string{"app": "web", "allot.io/pool": "blue", "b": "", "": "x"})
	r.Namespace.Annotations = map[string]string{"x": "y", "a": "b"}
	r.CNI = policy.CNIRequest{IfName: "net1", Network: "allot", MultusName: "prod/macvlan",
		Pools: []string{"a", ""}, DefaultIPv4Pools: []string{"v4"}, DefaultIPv6Pools: []string{"v6a", "v6b"}}
	r.Pools = append(r.Pools, policy.PoolView{
		Name: "blue", Family: policy.IPv4,
		CIDRs:  []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00::/64"), {}},
		Subnet: "subnet-a", Total: 65536 + 256, Free: 1 << 40,
		Default: true, Disabled: true, Terminating: true,
		Excluded: []string{"10.0.0.1", "10.0.0.2-10.0.0.9"}, Reserved: []string{"10.0.0.10"},
		AllExcluded: true, AllReserved: true,
		NodeName: []string{"node-1"}, NodeAffinity: sel,
		NamespaceName: []string{"prod", "dev"}, NamespaceAffinity: &policy.LabelSelector{},
		PodAffinity: sel, MultusName: []string{"prod/macvlan"},
	}, policy.PoolView{Name: "odd", Family: policy.Family("ipv9")})
	big := map[string]string{}
	for i := range 40 { // more keys than the encoder's stack array
		big[string(rune('a'+i%26))+string(rune('A'+i))] = "v"
	}
	r.Node.Labels = big
	return r
}

// TestAppendPodRequestMatchesProtoMarshal: the encoder writes proto.Marshal's bytes, except
// that each pool's free count comes first in its record (see encoder.pool).
func TestAppendPodRequestMatchesProtoMarshal(t *testing.T) {
	for _, r := range []*policy.PodRequest{richRequest(), podRequest("p", nil), {}} {
		m := wire.PodRequestToProto(r)
		pools := m.Pools
		m.Pools = nil
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, pv := range pools {
			var rec []byte
			if pv.Free != 0 {
				rec = protowire.AppendTag(rec, fPvFree, protowire.VarintType)
				rec = protowire.AppendVarint(rec, pv.Free)
			}
			pv.Free = 0
			body, err := proto.Marshal(pv)
			if err != nil {
				t.Fatal(err)
			}
			rec = append(rec, body...)
			want = protowire.AppendTag(want, fPodReqPools, protowire.BytesType)
			want = protowire.AppendBytes(want, rec)
		}
		got, err := appendPodRequest([]byte("prefix"), r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[6:], want) || string(got[:6]) != "prefix" {
			t.Errorf("encodings differ:\n got %x\nwant %x", got[6:], want)
		}
		var back pb.PodRequest
		if err := proto.Unmarshal(got[6:], &back); err != nil || !proto.Equal(&back, wire.PodRequestToProto(r)) {
			t.Errorf("round trip: %v\n got %v\nwant %v", err, &back, wire.PodRequestToProto(r))
		}
	}
}

func TestAppendPodRequestInvalidUTF8(t *testing.T) {
	r := podRequest("p", map[string]string{"k": "\xff"})
	if _, err := proto.Marshal(wire.PodRequestToProto(r)); err == nil {
		t.Fatal("proto.Marshal accepted invalid UTF-8; the test's premise is wrong")
	}
	_, err := appendPodRequest(nil, r)
	if err == nil {
		t.Fatal("invalid UTF-8 accepted")
	}
	mustContain(t, err.Error(), "pod.labels")
}

// Field numbers of PodDecision and Candidate in sdk/proto/allot/plugin/v1/policy.proto.
const (
	fDecCode, fDecReason, fDecIPv4, fDecIPv6, fDecSource, fDecCause = 1, 2, 3, 4, 5, 6
	fCandPool                                                       = 1
)

// TestDecodePodDecisionNamesField: a guest's bad bytes are refused naming the field.
func TestDecodePodDecisionNamesField(t *testing.T) {
	badPool := protowire.AppendBytes(protowire.AppendTag(nil, fDecIPv6, protowire.BytesType),
		protowire.AppendString(protowire.AppendTag(nil, fCandPool, protowire.BytesType), "\xff"))
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{badPool, "pod decision: ipv6[0].pool"},
		{protowire.AppendTag(nil, fDecCode, protowire.VarintType), "pod decision: code: truncated"},
	} {
		_, err := decodePodDecision(c.b)
		if err == nil || !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%x: error %v, want ErrABI naming %q", c.b, err, c.want)
		}
	}
}

func TestDecodePodDecisionMatchesProto(t *testing.T) {
	cand := func(pool string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, fCandPool, protowire.BytesType), pool)
	}
	valid := []policy.PodDecision{
		{Code: policy.Decided, Reason: "r", Source: "s", IPv4: policy.Candidates("a", "b", "c"), IPv6: policy.Candidates("d", "e")},
		{Code: policy.NoFit, Reason: "none"},
		{Code: policy.Skip},
		{Code: policy.NoFit, Reason: "full", Cause: policy.CauseFull},
	}
	var inputs [][]byte
	for _, d := range valid {
		b, err := proto.Marshal(wire.PodDecisionToProto(d))
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b)
	}
	unknown := protowire.AppendTag(inputs[0], 99, protowire.BytesType)
	unknown = protowire.AppendString(unknown, "future field")
	emptyCand := protowire.AppendBytes(protowire.AppendTag(inputs[2], fDecIPv4, protowire.BytesType), nil)
	candExtra := protowire.AppendBytes(protowire.AppendTag(inputs[2], fDecIPv6, protowire.BytesType),
		protowire.AppendVarint(protowire.AppendTag(cand("x"), 7, protowire.VarintType), 1))
	inputs = append(inputs, unknown, emptyCand, candExtra,
		[]byte{0xff}, []byte{0x12, 0x05, 'a'}, protowire.AppendString(protowire.AppendTag(nil, fDecReason, protowire.BytesType), "\xff"),
		protowire.AppendVarint(protowire.AppendTag(nil, fDecCode, protowire.VarintType), 77),
		protowire.AppendVarint(protowire.AppendTag(inputs[1], fDecCause, protowire.VarintType), 9), nil,
		// A known field with the wrong wire type is skipped as unknown, as proto.Unmarshal does.
		protowire.AppendVarint(protowire.AppendTag(inputs[1], fDecReason, protowire.VarintType), 5))
	for i, b := range inputs {
		got, gerr := decodePodDecision(b)
		var m pb.PodDecision
		want, werr := policy.PodDecision{}, proto.Unmarshal(b, &m)
		if werr == nil {
			want, werr = wire.PodDecisionFromProto(&m)
		}
		if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("input %d (%x): got %+v, %v; want %+v, %v", i, b, got, gerr, want, werr)
		}
		if gerr != nil && !errors.Is(gerr, ErrABI) {
			t.Errorf("input %d: error %v is not ErrABI", i, gerr)
		}
	}
}

func FuzzDecodePodDecision(f *testing.F) {
	b, _ := proto.Marshal(wire.PodDecisionToProto(policy.PodDecision{Code: policy.Decided, Reason: "r", IPv4: policy.Candidates("a")}))
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gerr := decodePodDecision(b)
		var m pb.PodDecision
		if proto.Unmarshal(b, &m) != nil {
			return // the proto library may be stricter about malformed input; both refuse or we do
		}
		want, werr := wire.PodDecisionFromProto(&m)
		if (gerr == nil) != (werr == nil) || (gerr == nil && !reflect.DeepEqual(got, want)) {
			t.Errorf("decoders disagree on %x: got %+v, %v; want %+v, %v", b, got, gerr, want, werr)
		}
	})
}

func BenchmarkAppendPodRequest(b *testing.B) {
	req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-07"})
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = appendPodRequest(buf[:0], req)
	}
}
