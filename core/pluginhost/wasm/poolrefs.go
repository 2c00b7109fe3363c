package wasm

import (
	"bytes"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Pool references (sdk/ABI.md, "Pool references"). A guest that exports allot_features
// with featurePoolRefs set keeps, per position, the last pool record it decoded; the host
// mirrors that per instance and, for a pool whose record (apart from its leading free
// count) is the one the instance last decoded at the same position, sends a reference
// instead. Consecutive references travel as one run (field fPodReqPoolRefs: a count, then
// one varint per pool, free+1, or 0 when the record had no leading free count), which the
// guest turns into one copy of its cached views: a Go wasm guest pays ~0.1 µs per function
// call, so walking even a reference per pool cost more than a microsecond each.
//
// The mirror is only trusted while the guest's cache is known to match it: any call that
// does not end in an OK frame clears it, so the next request sends every pool in full.

const (
	exportFeatures = "allot_features" // () -> i64 feature bits (optional)

	// featurePoolRefs: the guest understands PodRequest field fPodReqPoolRefs.
	featurePoolRefs uint64 = 1 << 0

	// fPodReqPoolRefs is the PodRequest field of a run of pool references. It is not in
	// policy.proto: only the WASM transport sends it, and only to guests that asked.
	fPodReqPoolRefs = 1000
)

// pooledRecord is what the host knows the instance cached at one pool position.
type pooledRecord struct {
	split bool   // the record began with a free count, which rest excludes
	rest  []byte // owned copy
}

// splitFree splits a pool record into its leading free count and the rest, as the guest
// does (sdk/wasm/guest/cache.go).
func splitFree(rec []byte) (free uint64, rest []byte, ok bool) {
	if len(rec) == 0 || rec[0] != fPvFree<<3|byte(protowire.VarintType) {
		return 0, rec, false
	}
	v, n := protowire.ConsumeVarint(rec[1:])
	if n < 0 || v == math.MaxUint64 { // free+1 must fit a reference
		return 0, rec, false
	}
	return v, rec[1+n:], true
}

// withPoolRefs appends to dst the request req with every pool the instance has already
// decoded replaced by a reference, and updates the mirror. req is the host's own
// PodRequest encoding; should it be malformed, it is appended unchanged and the mirror
// cleared.
func (in *instance) withPoolRefs(dst, req []byte) []byte {
	start := len(dst)
	b := req
	pos := 0
	run := in.refRun[:0] // free+1 (or 0) per pool of the pending run
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			break
		}
		field := b[:n+m]
		b = b[n+m:]
		if num == fPodReqPools && typ == protowire.BytesType {
			rec, _ := protowire.ConsumeBytes(field[n:])
			if f, hit := in.mirror(pos, rec); hit {
				run = append(run, f)
				pos++
				continue
			}
			pos++
		}
		dst = appendRefRun(dst, run)
		run = run[:0]
		dst = append(dst, field...)
	}
	dst = appendRefRun(dst, run)
	in.refRun = run[:0]
	if len(b) > 0 { // malformed: send it as it is, and trust nothing cached
		in.forget()
		return append(dst[:start], req...)
	}
	in.pools = in.pools[:pos]
	return dst
}

// mirror compares the pool record rec, the pos-th of the request, with the one the guest
// decoded last time at that position. On a hit it returns the reference to send (free+1,
// or 0 when the record has no leading free count); on a miss it records rec in its place.
func (in *instance) mirror(pos int, rec []byte) (ref uint64, hit bool) {
	free, rest, split := splitFree(rec)
	if pos < len(in.pools) {
		if c := &in.pools[pos]; c.split == split && bytes.Equal(c.rest, rest) {
			if split {
				return free + 1, true
			}
			return 0, true
		}
	} else {
		in.pools = append(in.pools, pooledRecord{})
	}
	c := &in.pools[pos]
	c.split, c.rest = split, append(c.rest[:0], rest...)
	return 0, false
}

// appendRefRun appends a pool_refs field for the pending run of references, if any.
func appendRefRun(dst []byte, run []uint64) []byte {
	if len(run) == 0 {
		return dst
	}
	size := protowire.SizeVarint(uint64(len(run)))
	for _, f := range run {
		size += protowire.SizeVarint(f)
	}
	dst = protowire.AppendTag(dst, fPodReqPoolRefs, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(size))
	dst = protowire.AppendVarint(dst, uint64(len(run)))
	for _, f := range run {
		dst = protowire.AppendVarint(dst, f)
	}
	return dst
}

// forget clears the mirrors: the next request sends every pool and part in full.
func (in *instance) forget() {
	in.pools, in.views = in.pools[:0], in.views[:0]
	in.forgetParts()
}
