package wire

import (
	"bytes"
	"maps"
	"net/netip"
	"slices"
	"unicode/utf8"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"google.golang.org/protobuf/encoding/protowire"
)

// Reflection-free decoders for the per-decision hot path of the process transport: the
// plugin decodes the PodRequest bytes straight into sdk/policy types (DecodePodRequest)
// and the host decodes the PodDecision bytes (DecodePodDecision), instead of proto.Unmarshal
// building a message tree by reflection and a FromProto conversion copying it again. The
// bytes are the schema's bytes (decode_test.go checks them against proto.Marshal and the
// FromProto functions), so either side interoperates with peers built with older SDKs that
// still use the generated code. Validation and error messages are those of
// PodRequestFromProto and PodDecisionFromProto; proto3's UTF-8 check on strings is kept,
// and unknown fields are skipped, as protobuf requires.

const (
	fCandPool                                                     = 1
	fDecCode, fDecReason, fDecIPv4, fDecIPv6, fDecSource          = 1, 2, 3, 4, 5
	fDecCause                                                     = 6
	decCodeDecided, decCodeSkip, decCodeNoFit, familyV4, familyV6 = 1, 2, 3, 1, 2
)

// decoder walks the fields of one message. The first error sticks and every method is a
// no-op after it; a child's error reaches its parent through adopt, which prefixes the
// child's field segment, so no path string is built unless there is an error.
type decoder struct {
	b      []byte
	msg    string   // "pod request"
	parent *decoder // nil at the root
	name   string   // field name of this message within its parent
	index  int      // element index when name is a repeated field, else -1
	st     *slab    // nil: strings are copied one by one
	err    error
}

// slab holds what a PodRequest decodes into, so that a request costs a few allocations
// instead of one per string, address and selector (allocation and the GC work it causes
// were most of the decoding time): strings are substrings of one copy of the message, and
// one-element slices and selectors are carved out of shared chunks. A policy that keeps
// any of them keeps that chunk (a few KB) alive.
type slab struct {
	src  string // the whole message
	cap0 int    // cap of the message slice: a field's offset is cap0 - cap(field)
	strs []string
	pfxs []netip.Prefix
	sels []policy.LabelSelector
	// seen holds the selectors decoded so far by their bytes: pools usually share a few
	// affinities, and a selector repeated in one request is decoded once and shared (pool
	// views are read-only, by contract). Building their maps was most of the decoding time.
	seen []seenSelector
}

type seenSelector struct {
	b   []byte
	sel *policy.LabelSelector
}

// maxSeenSelectors bounds the linear search of slab.seen.
const maxSeenSelectors = 16

// one returns a one-element slice holding v, carved from *chunk (refilled with size more).
func one[T any](chunk *[]T, v T, size int) []T {
	if len(*chunk) == cap(*chunk) {
		*chunk = make([]T, 0, size)
	}
	i := len(*chunk)
	*chunk = append(*chunk, v)
	return (*chunk)[i : i+1 : i+1] // full slice expression: an append by the caller copies
}

// appendTo appends v to dst, taking a first element from the slab.
func appendTo[T any](st *slab, chunk *[]T, dst []T, v T, size int) []T {
	if dst == nil && st != nil {
		return one(chunk, v, size)
	}
	return append(dst, v)
}

func (d *decoder) strs(dst []string, v string) []string {
	if d.st == nil {
		return append(dst, v)
	}
	return appendTo(d.st, &d.st.strs, dst, v, 64)
}

// path is the field path of this message from the root, e.g. "pools[3].node_affinity".
func (d *decoder) path() string {
	if d.parent == nil {
		return ""
	}
	seg := d.name
	if d.index >= 0 {
		seg = idx(d.name, d.index)
	}
	if p := d.parent.path(); p != "" {
		return p + "." + seg
	}
	return seg
}

func (d *decoder) fail(field, format string, args ...any) {
	if d.err == nil {
		if p := d.path(); p != "" {
			if field == "" {
				field = p
			} else {
				field = p + "." + field
			}
		}
		d.err = invalid(d.msg, field, format, args...)
	}
}

