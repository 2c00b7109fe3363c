package wasm

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
)

// Part references (sdk/ABI.md, "Part references"): the parts of a pod request that rarely
// change from one call to the next (the namespace, the node, the CNI part, and the pod's
// fields other than its name and UID, which pods of one workload share) are not sent again
// to an instance that decoded them last time; one varint field (fPodReqPartRefs) names the
// parts the guest takes from its cache instead. A Go guest pays a few hundred nanoseconds
// to compare even an unchanged part with its cache and copy it into the request; the host
// compares natively, in tens.
//
// The host mirrors, per instance, the bytes of each part as it last sent it in full. Like
// the pool mirrors, they are forgotten after any call that does not end in an OK frame,
// so host and guest never disagree for more than one failed call. A guest announces the
// feature with featurePartRefs; others get every part in full.

const (
	// featurePartRefs: the guest understands PodRequest field fPodReqPartRefs.
	featurePartRefs uint64 = 1 << 1

	// fPodReqPartRefs is the PodRequest field of the part bits (a varint). Like pool
	// references it is not in policy.proto and goes only to guests that asked for it.
	fPodReqPartRefs = 1001

	fPodReqPod, fPodName, fPodUID = 1, 2, 3
)

// Part bits of fPodReqPartRefs; a part's index in instance.parts is its bit's position.
const (
	partNamespace uint64 = 1 << iota // PodRequest.namespace (field 2)
	partNode                         // PodRequest.node (field 3)
	partCNI                          // PodRequest.cni (field 4)
	partPodRest                      // PodRequest.pod's fields other than name and uid
	numParts      = iota
)

// partMirror is a part as the instance last received it in full.
type partMirror struct {
	valid bool
	b     []byte // owned copy
}

// same reports whether b is the part the instance has, and otherwise records b as the
// part it is about to receive in full.
func (m *partMirror) same(b []byte) bool {
	if m.valid && bytes.Equal(m.b, b) {
		return true
	}
	m.valid, m.b = true, append(m.b[:0], b...)
	return false
}

// withPartRefs appends to dst the request req (this host's own encoding) with each part
// the instance already has left out and named in one fPodReqPartRefs field. A request it
// does not expect (malformed, or a part twice) is appended unchanged and the mirrors
// forgotten.
func (in *instance) withPartRefs(dst, req []byte) []byte {
	start := len(dst)
	var bits, seen uint64
	for b := req; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[max(n, 0):])
		if n < 0 || m < 0 {
			return in.partsUnchanged(dst[:start], req)
		}
		field := b[:n+m]
		b = b[n+m:]
		bit := partBit(num)
		if bit == 0 || typ != protowire.BytesType {
			dst = append(dst, field...)
			continue
		}
		if seen&bit != 0 {
			return in.partsUnchanged(dst[:start], req)
		}
		seen |= bit
		body, _ := protowire.ConsumeBytes(field[n:])
		if num == fPodReqPod {
			var ref bool
			if dst, ref = in.podWithoutRest(dst, body); ref {
				bits |= bit
			}
			continue
		}
		if in.parts[partIndex(bit)].same(body) {
			bits |= bit
			continue
		}
		dst = append(dst, field...)
	}
	if bits != 0 {
		dst = protowire.AppendTag(dst, fPodReqPartRefs, protowire.VarintType)
		dst = protowire.AppendVarint(dst, bits)
	}
	return dst
}

// podWithoutRest appends the pod field: only its name and uid when the rest is what the
// instance has (ref true), else in full.
func (in *instance) podWithoutRest(dst, pod []byte) ([]byte, bool) {
	keep, rest := in.podKeep[:0], in.podRest[:0]
	for b := pod; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[max(n, 0):])
		if n < 0 || m < 0 { // not this host's encoding: sent as it is, and nothing cached trusted
			in.parts[partIndex(partPodRest)].valid = false
			dst = protowire.AppendTag(dst, fPodReqPod, protowire.BytesType)
			return protowire.AppendBytes(dst, pod), false
		}
		if num == fPodName || num == fPodUID {
			keep = append(keep, b[:n+m]...)
		} else {
			rest = append(rest, b[:n+m]...)
		}
		b = b[n+m:]
	}
	in.podKeep, in.podRest = keep, rest
	ref := in.parts[partIndex(partPodRest)].same(rest)
	if !ref {
		keep = pod
	}
	dst = protowire.AppendTag(dst, fPodReqPod, protowire.BytesType)
	return protowire.AppendBytes(dst, keep), ref
}

// partBit is the part bit of a top-level PodRequest field, 0 for a field that is no part.
func partBit(num protowire.Number) uint64 {
	switch num {
	case fPodReqPod:
		return partPodRest
	case 2:
		return partNamespace
	case 3:
		return partNode
	case 4:
		return partCNI
	}
	return 0
}

func partIndex(bit uint64) int {
	for i := range numParts {
		if bit == 1<<i {
			return i
		}
	}
	return -1
}

// partsUnchanged appends req as it is and forgets the part mirrors.
func (in *instance) partsUnchanged(dst, req []byte) []byte {
	in.forgetParts()
	return append(dst, req...)
}

func (in *instance) forgetParts() {
	for i := range in.parts {
		in.parts[i].valid = false
	}
}
