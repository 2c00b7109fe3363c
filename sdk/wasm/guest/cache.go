package guest

import (
	"maps"
	"unsafe"

	"github.com/allot-ipam/allot/sdk/policy"
	"google.golang.org/protobuf/encoding/protowire"
)

// reqCache remembers the decoded form of the parts of a pod request that rarely change from
// one call to the next: each pool view, the node (an agent always asks for its own node),
// the namespace, the CNI part (the same network and interface for most pods of a node), and
// the pod's label and annotation maps (pods of one workload carry the same ones). Decoding
// twenty pool views is most of a call's work in a wasm guest, and comparing their encoded
// bytes with the last ones is a fraction of it, so a repeat costs a memcmp per part instead
// of a decode.
//
// Pools are cached one by one, by position: allocating an address changes one pool's free
// count, and only that pool's record differs from the previous request. The host writes
// each pool's free count first in its record (sdk/ABI.md), so the cache compares the rest of
// the record and takes the count from the prefix: a changed free count costs one varint.
// A record from another encoder (free elsewhere, or absent) is compared whole.
//
// Sharing is safe because the contract says the views are read-only; the top-level Pools
// slice is still built per call, so a policy that sorts or filters r.Pools in place (the
// usual way to "modify" it) cannot corrupt the cache. The cached bytes are views of a
// private copy of an earlier request, which is never written again.
//
// The exports run one at a time per instance, so the cache needs no lock.
type reqCache struct {
	// req and poolsBuf are the request handed to the policy and its Pools backing array,
	// reused by the next call (allocating them per call was a third of a cached
	// decision's time: a Go wasm guest pays microseconds per kilobyte allocated).
	req      policy.PodRequest
	poolsBuf []policy.PoolView

	pools          []poolEntry
	views          []policy.PoolView // views[i] is decoded from pools[i]
	node           []byte
	nodeVal        policy.Node
	ns             []byte
	nsVal          policy.Namespace
	cni            []byte
	cniVal         policy.CNIRequest
	podLabels      mapCache
	podAnnotations mapCache
	// podRest is the pod of the last request that carried one in full, without its name
	// and uid: what a partPodRest reference stands for (podRestOK once there is one).
	podRest   policy.Pod
	podRestOK bool
}

// Part bits of PodRequest field podReqPartRefs (sdk/ABI.md, "Part references"): each names
// a part of the request the host left out because this instance decoded it last time.
const (
	partNamespace uint64 = 1 << iota
	partNode
	partCNI
	partPodRest // the pod's fields other than name and uid
	partsKnown  = partNamespace | partNode | partCNI | partPodRest
)

// partRefs fills in the parts refs names from the cache. sent has the bits of the parts
// the request carried (partPodRest for any pod field), podRest whether a pod field carried
// more than the name and uid.
func (c *reqCache) partRefs(r *reader, out *policy.PodRequest, refs, sent uint64, podRest bool) {
	const field = "part references"
	switch {
	case refs&^partsKnown != 0:
		r.fail(field, "unknown part bits %#x", refs&^partsKnown)
	case refs&sent&^partPodRest != 0:
		r.fail(field, "parts %#x sent both in full and by reference", refs&sent&^partPodRest)
	case refs&partPodRest != 0 && podRest:
		r.fail("pod", "fields other than name and uid sent with a reference to them")
	case refs&partNamespace != 0 && c.ns == nil, refs&partNode != 0 && c.node == nil,
		refs&partCNI != 0 && c.cni == nil, refs&partPodRest != 0 && !c.podRestOK:
		r.fail(field, "reference to a part this instance has not decoded (bits %#x)", refs)
	}
	if r.err != nil {
		return
	}
	if refs&partNamespace != 0 {
		out.Namespace = c.nsVal
	}
	if refs&partNode != 0 {
		out.Node = c.nodeVal
	}
	if refs&partCNI != 0 {
		out.CNI = c.cniVal
	}
	if refs&partPodRest != 0 {
		name, uid := out.Pod.Name, out.Pod.UID
		out.Pod = c.podRest
		out.Pod.Name, out.Pod.UID = name, uid
	}
}