// fields describes the known fields of a message for next: bit n of known is set for field
// number n, and bit n of varints too if that field is a varint (else it is length-delimited).
type fields struct{ known, varints uint32 }

func bits(nums ...int) uint32 {
	var m uint32
	for _, n := range nums {
		m |= 1 << n
	}
	return m
}

var (
	podRequestFields = fields{known: bits(1, 2, 3, 4, 5)}
	podFields        = fields{known: bits(1, 2, 3, 4, 5, 6, 7)}
	namespaceFields  = fields{known: bits(1, 2, 3)}
	nodeFields       = fields{known: bits(1, 2)}
	cniFields        = fields{known: bits(1, 2, 3, 4, 5, 6)}
	pairFields       = fields{known: bits(1, 2)}
	selectorFields   = fields{known: bits(1, 2)}
	reqFields        = fields{known: bits(1, 2, 3)}
	poolViewFields   = fields{known: bits(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19),
		varints: bits(2, 5, 6, 7, 8, 9, 12, 13)}
	podDecisionFields = fields{known: bits(1, 2, 3, 4, 5, 6, 7), varints: bits(1, 6)}
	candidateFields   = fields{known: bits(1)}
)

// next reads the next tag of a message with fields f; ok is false at the end of the
// message or after an error. A known field with an unexpected wire type is skipped, as
// proto.Unmarshal treats it as an unknown field, so callers only see the expected type.
func (d *decoder) next(f fields) (protowire.Number, protowire.Type, bool) {
	for d.err == nil && len(d.b) > 0 {
		num, typ, n := protowire.ConsumeTag(d.b)
		if n < 0 {
			d.fail("", "bad tag: %v", protowire.ParseError(n))
			return 0, 0, false
		}
		if num > protowire.MaxValidNumber {
			d.fail("", "bad tag: field number %d out of range", num)
			return 0, 0, false
		}
		d.b = d.b[n:]
		if num < 32 && f.known&(1<<num) != 0 {
			want := protowire.BytesType
			if f.varints&(1<<num) != 0 {
				want = protowire.VarintType
			}
			if typ != want {
				d.skip(num, typ)
				continue
			}
		}
		return num, typ, true
	}
	return 0, 0, false
}

func (d *decoder) skip(num protowire.Number, typ protowire.Type) {
	n := protowire.ConsumeFieldValue(num, typ, d.b)
	if n < 0 {
		d.fail("", "field %d: %v", num, protowire.ParseError(n))
		return
	}
	d.b = d.b[n:]
}

func (d *decoder) bytes(typ protowire.Type, field string) []byte {
	if typ != protowire.BytesType {
		d.fail(field, "wrong wire type")
		return nil
	}
	v, n := protowire.ConsumeBytes(d.b)
	if n < 0 {
		d.fail(field, "truncated")
		return nil
	}
	d.b = d.b[n:]
	return v
}

// str copies a string field out of the buffer (which gRPC reuses once the call returns).
func (d *decoder) str(typ protowire.Type, field string) string {
	b := d.bytes(typ, field)
	if len(b) == 0 {
		return ""
	}
	if !utf8.Valid(b) {
		d.fail(field, "string is not valid UTF-8")
		return ""
	}
	if d.st != nil {
		off := d.st.cap0 - cap(b)
		return d.st.src[off : off+len(b)]
	}
	return string(b)
}

