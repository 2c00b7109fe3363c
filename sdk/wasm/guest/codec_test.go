package guest

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The hand-written codec must agree with the generated messages and sdk/wire on every
// field: these tests encode with one and decode with the other.

func richPodRequest() *policy.PodRequest {
	sel := &policy.LabelSelector{
		MatchLabels: map[string]string{"zone": "a", "rack": "r1"},
		MatchExpressions: []policy.Requirement{
			{Key: "tier", Operator: policy.OpIn, Values: []string{"web", "api"}},
			{Key: "gpu", Operator: policy.OpDoesNotExist},
		},
	}
	return &policy.PodRequest{
		Pod: policy.Pod{
			Namespace: "prod", Name: "web-0", UID: "uid-1",
			Labels:      map[string]string{"app": "web", "allot.io/pool": "blue"},
			Annotations: map[string]string{"ipam.cilium.io/ip-pool": "green"},
			OwnerKind:   "StatefulSet", OwnerName: "web",
		},
		Namespace: policy.Namespace{Name: "prod", Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"x": "y"}},
		Node:      policy.Node{Name: "node-1", Labels: map[string]string{"zone": "a"}},
		CNI: policy.CNIRequest{
			IfName: "net1", Network: "allot", MultusName: "prod/macvlan",
			Pools: []string{"a", "b"}, DefaultIPv4Pools: []string{"v4"}, DefaultIPv6Pools: []string{"v6a", "v6b"},
		},
		Pools: []policy.PoolView{
			{
				Name: "blue", Family: policy.IPv4,
				CIDRs:  []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("10.1.0.0/24")},
				Subnet: "subnet-a", Total: 65536 + 256, Free: 1 << 40,
				Default: true, Disabled: true, Terminating: true,
				Excluded: []string{"10.0.0.1", "10.0.0.2-10.0.0.9"}, Reserved: []string{"10.0.0.10"},
				AllExcluded: true, AllReserved: true,
				NodeName: []string{"node-1"}, NodeAffinity: sel,
				NamespaceName: []string{"prod", "dev"}, NamespaceAffinity: &policy.LabelSelector{},
				PodAffinity: sel, MultusName: []string{"prod/macvlan"},
			},
			{Name: "blue", Family: policy.IPv6, CIDRs: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}},
			{Name: "empty", Family: policy.IPv6},
		},
	}
}