// remember records the parts a successfully decoded request carried in full (nil bytes: not
// carried), for the byte comparisons and for part references.
func (c *reqCache) remember(out *policy.PodRequest, node, ns, cni []byte, podInFull bool) {
	if node != nil {
		c.node, c.nodeVal = node, out.Node
	}
	if ns != nil {
		c.ns, c.nsVal = ns, out.Namespace
	}
	if cni != nil {
		c.cni, c.cniVal = cni, out.CNI
	}
	if podInFull {
		c.podRest, c.podRestOK = out.Pod, true
		c.podRest.Name, c.podRest.UID = "", ""
	}
}

// poolEntry is the record bytes a cached pool view (reqCache.views, kept apart so that a
// run of references is one copy) came from, minus a leading free count when splitFree is
// set (the view's Free is then replaced per request).
type poolEntry struct {
	rest      []byte
	splitFree bool
}

// mapCache is a decoded map and the run of encoded entries it came from.
type mapCache struct {
	b []byte
	m map[string]string
}

var podCache reqCache

// newRequest returns the request to decode into: podCache.req, reset, with an empty Pools
// slice over the reused backing array. The policy may sort or reslice r.Pools; finish
// clips it so appending to it cannot reach the array's spare room either.
func (c *reqCache) newRequest() *policy.PodRequest {
	c.req = policy.PodRequest{Pools: c.poolsBuf[:0]}
	return &c.req
}

// finish records the grown backing array and clips r.Pools to its length.
func (c *reqCache) finish(r *policy.PodRequest) {
	c.poolsBuf = r.Pools[:0]
	r.Pools = r.Pools[:len(r.Pools):len(r.Pools)]
}

// poolRefs resolves a run of pool references (field podReqPoolRefs, sdk/ABI.md "Pool
// references"): the next n pools are the ones this instance decoded last at the same
// positions, each with the free count the run carries (free+1, or 0 for "as cached").
// They are appended to *pools with one copy, and nothing but the free counts is walked.
func (c *reqCache) poolRefs(r *reader, b []byte, pools *[]policy.PoolView) {
	i := len(*pools)
	n, k := protowire.ConsumeVarint(b)
	if k < 0 || i > len(c.views) || n > uint64(len(c.views)-i) {
		r.fail(idx(fieldPools, i), "reference to pools this instance has not decoded at these positions")
		return
	}
	b = b[k:]
	*pools = append(*pools, c.views[i:i+int(n)]...)
	refs := (*pools)[i:]
	for j := range refs {
		// Varints of up to three bytes (free counts below 2^21) inline: a function call per
		// pool was a good part of resolving a run.
		var f uint64
		switch {
		case len(b) > 0 && b[0] < 0x80:
			f, b = uint64(b[0]), b[1:]
		case len(b) > 1 && b[1] < 0x80:
			f, b = uint64(b[0]&0x7f)|uint64(b[1])<<7, b[2:]
		case len(b) > 2 && b[2] < 0x80:
			f, b = uint64(b[0]&0x7f)|uint64(b[1]&0x7f)<<7|uint64(b[2])<<14, b[3:]
		default:
			if f, k = protowire.ConsumeVarint(b); k < 0 {
				r.fail(idx(fieldPools, i+j), "pool reference: bad free count")
				return
			}
			b = b[k:]
		}
		if f != 0 && c.pools[i+j].splitFree { // else the cached record set free itself, after its prefix
			refs[j].Free = f - 1
			c.views[i+j].Free = f - 1 // what a run of unchanged pools stands for from now on
		}
	}
	if len(b) != 0 {
		r.fail(idx(fieldPools, i), "pool reference run longer than its count")
	}
}

// sameRun resolves a run of n unchanged pools (field podReqPoolSame): the next n pools are
// the ones this instance has at these positions, free counts included (the last ones a
// record or a reference carried). One copy, nothing walked.
func (c *reqCache) sameRun(r *reader, n uint64, pools *[]policy.PoolView) {
	i := len(*pools)
	if r.err != nil {
		return
	}
	if i > len(c.views) || n > uint64(len(c.views)-i) {
		r.fail(idx(fieldPools, i), "run of unchanged pools this instance has not decoded at these positions")
		return
	}
	*pools = append(*pools, c.views[i:i+int(n)]...)
}

