package guest

import (
	"slices"
	"unsafe"

	"github.com/allot-ipam/allot/sdk/policy"
	"google.golang.org/protobuf/encoding/protowire"
)

// reqCache remembers the decoded form of the parts of a pod request that rarely change from
// one call to the next: the pool views (they change when a pool is added or its counters
// move), the node (an agent always asks for its own node) and the namespace. Decoding
// twenty pool views is most of a call's work in a wasm guest, and comparing their encoded
// bytes with the last ones is a fraction of it, so a repeat costs a memcmp and one copy of
// the pool slice instead of a decode.
//
// Sharing is safe because the contract says the views are read-only; the top-level Pools
// slice is still copied per call, so a policy that sorts or filters r.Pools in place (the
// usual way to "modify" it) cannot corrupt the cache. The cached bytes are views of a
// private copy of an earlier request, which is never written again.
//
// The exports run one at a time per instance, so the cache needs no lock.
type reqCache struct {
	pools     []byte
	poolViews []policy.PoolView
	node      []byte
	nodeVal   policy.Node
	ns        []byte
	nsVal     policy.Namespace
}

var podCache reqCache

// poolsSpan returns the bytes of the pool records of an encoded PodRequest, if they are
// contiguous (they are with every standard encoder, which writes fields in order), and how
// many there are.
func poolsSpan(b []byte) (span []byte, n int, ok bool) {
	start, end := -1, -1
	off := 0
	for off < len(b) {
		num, typ, tn := protowire.ConsumeTag(b[off:])
		if tn < 0 {
			return nil, 0, false
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[off+tn:])
		if vn < 0 {
			return nil, 0, false
		}
		if num == podReqPools {
			if start < 0 {
				start = off
			} else if end != off {
				return nil, 0, false // interleaved with other fields: decode without the cache
			}
			end = off + tn + vn
			n++
		}
		off += tn + vn
	}
	if start < 0 {
		return nil, 0, true
	}
	return b[start:end], n, true
}

// lookupPools returns a fresh copy of the cached pool views if span is what they were
// decoded from.
func (c *reqCache) lookupPools(span []byte) ([]policy.PoolView, bool) {
	if c.poolViews == nil || !equalBytes(span, c.pools) {
		return nil, false
	}
	if len(c.poolViews) == 0 {
		return nil, true
	}
	return slices.Clone(c.poolViews), true
}

// equalBytes is bytes.Equal eight bytes at a time. Go's wasm port implements bytes.Equal
// (runtime.memeqbody) one byte per loop iteration, and each iteration of a guest loop costs
// a deadline check (sdk/ABI.md): comparing a kilobyte of pool views that way was a third of
// a cached decision's loop iterations. Wasm loads may be unaligned.
func equalBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	n := len(a)
	if n == 0 {
		return true
	}
	pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
	if pa == pb {
		return true
	}
	i := 0
	for ; i+8 <= n; i += 8 {
		if *(*uint64)(unsafe.Add(pa, i)) != *(*uint64)(unsafe.Add(pb, i)) {
			return false
		}
	}
	for ; i < n; i++ {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
