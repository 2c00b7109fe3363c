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

	// featureSameRuns: the guest keeps the free count of each reference in its cache and
	// understands fPodReqPoolSame, a run of pools unchanged free counts included (a varint
	// count), so an unchanged pool costs it no varint and no store (sdk/ABI.md).
	featureSameRuns uint64 = 1 << 2
	fPodReqPoolSame        = 1002

	// sameRef, in a run of references, marks a pool the instance has with this very free
	// count; free+1 never takes the value (splitFree refuses the two highest counts).
	sameRef = math.MaxUint64
)

// pooledRecord is what the host knows the instance cached at one pool position.
type pooledRecord struct {
	split bool   // the record began with a free count, which rest excludes
	rest  []byte // owned copy
	free  uint64 // the free count the instance has (when split)
}

// splitFree splits a pool record into its leading free count and the rest, as the guest
// does (sdk/wasm/guest/cache.go).
func splitFree(rec []byte) (free uint64, rest []byte, ok bool) {
	if len(rec) == 0 || rec[0] != fPvFree<<3|byte(protowire.VarintType) {
		return 0, rec, false
	}
	v, n := protowire.ConsumeVarint(rec[1:])
	if n < 0 || v >= math.MaxUint64-1 { // free+1 must fit a reference, and not be sameRef
		return 0, rec, false
	}
	return v, rec[1+n:], true
}

// withPoolRefs appends to dst the request req with every pool the instance has already
// decoded replaced by a reference, and updates the mirror. req is the host's own
// PodRequest encoding; should it be malformed, it is appended unchanged and the mirror
// cleared.
func (in *instance) withPoolRefs(dst, req []byte, same bool) []byte {
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
			if f, hit := in.mirror(pos, rec, same); hit {
				run = append(run, f)
				pos++
				continue
			}
			pos++
		}
		dst = appendRuns(dst, run)
		run = run[:0]
		dst = append(dst, field...)
	}
	dst = appendRuns(dst, run)
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
// or 0 when the record has no leading free count; sameRef, when same, for a free count the
// instance has already); on a miss it records rec in its place.
func (in *instance) mirror(pos int, rec []byte, same bool) (ref uint64, hit bool) {
	free, rest, split := splitFree(rec)
	if pos < len(in.pools) {
		if c := &in.pools[pos]; c.split == split && bytes.Equal(c.rest, rest) {
			return c.ref(free, same), true
		}
	} else {
		in.pools = append(in.pools, pooledRecord{})
	}
	c := &in.pools[pos]
	c.split, c.rest, c.free = split, append(c.rest[:0], rest...), free
	return 0, false
}

// ref is the reference to a cached record that now has free count free, and records it.
func (c *pooledRecord) ref(free uint64, same bool) uint64 {
	switch {
	case !c.split && same:
		return sameRef // the cached view as it is either way
	case !c.split:
		return 0
	case same && c.free == free:
		return sameRef
	}
	c.free = free
	return free + 1
}

// appendRuns appends the pending run of references: each stretch of sameRef as one
// fPodReqPoolSame field, the others as runs of references.
func appendRuns(dst []byte, run []uint64) []byte {
	for len(run) > 0 {
		n := 0
		for n < len(run) && run[n] == sameRef {
			n++
		}
		if n > 0 {
			dst = protowire.AppendTag(dst, fPodReqPoolSame, protowire.VarintType)
			dst = protowire.AppendVarint(dst, uint64(n))
			run = run[n:]
		}
		for n = 0; n < len(run) && run[n] != sameRef; {
			n++
		}
		dst = appendRefRun(dst, run[:n])
		run = run[n:]
	}
	return dst
}

// appendRefRun appends a pool_refs field for a run of references, if any.
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