func TestDecodePodRequestMatchesWire(t *testing.T) {
	for _, req := range []*policy.PodRequest{richPodRequest(), {}} {
		b, err := proto.Marshal(wire.PodRequestToProto(req))
		if err != nil {
			t.Fatal(err)
		}
		var m pb.PodRequest
		if err := proto.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		want, err := wire.PodRequestFromProto(&m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodePodRequest(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decode mismatch\n got %+v\nwant %+v", got, want)
		}
	}
}

func TestDecodeNodeRequestMatchesWire(t *testing.T) {
	req := &policy.NodeRequest{
		Node: policy.Node{Name: "n1", Labels: map[string]string{"zone": "a"}},
		Configs: []policy.CIDRConfigView{
			{
				Name:         "dual",
				NodeSelector: policy.LabelSelector{MatchLabels: map[string]string{"zone": "a"}, MatchExpressions: []policy.Requirement{{Key: "k", Operator: policy.OpExists}}},
				IPv4:         &policy.CIDRSpec{CIDR: netip.MustParsePrefix("10.0.0.0/8"), PerNodeMaskSize: 24},
				IPv6:         &policy.CIDRSpec{CIDR: netip.MustParsePrefix("fd00::/48"), PerNodeMaskSize: 112},
				FreeBlocks:   1000,
			},
			{Name: "v4only", IPv4: &policy.CIDRSpec{CIDR: netip.MustParsePrefix("192.168.0.0/16"), PerNodeMaskSize: 16}},
		},
	}
	b, err := proto.Marshal(wire.NodeRequestToProto(req))
	if err != nil {
		t.Fatal(err)
	}
	var m pb.NodeRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want, err := wire.NodeRequestFromProto(&m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeNodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decode mismatch\n got %+v\nwant %+v", got, want)
	}
}

func TestEncodeDecisionsMatchWire(t *testing.T) {
	pods := []policy.PodDecision{
		{Code: policy.Decided, Reason: "r", Source: "pod label", IPv4: policy.Candidates("a", "b"), IPv6: policy.Candidates("c")},
		{Code: policy.Skip},
		{Code: policy.NoFit, Reason: "nothing fits"},
		{Code: policy.NoFit, Reason: "annotation does not parse", Cause: policy.CauseInvalid, Source: "pod annotation"},
		{Code: policy.NoFit, Reason: "no pool fits", Cause: policy.CauseNoMatch, Rejected: []policy.Rejection{
			{Pool: "a", Family: policy.IPv4, Cause: policy.CauseInvalid, Reason: "annotation names no pool"},
			{Pool: "b", Cause: policy.CauseNoMatch, Reason: "podAffinity does not match"},
			{Pool: "c", Family: policy.IPv6, Cause: policy.CauseFull},
			{Pool: "d"},
		}},
		{Code: policy.Decided, IPv4: policy.Candidates("a"), Rejected: []policy.Rejection{{Pool: "b", Family: policy.IPv6, Cause: policy.CauseUnavailable, Reason: "disabled"}}},
	}
	for _, d := range pods {
		var m pb.PodDecision
		if err := proto.Unmarshal(appendPodDecision(nil, d), &m); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&m, wire.PodDecisionToProto(d)) {
			t.Errorf("pod decision %+v encodes as %v, want %v", d, &m, wire.PodDecisionToProto(d))
		}
		got, err := wire.PodDecisionFromProto(&m)
		if err != nil || !reflect.DeepEqual(got, d) {
			t.Errorf("round trip %+v: %+v, %v", d, got, err)
		}
	}
	nodes := []policy.NodeDecision{
		{Code: policy.Decided, Configs: []string{"a", "b"}},
		{Code: policy.NoFit, Reason: "no config matches"},
		{Code: policy.NoFit, Reason: "every config is full", Cause: policy.CauseFull},
	}
	for _, d := range nodes {
		var m pb.NodeDecision
		if err := proto.Unmarshal(appendNodeDecision(nil, d), &m); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&m, wire.NodeDecisionToProto(d)) {
			t.Errorf("node decision %+v encodes as %v", d, &m)
		}
	}
	// Invalid decisions are encoded as the host will reject them, naming the field.
	var m pb.PodDecision
	_ = proto.Unmarshal(appendPodDecision(nil, policy.PodDecision{Code: 42, IPv4: policy.Candidates("")}), &m)
	if _, err := wire.PodDecisionFromProto(&m); err == nil || !strings.Contains(err.Error(), "code") {
		t.Errorf("bad code: %v", err)
	}
	m.Code = pb.DecisionCode_DECISION_CODE_DECIDED
	if _, err := wire.PodDecisionFromProto(&m); err == nil || !strings.Contains(err.Error(), "ipv4[0].pool") {
		t.Errorf("empty candidate: %v", err)
	}
	m.Reset()
	_ = proto.Unmarshal(appendPodDecision(nil, policy.PodDecision{Code: policy.NoFit, Rejected: []policy.Rejection{{Pool: "a"}, {Reason: "r"}}}), &m)
	if _, err := wire.PodDecisionFromProto(&m); err == nil || !strings.Contains(err.Error(), "rejected[1].pool") {
		t.Errorf("empty rejected pool: %v", err)
	}

	var info pb.PluginInfo
	if err := proto.Unmarshal(appendPluginInfo(nil, "n", "1.2.3", "1.0.0"), &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != "n" || info.Version != "1.2.3" || info.Kind != pb.Kind_KIND_POOL_POLICY || info.ContractVersion != "1.0.0" {
		t.Errorf("plugin info %v", &info)
	}
}