func (d *decoder) varint(typ protowire.Type, field string) uint64 {
	if typ != protowire.VarintType {
		d.fail(field, "wrong wire type")
		return 0
	}
	v, n := protowire.ConsumeVarint(d.b)
	if n < 0 {
		d.fail(field, "truncated")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// sub returns a decoder for the embedded message in field name (element index of a
// repeated field, or -1).
func (d *decoder) sub(typ protowire.Type, name string, index int) decoder {
	var b []byte
	if typ != protowire.BytesType {
		d.fail(name, "wrong wire type")
	} else if v, n := protowire.ConsumeBytes(d.b); n < 0 {
		d.fail(name, "truncated")
	} else {
		b, d.b = v, d.b[n:]
	}
	return decoder{b: b, msg: d.msg, parent: d, name: name, index: index, st: d.st}
}

func (d *decoder) adopt(s *decoder) {
	if d.err == nil {
		d.err = s.err
	}
}

// pair decodes one StringPair into *m (made on first use); a repeated key keeps its last
// value, as mapFromProto does.
func (d *decoder) pair(typ protowire.Type, field string, m *map[string]string) {
	s := d.sub(typ, field, -1)
	var k, v string
	for num, t, ok := s.next(pairFields); ok; num, t, ok = s.next(pairFields) {
		switch num {
		case fPairKey:
			k = s.str(t, "key")
		case fPairValue:
			v = s.str(t, "value")
		default:
			s.skip(num, t)
		}
	}
	d.adopt(&s)
	if d.err != nil {
		return
	}
	if *m == nil {
		*m = make(map[string]string, 4)
	}
	(*m)[k] = v
}

// DecodePodRequest decodes and validates the protobuf encoding of a PodRequest (plugin
// side), as proto.Unmarshal followed by PodRequestFromProto would. The result shares no
// memory with b.
func DecodePodRequest(b []byte) (*policy.PodRequest, error) {
	d := decoder{b: b, msg: msgPodRequest, index: -1, st: &slab{src: string(b), cap0: cap(b)}}
	out := &policy.PodRequest{}
	var pools int
	for num, typ, ok := d.next(podRequestFields); ok; num, typ, ok = d.next(podRequestFields) {
		if num == fPodReqPools && typ == protowire.BytesType {
			pools++
		}
		if n := protowire.ConsumeFieldValue(num, typ, d.b); n >= 0 {
			d.b = d.b[n:]
		} else {
			d.fail("", "field %d: %v", num, protowire.ParseError(n))
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if pools > 0 {
		out.Pools = make([]policy.PoolView, 0, pools)
	}
	d.b = b
	for num, typ, ok := d.next(podRequestFields); ok; num, typ, ok = d.next(podRequestFields) {
		switch num {
		case fPodReqPod:
			s := d.sub(typ, "pod", -1)
			decodePod(&s, &out.Pod)
			d.adopt(&s)
		case fPodReqNamespace:
			s := d.sub(typ, "namespace", -1)
			decodeNamespace(&s, &out.Namespace)
			d.adopt(&s)
		case fPodReqNode:
			s := d.sub(typ, "node", -1)
			decodeNode(&s, &out.Node)
			d.adopt(&s)
		case fPodReqCNI:
			s := d.sub(typ, "cni", -1)
			decodeCNI(&s, &out.CNI)
			d.adopt(&s)
		case fPodReqPools:
			s := d.sub(typ, "pools", len(out.Pools))
			out.Pools = append(out.Pools, policy.PoolView{})
			decodePoolView(&s, &out.Pools[len(out.Pools)-1])
			d.adopt(&s)
		default:
			d.skip(num, typ)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

func decodePod(d *decoder, p *policy.Pod) {
	for num, typ, ok := d.next(podFields); ok; num, typ, ok = d.next(podFields) {
		switch num {
		case fPodNamespace:
			p.Namespace = d.str(typ, "namespace")
		case fPodName:
			p.Name = d.str(typ, "name")
		case fPodUID:
			p.UID = d.str(typ, "uid")
		case fPodLabels:
			d.pair(typ, "labels", &p.Labels)
		case fPodAnnotations:
			d.pair(typ, "annotations", &p.Annotations)
		case fPodOwnerKind:
			p.OwnerKind = d.str(typ, "owner_kind")
		case fPodOwnerName:
			p.OwnerName = d.str(typ, "owner_name")
		default:
			d.skip(num, typ)
		}
	}
}

func decodeNamespace(d *decoder, n *policy.Namespace) {
	for num, typ, ok := d.next(namespaceFields); ok; num, typ, ok = d.next(namespaceFields) {
		switch num {
		case fNsName:
			n.Name = d.str(typ, "name")
		case fNsLabels:
			d.pair(typ, "labels", &n.Labels)
		case fNsAnnotations:
			d.pair(typ, "annotations", &n.Annotations)
		default:
			d.skip(num, typ)
		}
	}
}

func decodeNode(d *decoder, n *policy.Node) {
	for num, typ, ok := d.next(nodeFields); ok; num, typ, ok = d.next(nodeFields) {
		switch num {
		case fNodeName:
			n.Name = d.str(typ, "name")
		case fNodeLabels:
			d.pair(typ, "labels", &n.Labels)
		default:
			d.skip(num, typ)
		}
	}
}

func decodeCNI(d *decoder, c *policy.CNIRequest) {
	for num, typ, ok := d.next(cniFields); ok; num, typ, ok = d.next(cniFields) {
		switch num {
		case fCNIIfName:
			c.IfName = d.str(typ, "if_name")
		case fCNINetwork:
			c.Network = d.str(typ, "network")
		case fCNIMultusName:
			c.MultusName = d.str(typ, "multus_name")
		case fCNIPools:
			c.Pools = d.strs(c.Pools, d.str(typ, "pools"))
		case fCNIDefaultIPv4:
			c.DefaultIPv4Pools = d.strs(c.DefaultIPv4Pools, d.str(typ, "default_ipv4_pools"))
		case fCNIDefaultIPv6:
			c.DefaultIPv6Pools = d.strs(c.DefaultIPv6Pools, d.str(typ, "default_ipv6_pools"))
		default:
			d.skip(num, typ)
		}
	}
}

func decodePoolView(d *decoder, p *policy.PoolView) {
	var fam uint64
	for num, typ, ok := d.next(poolViewFields); ok; num, typ, ok = d.next(poolViewFields) {
		switch num {
		case fPvName:
			p.Name = d.str(typ, "name")
		case fPvFamily:
			fam = d.varint(typ, "family")
		case fPvCIDRs:
			s := d.str(typ, "cidrs")
			if d.err != nil {
				return
			}
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				d.fail(idx("cidrs", len(p.CIDRs)), "bad CIDR %q", s)
				return
			}
			p.CIDRs = appendTo(d.st, &d.st.pfxs, p.CIDRs, pfx, 32)
		case fPvSubnet:
			p.Subnet = d.str(typ, "subnet")
		case fPvTotal:
			p.Total = d.varint(typ, "total")
		case fPvFree:
			p.Free = d.varint(typ, "free")
		case fPvDefault:
			p.Default = d.varint(typ, "default") != 0
		case fPvDisabled:
			p.Disabled = d.varint(typ, "disabled") != 0
		case fPvTerminating:
			p.Terminating = d.varint(typ, "terminating") != 0
		case fPvExcluded:
			p.Excluded = d.strs(p.Excluded, d.str(typ, "excluded"))
		case fPvReserved:
			p.Reserved = d.strs(p.Reserved, d.str(typ, "reserved"))
		case fPvAllExcluded:
			p.AllExcluded = d.varint(typ, "all_excluded") != 0
		case fPvAllReserved:
			p.AllReserved = d.varint(typ, "all_reserved") != 0
		case fPvNodeName:
			p.NodeName = d.strs(p.NodeName, d.str(typ, "node_name"))
		case fPvNodeAffinity:
			p.NodeAffinity = decodeSelectorField(d, typ, "node_affinity", p.NodeAffinity)
		case fPvNamespaceName:
			p.NamespaceName = d.strs(p.NamespaceName, d.str(typ, "namespace_name"))
		case fPvNamespaceAffinity:
			p.NamespaceAffinity = decodeSelectorField(d, typ, "namespace_affinity", p.NamespaceAffinity)
		case fPvPodAffinity:
			p.PodAffinity = decodeSelectorField(d, typ, "pod_affinity", p.PodAffinity)
		case fPvMul:
			p.MultusName = d.strs(p.MultusName, d.str(typ, "multus_name"))
		default:
			d.skip(num, typ)
		}
	}
	if d.err != nil {
		return
	}
	// The family is checked after the whole record, as FamilyFromProto checks the field's
	// final value (absent means unspecified).
	switch fam {
	case familyV4:
		p.Family = policy.IPv4
	case familyV6:
		p.Family = policy.IPv6
	case 0:
		d.fail("family", "family unspecified")
	default:
		d.fail("family", "unknown family value %d", int32(fam))
	}
}

// decodeSelectorField decodes an embedded LabelSelector (merged into sel if the field
// repeats); present but empty is an empty, match-everything selector, as with the generated
// code.
func decodeSelectorField(d *decoder, typ protowire.Type, field string, sel *policy.LabelSelector) *policy.LabelSelector {
	s := d.sub(typ, field, -1)
	var key []byte // the selector's bytes, to remember it by
	switch {
	case s.err != nil:
	case sel != nil:
		// The field repeats (protobuf merges): never merge into a selector other pools share.
		cp := policy.LabelSelector{MatchLabels: maps.Clone(sel.MatchLabels), MatchExpressions: slices.Clone(sel.MatchExpressions)}
		sel = &cp
	case d.st != nil:
		for _, p := range d.st.seen {
			if bytes.Equal(p.b, s.b) {
				return p.sel
			}
		}
		if len(d.st.seen) < maxSeenSelectors {
			key = s.b
		}
	}
	switch {
	case sel != nil:
	case d.st != nil:
		sel = &one(&d.st.sels, policy.LabelSelector{}, 16)[0]
	default:
		sel = &policy.LabelSelector{}
	}
	for num, t, ok := s.next(selectorFields); ok; num, t, ok = s.next(selectorFields) {
		switch num {
		case fSelMatchLabels:
			s.pair(t, "match_labels", &sel.MatchLabels)
		case fSelMatchExpressions:
			r := s.sub(t, "match_expressions", len(sel.MatchExpressions))
			var req policy.Requirement
			for n, rt, ok := r.next(reqFields); ok; n, rt, ok = r.next(reqFields) {
				switch n {
				case fReqKey:
					req.Key = r.str(rt, "key")
				case fReqOperator:
					req.Operator = r.str(rt, "operator")
				case fReqValues:
					req.Values = r.strs(req.Values, r.str(rt, "values"))
				default:
					r.skip(n, rt)
				}
			}
			if r.err == nil {
				switch req.Operator {
				case policy.OpIn, policy.OpNotIn, policy.OpExists, policy.OpDoesNotExist:
					if req.Key == "" {
						r.fail("key", "empty key")
					}
				default:
					r.fail("operator", "unknown operator %q (want In, NotIn, Exists or DoesNotExist)", req.Operator)
				}
			}
			s.adopt(&r)
			sel.MatchExpressions = append(sel.MatchExpressions, req)
		default:
			s.skip(num, t)
		}
	}
	d.adopt(&s)
	if key != nil && d.err == nil {
		d.st.seen = append(d.st.seen, seenSelector{b: key, sel: sel})
	}
	return sel
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// DecodePodDecision decodes and validates the protobuf encoding of a PodDecision (host
// side), as proto.Unmarshal followed by PodDecisionFromProto would.
func DecodePodDecision(b []byte) (policy.PodDecision, error) {
	// Strings are substrings of one copy of the message, and both candidate lists share one
	// array sized by a first pass: a decision costs three allocations, not one per string
	// and per growth of a list.
	d := decoder{b: b, msg: msgPodDecision, index: -1, st: &slab{src: string(b), cap0: cap(b)}}
	var out policy.PodDecision
	var n4, n6 int
	for num, typ, ok := d.next(podDecisionFields); ok; num, typ, ok = d.next(podDecisionFields) {
		n4 += b2i(num == fDecIPv4 && typ == protowire.BytesType)
		n6 += b2i(num == fDecIPv6 && typ == protowire.BytesType)
		d.skip(num, typ)
	}
	if n4+n6 > 0 {
		cs := make([]policy.Candidate, n4+n6)
		if n4 > 0 {
			out.IPv4 = cs[:0:n4]
		}
		if n6 > 0 {
			out.IPv6 = cs[n4 : n4 : n4+n6]
		}
	}
	d.b, d.err = b, nil // the second pass names a bad field properly
	var code, cause uint64
	for num, typ, ok := d.next(podDecisionFields); ok; num, typ, ok = d.next(podDecisionFields) {
		switch num {
		case fDecCode:
			code = d.varint(typ, "code")
		case fDecCause:
			cause = d.varint(typ, "cause")
		case fDecReason:
			out.Reason = d.str(typ, "reason")
		case fDecIPv4:
			out.IPv4 = decodeCandidate(&d, typ, "ipv4", out.IPv4)
		case fDecIPv6:
			out.IPv6 = decodeCandidate(&d, typ, "ipv6", out.IPv6)
		case fDecSource:
			out.Source = d.str(typ, "source")
		case fDecRejected:
			out.Rejected = decodeRejection(&d, typ, out.Rejected)
		default:
			d.skip(num, typ)
		}
	}
	if d.err == nil {
		switch code {
		case decCodeDecided:
			out.Code = policy.Decided
		case decCodeSkip:
			out.Code = policy.Skip
		case decCodeNoFit:
			out.Code = policy.NoFit
		case 0:
			d.fail("code", "decision code unspecified")
		default:
			d.fail("code", "unknown decision code value %d", int32(code))
		}
	}
	if d.err == nil {
		// Enums are int32 on the wire, as CauseFromProto reads them.
		c, err := CauseFromProto(pb.DecisionCause(int32(cause)))
		if err != nil {
			d.fail("cause", "%v", err)
		}
		out.Cause = c
	}
	if d.err != nil {
		return policy.PodDecision{}, d.err
	}
	// Candidates are checked after the whole message, in the order PodDecisionFromProto
	// reports them (code, then ipv4, then ipv6).
	for _, f := range [...]struct {
		name string
		cs   []policy.Candidate
	}{{"ipv4", out.IPv4}, {"ipv6", out.IPv6}} {
		for i, c := range f.cs {
			if c.Pool == "" {
				return policy.PodDecision{}, invalid(msgPodDecision, idx(f.name, i)+".pool", "empty pool name")
			}
		}
	}
	return out, nil
}

func decodeCandidate(d *decoder, typ protowire.Type, field string, cs []policy.Candidate) []policy.Candidate {
	s := d.sub(typ, field, len(cs))
	var c policy.Candidate
	for num, t, ok := s.next(candidateFields); ok; num, t, ok = s.next(candidateFields) {
		if num == fCandPool {
			c.Pool = s.str(t, "pool")
		} else {
			s.skip(num, t)
		}
	}
	d.adopt(&s)
	return append(cs, c)
}

// AppendPodDecision appends the protobuf encoding of d (plugin side): the bytes
// proto.Marshal(PodDecisionToProto(d)) gives, without the message tree.
func AppendPodDecision(dst []byte, d policy.PodDecision) []byte {
	e := encoder{b: dst}
	e.uint(fDecCode, uint64(CodeToProto(d.Code)))
	e.b = appendStr(e.b, fDecReason, d.Reason)
	for _, cs := range [...]struct {
		num protowire.Number
		cs  []policy.Candidate
	}{{fDecIPv4, d.IPv4}, {fDecIPv6, d.IPv6}} {
		for _, c := range cs.cs {
			at := e.open(cs.num)
			e.b = appendStr(e.b, fCandPool, c.Pool)
			e.close(at)
		}
	}
	e.b = appendStr(e.b, fDecSource, d.Source)
	// An enum is an int32 varint: a negative one is sign-extended, as proto.Marshal writes it.
	e.uint(fDecCause, uint64(int64(CauseToProto(d.Cause))))
	e.rejections(d.Rejected)
	return e.b
}

// appendStr writes a singular string field (omitted when empty, as proto3 does). Unlike
// encoder.str it does not refuse invalid UTF-8: the receiver validates, naming the field.
func appendStr(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