// freeTag is the tag byte of PoolView.free (field 6, varint).
const freeTag = pvFree<<3 | byte(protowire.VarintType)

// splitFreePrefix splits a pool record into a leading free count and the rest.
func splitFreePrefix(rec []byte) (free uint64, rest []byte, ok bool) {
	if len(rec) == 0 || rec[0] != freeTag {
		return 0, rec, false
	}
	v, n := protowire.ConsumeVarint(rec[1:])
	if n < 0 {
		return 0, rec, false
	}
	return v, rec[1+n:], true
}

// poolView decodes the pool record r holds into v, or copies the cached view when the record
// (apart from a leading free count) is the one cached at this position.
func (c *reqCache) poolView(r *reader, v *policy.PoolView) {
	i := r.index
	free, rest, split := splitFreePrefix(r.b)
	if i < len(c.pools) {
		if e := &c.pools[i]; e.rest != nil && e.splitFree == split && equalBytes(rest, e.rest) {
			if split {
				c.views[i].Free = free
			}
			*v = c.views[i]
			r.b = nil
			return
		}
	}
	// A record whose rest carries free again (last one wins in protobuf) is cached whole.
	if split && countFields(rest)[pvFree] > 0 {
		split, rest = false, r.b
	}
	decodePoolView(r, v)
	if r.err != nil {
		return
	}
	e := poolEntry{rest: rest, splitFree: split}
	if len(e.rest) == 0 {
		e.rest = []byte{} // non-nil: an empty record is cacheable too
	}
	if i < len(c.pools) {
		c.pools[i], c.views[i] = e, *v
	} else if i == len(c.pools) {
		c.pools, c.views = append(c.pools, e), append(c.views, *v)
	}
	// Each entry is self-consistent (a view and the bytes it came from), so entries updated
	// by a request that then fails to decode are still correct.
}

// cachedMap decodes the run of map entries of field num starting at r.b (the first entry's
// tag is already consumed) into *m, reusing mc's map when the run's bytes are the same. A
// run interrupted by other fields is decoded without the cache; the map is sized for the
// run's entries.
func (r *reader) cachedMap(num protowire.Number, typ protowire.Type, field string, m *map[string]string, mc *mapCache) {
	if *m != nil || typ != protowire.BytesType {
		if *m != nil && mc.m != nil && sameMap(*m, mc.m) {
			*m = maps.Clone(*m) // a later run of the field: never add to the cached map
		}
		r.mapEntry(typ, field, m, 1)
		return
	}
	// The run: this entry's value, then every directly following entry of the same field.
	end := protowire.ConsumeFieldValue(num, typ, r.b)
	if end < 0 {
		r.mapEntry(typ, field, m, 1) // reports the error
		return
	}
	entries := 1
	for end < len(r.b) {
		n2, t2, tn := protowire.ConsumeTag(r.b[end:])
		if tn < 0 || n2 != num || t2 != protowire.BytesType {
			break
		}
		vn := protowire.ConsumeFieldValue(n2, t2, r.b[end+tn:])
		if vn < 0 {
			break
		}
		end += tn + vn
		entries++
	}
	run := r.b[:end]
	if mc.m != nil && equalBytes(run, mc.b) {
		*m = mc.m
		r.b = r.b[end:]
		return
	}
	s := reader{a: r.a, b: run, msg: r.msg, index: -1}
	s.mapEntry(protowire.BytesType, field, m, entries)
	for n2, t2, ok := s.next(); ok; n2, t2, ok = s.next() {
		_ = n2 // every field in the run is num
		s.mapEntry(t2, field, m, entries)
	}
	if s.err != nil {
		r.err = s.err // the entries' errors already name field
		return
	}
	r.b = r.b[end:]
	mc.b, mc.m = run, *m
}

// sameMap reports whether a and b are the same map (not merely equal ones).
func sameMap(a, b map[string]string) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b))
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