// TestDecodeErrorsNameTheField: the same invalid input fails in both decoders with the
// same field path.
func TestDecodeErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name  string
		mut   func(*pb.PodRequest)
		field string
	}{
		{"family unspecified", func(m *pb.PodRequest) { m.Pools[1].Family = 0 }, "pools[1].family"},
		{"unknown family", func(m *pb.PodRequest) { m.Pools[0].Family = 9 }, "pools[0].family"},
		{"bad cidr", func(m *pb.PodRequest) { m.Pools[0].Cidrs[1] = "10.0.0.0/33" }, "pools[0].cidrs[1]"},
		{"bad operator", func(m *pb.PodRequest) { m.Pools[0].PodAffinity.MatchExpressions[1].Operator = "Near" }, "pools[0].pod_affinity.match_expressions[1].operator"},
		{"empty key", func(m *pb.PodRequest) { m.Pools[0].NodeAffinity.MatchExpressions[0].Key = "" }, "pools[0].node_affinity.match_expressions[0].key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := wire.PodRequestToProto(richPodRequest())
			m.Pools[0].PodAffinity = proto.Clone(m.Pools[0].PodAffinity).(*pb.LabelSelector) // unshare
			tt.mut(m)
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, werr := wire.PodRequestFromProto(m)
			_, gerr := decodePodRequest(b)
			if werr == nil || gerr == nil {
				t.Fatalf("wire: %v, guest: %v; want both to fail", werr, gerr)
			}
			if !strings.Contains(werr.Error(), ": "+tt.field+": ") || !strings.Contains(gerr.Error(), ": "+tt.field+": ") {
				t.Errorf("want field %s in both:\n wire:  %v\n guest: %v", tt.field, werr, gerr)
			}
		})
	}
	// Truncated and mistyped input.
	b, _ := proto.Marshal(wire.PodRequestToProto(richPodRequest()))
	if _, err := decodePodRequest(b[:len(b)-3]); err == nil {
		t.Error("truncated request decoded")
	}
	bad := protowire.AppendTag(nil, podReqPod, protowire.VarintType)
	bad = protowire.AppendVarint(bad, 1)
	if _, err := decodePodRequest(bad); err == nil || !strings.Contains(err.Error(), "pod: wrong wire type") {
		t.Errorf("mistyped field: %v", err)
	}
}

type echoPolicy struct{}

func (echoPolicy) SelectPodPools(_ context.Context, r *policy.PodRequest) (policy.PodDecision, error) {
	if r.Pod.Name == "fail" {
		return policy.PodDecision{}, errors.New("no luck")
	}
	return policy.PodDecision{Code: policy.Decided, Source: r.Pod.Name, IPv4: policy.Candidates(r.Pools[0].Name)}, nil
}

func (echoPolicy) SelectNodeCIDRConfig(_ context.Context, r *policy.NodeRequest) (policy.NodeDecision, error) {
	return policy.NodeDecision{Code: policy.Decided, Configs: []string{r.Node.Name}}, nil
}

func TestHandlers(t *testing.T) {
	plugin.policy = nil
	if f := handlePodPools(nil, nil); f[0] != frameError || !strings.Contains(string(f[1:]), "RegisterPoolPolicy") {
		t.Errorf("no policy: %q", f)
	}
	RegisterPoolPolicy(echoPolicy{}, Name("echo"), Version("9.9.9"))
	t.Cleanup(func() { plugin.policy = nil })

	b, _ := proto.Marshal(wire.PodRequestToProto(richPodRequest()))
	f := handlePodPools(nil, b)
	var m pb.PodDecision
	if f[0] != frameOK || proto.Unmarshal(f[1:], &m) != nil || m.Source != "web-0" || m.Ipv4[0].Pool != "blue" {
		t.Errorf("pod frame %q", f)
	}
	req := wire.PodRequestToProto(richPodRequest())
	req.Pod.Name = "fail"
	b, _ = proto.Marshal(req)
	if f := handlePodPools(f, b); f[0] != frameError || string(f[1:]) != "no luck" {
		t.Errorf("error frame %q", f)
	}
	if f := handlePodPools(nil, []byte{0xff}); f[0] != frameError || !strings.Contains(string(f[1:]), "pod request") {
		t.Errorf("garbage frame %q", f)
	}
	b, _ = proto.Marshal(wire.NodeRequestToProto(&policy.NodeRequest{Node: policy.Node{Name: "n7"}}))
	var nm pb.NodeDecision
	if f := handleNodeCIDRConfig(nil, b); f[0] != frameOK || proto.Unmarshal(f[1:], &nm) != nil || nm.Configs[0] != "n7" {
		t.Errorf("node frame %q", f)
	}
	var info pb.PluginInfo
	if err := proto.Unmarshal(pluginInfo(), &info); err != nil || info.Name != "echo" || info.Version != "9.9.9" {
		t.Errorf("info %v, %v", &info, err)
	}
}

