package guest

import (
	"reflect"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// withRefs re-encodes req (sdk/wire's encoding, free counts first) with the pools at the
// positions in refs sent as runs of references, as the host does (sdk/ABI.md); the caller
// names only positions whose record, apart from a leading free count, is the cached one.
func withRefs(t *testing.T, req *policy.PodRequest, refs map[int]bool) []byte {
	t.Helper()
	b, err := wire.AppendPodRequest(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	var out, run []byte
	n := 0
	flush := func() {
		if n == 0 {
			return
		}
		body := append(protowire.AppendVarint(nil, uint64(n)), run...)
		out = protowire.AppendTag(out, podReqPoolRefs, protowire.BytesType)
		out = protowire.AppendBytes(out, body)
		run, n = nil, 0
	}
	pos := 0
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[k:])
		field := b[:k+m]
		b = b[k+m:]
		if num == podReqPools && refs[pos] {
			rec, _ := protowire.ConsumeBytes(field[k:])
			f, _, split := splitFreePrefix(rec)
			if split {
				f++
			} // else 0: as cached (a record without a free prefix has free 0, as before)
			run = protowire.AppendVarint(run, f)
			n++
			pos++
			continue
		}
		flush()
		if num == podReqPools {
			pos++
		}
		out = append(out, field...)
	}
	flush()
	return out
}

// decodeFresh decodes req's full encoding with an empty cache, leaving podCache as it was,
// and returns a copy of what the policy would get.
func decodeFresh(t *testing.T, req *policy.PodRequest) *policy.PodRequest {
	t.Helper()
	b, _ := wire.AppendPodRequest(nil, req)
	saved := podCache
	podCache = reqCache{}
	got, err := decodePodRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	cp := *got // got is podCache's reused request: copy it before restoring the cache
	cp.Pools = append([]policy.PoolView(nil), got.Pools...)
	podCache = saved
	return &cp
}

// TestPoolRefs: a run of references gives what decoding the full request gives, with the
// free counts the run carries; references to positions never decoded are refused.
func TestPoolRefs(t *testing.T) {
	podCache = reqCache{}
	full := func(req *policy.PodRequest) *policy.PodRequest { return decodeFresh(t, req) }
	base := richPodRequest()
	if _, err := decodePodRequest(withRefs(t, base, nil)); err != nil { // fills the cache
		t.Fatal(err)
	}
	changed := richPodRequest()
	// Free counts whose references take 1, 2, 3 and 6 bytes (the decoder inlines up to 3).
	for _, free := range []uint64{5, 12345, 1_000_000, 1 << 40} {
		changed.Pools[0].Free = free
		for _, refs := range []map[int]bool{{0: true, 1: true, 2: true}, {0: true}, {1: true, 2: true}, {}} {
			want := full(changed)
			got, err := decodePodRequest(withRefs(t, changed, refs))
			if err != nil {
				t.Fatalf("free %d, refs %v: %v", free, refs, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("free %d, refs %v: got %+v\nwant %+v", free, refs, got, want)
			}
		}
	}

	podCache = reqCache{}
	_, err := decodePodRequest(withRefs(t, base, map[int]bool{0: true}))
	if err == nil || !strings.Contains(err.Error(), "pools[0]") {
		t.Errorf("reference to an uncached pool: err %v, want one naming pools[0]", err)
	}
}

// TestSameRuns: a run of unchanged pools gives the pools as last decoded or referenced,
// free counts included; one beyond the cache is refused.
func TestSameRuns(t *testing.T) {
	podCache = reqCache{}
	req := richPodRequest()
	n := len(req.Pools)
	if _, err := decodePodRequest(withRefs(t, req, nil)); err != nil { // fills the cache
		t.Fatal(err)
	}
	same := func(b []byte, k int) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, podReqPoolSame, protowire.VarintType), uint64(k))
	}
	head := withRefs(t, &policy.PodRequest{Pod: req.Pod, Namespace: req.Namespace, Node: req.Node, CNI: req.CNI}, nil)
	check := func(name string, b []byte) {
		t.Helper()
		got, err := decodePodRequest(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := decodeFresh(t, req); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %+v\nwant %+v", name, got, want)
		}
	}
	check("all unchanged", same(append([]byte(nil), head...), n))
	req.Pools[0].Free = 4242
	refs := map[int]bool{}
	for i := range req.Pools {
		refs[i] = true
	}
	check("all referenced, the first with a new free count", withRefs(t, req, refs))
	check("unchanged after the reference", same(append([]byte(nil), head...), n))
	_, err := decodePodRequest(same(append([]byte(nil), head...), n+1))
	if err == nil || !strings.Contains(err.Error(), "pools[0]") {
		t.Errorf("a run beyond the cache: %v, want an error naming pools[0]", err)
	}
}