// FuzzDecodePodRequest: no input makes the decoder panic, and whenever both decoders
// accept an input they agree.
func FuzzDecodePodRequest(f *testing.F) {
	b, _ := proto.Marshal(wire.PodRequestToProto(richPodRequest()))
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x2a, 0x02, 0x10, 0x01})
	f.Add(append(b, 0xc8, 0x3e, 0x0f, 0xd0, 0x3e, 0x01)) // part references (1001), a run of unchanged pools (1002)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gerr := decodePodRequest(b)
		var m pb.PodRequest
		if proto.Unmarshal(b, &m) != nil || transportFields(b) {
			return // the transport's own fields (sdk/ABI.md) mean nothing to proto: no panic is all
		}
		want, werr := wire.PodRequestFromProto(&m)
		if gerr == nil && werr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("decoders disagree on %x:\n got %+v\nwant %+v", b, got, want)
		}
	})
}

// transportFields reports whether a request has a top-level field of this transport only
// (pool and part references, 1000 and up), which other decoders skip.
func transportFields(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return false
		}
		if num >= podReqPoolRefs {
			return true
		}
		b = b[n+m:]
	}
	return false
}

func BenchmarkHandlePodPools(b *testing.B) {
	RegisterPoolPolicy(echoPolicy{})
	b.Cleanup(func() { plugin.policy = nil })
	req := richPodRequest()
	for i := range 17 {
		req.Pools = append(req.Pools, policy.PoolView{Name: "p" + string(rune('a'+i)), Family: policy.IPv4,
			CIDRs:        []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")},
			NodeAffinity: &policy.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}})
	}
	in, _ := proto.Marshal(wire.PodRequestToProto(req))
	var out []byte
	b.ReportAllocs()
	for b.Loop() {
		out = handlePodPools(out, in)
	}
}

// TestRequestCache: repeated pools, node and namespace are served from the cache, and the
// answer is always what a fresh decode gives, even after a policy reorders r.Pools.
func TestRequestCache(t *testing.T) {
	podCache = reqCache{}
	base := richPodRequest()
	changed := richPodRequest()
	changed.Pools[1].Free = 7
	changed.Node.Labels = map[string]string{"zone": "b"}
	empty := richPodRequest()
	empty.Pools = nil
	for i, req := range []*policy.PodRequest{base, base, changed, changed, base, empty, empty, base} {
		b, _ := proto.Marshal(wire.PodRequestToProto(req))
		var m pb.PodRequest
		_ = proto.Unmarshal(b, &m)
		want, _ := wire.PodRequestFromProto(&m)
		got, err := decodePodRequest(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("call %d: cached decode differs\n got %+v\nwant %+v", i, got, want)
		}
		slices.Reverse(got.Pools) // a policy "modifying" its request must not leak into the next call
	}
}

func TestEqualBytes(t *testing.T) {
	buf := []byte("0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz")
	for _, n := range []int{0, 1, 7, 8, 9, 16, 17, 35} {
		for off := range 3 { // unaligned starts
			a := buf[off : off+n]
			b := append([]byte(nil), a...)
			if !equalBytes(a, b) || !equalBytes(a, a) {
				t.Errorf("n=%d off=%d: equal slices differ", n, off)
			}
			for i := range n {
				c := append([]byte(nil), a...)
				c[i] ^= 1
				if equalBytes(a, c) {
					t.Errorf("n=%d off=%d: byte %d changed, still equal", n, off, i)
				}
			}
			if n > 0 && equalBytes(a, b[:n-1]) {
				t.Errorf("n=%d: different lengths equal", n)
			}
		}
	}
}

// freeFirst encodes m as the allot host does: each pool's free count first in its record.
func freeFirst(t *testing.T, m *pb.PodRequest) []byte {
	t.Helper()
	m = proto.Clone(m).(*pb.PodRequest)
	pools := m.Pools
	m.Pools = nil
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, pv := range pools {
		var rec []byte
		if pv.Free != 0 {
			rec = protowire.AppendTag(rec, pvFree, protowire.VarintType)
			rec = protowire.AppendVarint(rec, pv.Free)
		}
		pv.Free = 0
		body, err := proto.Marshal(pv)
		if err != nil {
			t.Fatal(err)
		}
		b = protowire.AppendTag(b, podReqPools, protowire.BytesType)
		b = protowire.AppendBytes(b, append(rec, body...))
	}
	return b
}

// TestDecodePodRequestCacheAgrees: a sequence of requests, each a small change from the
// last, decoded with the cache warm from the previous ones, gives what sdk/wire gives.
func TestDecodePodRequestCacheAgrees(t *testing.T) {
	podCache = reqCache{}
	steps := []struct {
		name string
		mut  func(*policy.PodRequest)
	}{
		{"first", func(*policy.PodRequest) {}},
		{"same again", func(*policy.PodRequest) {}},
		{"free moves", func(r *policy.PodRequest) { r.Pools[0].Free-- }},
		{"free to zero", func(r *policy.PodRequest) { r.Pools[1].Free = 0 }},
		{"free back", func(r *policy.PodRequest) { r.Pools[1].Free = 7 }},
		{"pool renamed", func(r *policy.PodRequest) { r.Pools[2].Name = "renamed" }},
		{"pool disabled", func(r *policy.PodRequest) { r.Pools[0].Disabled = false }},
		{"pod labels change", func(r *policy.PodRequest) { r.Pod.Labels = map[string]string{"app": "db"} }},
		{"pod labels go", func(r *policy.PodRequest) { r.Pod.Labels, r.Pod.Annotations = nil, nil }},
		{"pod labels back", func(r *policy.PodRequest) { r.Pod.Labels = map[string]string{"app": "db"} }},
		{"CNI interface changes", func(r *policy.PodRequest) { r.CNI.IfName = "net1" }},
		{"CNI pools change", func(r *policy.PodRequest) { r.CNI.Pools = []string{"a", "b"} }},
		{"CNI gone", func(r *policy.PodRequest) { r.CNI = policy.CNIRequest{} }},
		{"CNI back", func(r *policy.PodRequest) { r.CNI = richPodRequest().CNI }},
		{"pool removed", func(r *policy.PodRequest) { r.Pools = r.Pools[1:] }},
		{"pools reordered", func(r *policy.PodRequest) { slices.Reverse(r.Pools) }},
		{"pool added", func(r *policy.PodRequest) {
			r.Pools = append(r.Pools, policy.PoolView{Name: "new", Family: policy.IPv4, Free: 3})
		}},
		{"no pools", func(r *policy.PodRequest) { r.Pools = nil }},
		{"pools again", func(r *policy.PodRequest) { r.Pools = richPodRequest().Pools }},
	}
	req := richPodRequest()
	for _, st := range steps {
		st.mut(req)
		m := wire.PodRequestToProto(req)
		want, err := wire.PodRequestFromProto(m)
		if err != nil {
			t.Fatal(err)
		}
		std, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		// Alternate the host's layout and the standard one: the cache must not mix them up.
		for _, layout := range []struct {
			name string
			b    []byte
		}{{"host", freeFirst(t, m)}, {"standard", std}, {"host", freeFirst(t, m)}} {
			got, err := decodePodRequest(layout.b)
			if err != nil {
				t.Fatalf("%s (%s layout): %v", st.name, layout.name, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s (%s layout): decode mismatch\n got %+v\nwant %+v", st.name, layout.name, got, want)
			}
		}
	}
	// A policy sorting r.Pools in place cannot corrupt the cache.
	b := freeFirst(t, wire.PodRequestToProto(req))
	got, _ := decodePodRequest(b)
	slices.Reverse(got.Pools)
	again, _ := decodePodRequest(b)
	if again.Pools[0].Name != req.Pools[0].Name {
		t.Errorf("cache corrupted by an in-place sort: first pool %q", again.Pools[0].Name)
	}
	// A record carrying free twice (last one wins) is not split.
	rec := protowire.AppendVarint(protowire.AppendTag(nil, pvFree, protowire.VarintType), 5)
	rec = protowire.AppendVarint(protowire.AppendTag(rec, pvFamily, protowire.VarintType), familyIPv4)
	rec = protowire.AppendVarint(protowire.AppendTag(rec, pvFree, protowire.VarintType), 9)
	twice := protowire.AppendBytes(protowire.AppendTag(nil, podReqPools, protowire.BytesType), rec)
	for range 2 {
		r, err := decodePodRequest(twice)
		if err != nil || r.Pools[0].Free != 9 {
			t.Fatalf("free twice: %+v, %v; want free 9", r, err)
		}
	}
}

// A request carrying node or cni twice merges them (protobuf's rule for a message field), and
// neither starts from nor poisons the caches: the next request with one of the two alone
// decodes to that one alone.
func TestDecodeRepeatedFieldsBypassCaches(t *testing.T) {
	one := func(node, pool string) []byte {
		b, err := proto.Marshal(&pb.PodRequest{
			Node: &pb.Node{Name: "n", Labels: []*pb.StringPair{{Key: node, Value: "1"}}},
			Cni:  &pb.CNIRequest{Pools: []string{pool}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := one("x", "a"), one("y", "b")
	for _, step := range []struct {
		in         []byte
		node       map[string]string
		cniPools   []string
		whatItDoes string
	}{
		{b, map[string]string{"y": "1"}, []string{"b"}, "b alone (cached)"},
		{append(slices.Clone(a), b...), map[string]string{"x": "1", "y": "1"}, []string{"a", "b"}, "a then b, merged"},
		{b, map[string]string{"y": "1"}, []string{"b"}, "b alone again"},
		{append(slices.Clone(b), b...), map[string]string{"y": "1"}, []string{"b", "b"}, "b twice"},
		{b, map[string]string{"y": "1"}, []string{"b"}, "b alone once more"},
	} {
		got, err := decodePodRequest(step.in)
		if err != nil {
			t.Fatalf("%s: %v", step.whatItDoes, err)
		}
		if !maps.Equal(got.Node.Labels, step.node) || !slices.Equal(got.CNI.Pools, step.cniPools) {
			t.Errorf("%s: node labels %v, cni pools %v; want %v, %v", step.whatItDoes, got.Node.Labels, got.CNI.Pools, step.node, step.cniPools)
		}
	}
}

// TestCachedMapNotMerged: a pod whose labels come in two runs (another field between them)
// gets both, and the map cached for the first run is not changed by the second
// (FuzzDecodePodRequest found it: a later request repeating the first run got both).
func TestCachedMapNotMerged(t *testing.T) {
	podCache = reqCache{}
	entry := func(b []byte, k, v string) []byte {
		e := protowire.AppendString(protowire.AppendTag(nil, mapKey, protowire.BytesType), k)
		e = protowire.AppendString(protowire.AppendTag(e, mapValue, protowire.BytesType), v)
		return protowire.AppendBytes(protowire.AppendTag(b, podLabels, protowire.BytesType), e)
	}
	request := func(pod []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, podReqPod, protowire.BytesType), pod)
	}
	first := entry(nil, "app", "web")
	two := entry(protowire.AppendString(protowire.AppendTag(append([]byte(nil), first...), podName, protowire.BytesType), "p"), "tier", "db")
	for i, c := range []struct {
		req  []byte
		want map[string]string
	}{
		{request(first), map[string]string{"app": "web"}},
		{request(two), map[string]string{"app": "web", "tier": "db"}},
		{request(first), map[string]string{"app": "web"}},
	} {
		got, err := decodePodRequest(c.req)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Pod.Labels, c.want) {
			t.Errorf("request %d: labels %v, want %v", i, got.Pod.Labels, c.want)
		}
	}
}
