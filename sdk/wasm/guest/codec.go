package guest

import (
	"fmt"
	"net/netip"

	"github.com/allot-ipam/allot/sdk/policy"
	"google.golang.org/protobuf/encoding/protowire"
)

// A hand-written protobuf codec for the messages of sdk/proto/allot/plugin/v1/policy.proto
// (and PluginInfo of meta.proto), decoding straight into the sdk/policy Go types.
//
// Why not generated code + sdk/wire: in a wasm guest every allocation costs about a
// microsecond, and generated decoders allocate every message, string, map and list before
// a second conversion into Go types allocates again. Measured (README.md,
// BenchmarkGuestCodec in core/pluginhost/wasm), a guest on generated code without
// descriptors (protoc-gen-go-lite) is as small but takes ~7x the CPU per decision of this
// codec on the same requests, ~17x with pool references. protowire is the low-level,
// reflection-free half of the protobuf library. The bytes are the schema's bytes: codec_test.go checks this codec against the
// generated messages and sdk/wire in both directions, field by field, so the .proto file
// stays the single source of truth. Unknown fields are skipped, as protobuf requires, so a
// host with a newer minor contract can add fields.

// Field numbers, from policy.proto.
const (
	podReqPod, podReqNamespace, podReqNode, podReqCNI, podReqPools = 1, 2, 3, 4, 5
	podReqPoolRefs                                                 = 1000 // WASM transport only: sdk/ABI.md, cache.go
	podReqPartRefs                                                 = 1001 // likewise
	podReqPoolSame                                                 = 1002 // likewise

	podNamespace, podName, podUID, podLabels, podAnnotations, podOwnerKind, podOwnerName = 1, 2, 3, 4, 5, 6, 7

	nsName, nsLabels, nsAnnotations = 1, 2, 3

	nodeName, nodeLabels = 1, 2

	cniIfName, cniNetwork, cniMultusName, cniPools, cniDefaultIPv4, cniDefaultIPv6 = 1, 2, 3, 4, 5, 6

	reqKey, reqOperator, reqValues = 1, 2, 3

	selMatchLabels, selMatchExpressions = 1, 2

	pvName, pvFamily, pvCIDRs, pvSubnet, pvTotal, pvFree, pvDefault, pvDisabled, pvTerminating = 1, 2, 3, 4, 5, 6, 7, 8, 9
	pvExcluded, pvReserved, pvAllExcluded, pvAllReserved, pvNodeName, pvNodeAffinity           = 10, 11, 12, 13, 14, 15
	pvNamespaceName, pvNamespaceAffinity, pvPodAffinity, pvMultusName                          = 16, 17, 18, 19

	candPool = 1

	podDecCode, podDecReason, podDecIPv4, podDecIPv6, podDecSource, podDecCause, podDecRejected = 1, 2, 3, 4, 5, 6, 7

	rejPool, rejFamily, rejCause, rejReason = 1, 2, 3, 4

	specCIDR, specPerNodeMaskSize = 1, 2

	cfgName, cfgNodeSelector, cfgIPv4, cfgIPv6, cfgFreeBlocks = 1, 2, 3, 4, 5

	nodeReqNode, nodeReqConfigs = 1, 2

	nodeDecCode, nodeDecReason, nodeDecConfigs, nodeDecCause = 1, 2, 3, 4

	infoName, infoVersion, infoKind, infoContractVersion = 1, 2, 3, 4

	mapKey, mapValue = 1, 2
)

// Enum values, from policy.proto and meta.proto.
const (
	familyIPv4, familyIPv6              = 1, 2
	codeDecided, codeSkip, codeNoFit    = 1, 2, 3
	kindPoolPolicy                      = 1
	maxSelectorOrMapEntries             = 1 << 16 // sanity bound, far above any real label set
	errWireType                         = "wrong wire type"
	errTruncated                        = "truncated"
	msgPodRequest, msgNodeRequest       = "pod request", "node request"
	fieldPools, fieldConfigs, fieldCIDR = "pools", "configs", "cidr"
)

// decodeError names the message and the field path, in the form sdk/wire uses.
type decodeError struct {
	msg, field, why string
}

func (e *decodeError) Error() string {
	if e.field == "" {
		return "guest: " + e.msg + ": " + e.why
	}
	return "guest: " + e.msg + ": " + e.field + ": " + e.why
}

// reader walks the fields of one message. The first error sticks; every method is a no-op
// after it. Errors name the field path: a reader knows its own field name (and index, for
// repeated fields), and each parent prefixes its segment when it adopts a child's error, so
// no path is built unless there is an error.
type reader struct {
	a     *arena
	b     []byte
	msg   string // for errors: "pod request"
	name  string // field name of this message within its parent, "" at the root
	index int    // element index when name is a repeated field, else -1
	err   error
}

func (r *reader) fail(field, format string, args ...any) {
	if r.err == nil {
		r.err = &decodeError{msg: r.msg, field: field, why: fmt.Sprintf(format, args...)}
	}
}

// next reads the next tag; ok is false at the end of the message or after an error.
//
// next, bytes and varint decode one-byte tags, lengths and values inline: they are nearly
// every one in a request, and a Go function call costs tens of nanoseconds in a wasm guest,
// so going through protowire for each (two or three calls) was most of a decode's time.
func (r *reader) next() (num protowire.Number, typ protowire.Type, ok bool) {
	if r.err != nil || len(r.b) == 0 {
		return 0, 0, false
	}
	if c := r.b[0]; c < 0x80 && c >= 1<<3 { // one byte, field number > 0
		r.b = r.b[1:]
		return protowire.Number(c >> 3), protowire.Type(c & 7), true
	}
	if len(r.b) > 1 && r.b[1] < 0x80 && r.b[1] != 0 { // two bytes: the transport's fields 1000-1002
		v := uint64(r.b[0]&0x7f) | uint64(r.b[1])<<7
		r.b = r.b[2:]
		return protowire.Number(v >> 3), protowire.Type(v & 7), true
	}
	num, typ, n := protowire.ConsumeTag(r.b)
	if n < 0 {
		r.fail("", "bad tag: %v", protowire.ParseError(n))
		return 0, 0, false
	}
	r.b = r.b[n:]
	return num, typ, true
}

func (r *reader) skip(num protowire.Number, typ protowire.Type) {
	n := protowire.ConsumeFieldValue(num, typ, r.b)
	if n < 0 {
		r.fail("", "field %d: %v", num, protowire.ParseError(n))
		return
	}
	r.b = r.b[n:]
}

func (r *reader) bytes(typ protowire.Type, field string) []byte {
	if typ != protowire.BytesType {
		r.fail(field, errWireType)
		return nil
	}
	if len(r.b) > 0 && r.b[0] < 0x80 && int(r.b[0]) < len(r.b) { // one-byte length (see next)
		n := int(r.b[0]) + 1
		v := r.b[1:n:n]
		r.b = r.b[n:]
		return v
	}
	v, n := protowire.ConsumeBytes(r.b)
	if n < 0 {
		r.fail(field, errTruncated)
		return nil
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) str(typ protowire.Type, field string) string { return r.a.str(r.bytes(typ, field)) }

func (r *reader) varint(typ protowire.Type, field string) uint64 {
	if typ != protowire.VarintType {
		r.fail(field, errWireType)
		return 0
	}
	if len(r.b) > 0 && r.b[0] < 0x80 { // one byte (see next)
		v := uint64(r.b[0])
		r.b = r.b[1:]
		return v
	}
	v, n := protowire.ConsumeVarint(r.b)
	if n < 0 {
		r.fail(field, errTruncated)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// sub returns a reader for the embedded message in field name.
func (r *reader) sub(typ protowire.Type, name string) reader { return r.subAt(typ, name, -1) }

// subAt returns a reader for element index of the repeated message field name.
func (r *reader) subAt(typ protowire.Type, name string, index int) reader {
	b := r.bytes(typ, name)
	return reader{a: r.a, b: b, msg: r.msg, name: name, index: index}
}

// adopt propagates a child's error, prefixing the child's field segment to its path.
func (r *reader) adopt(s *reader) {
	if r.err != nil || s.err == nil {
		return
	}
	if e, ok := s.err.(*decodeError); ok && s.name != "" {
		seg := s.name
		if s.index >= 0 {
			seg = idx(s.name, s.index)
		}
		if e.field == "" {
			e.field = seg
		} else {
			e.field = seg + "." + e.field
		}
	}
	r.err = s.err
}

// mapEntry decodes one map<string,string> entry into m (allocating it on first use).
func (r *reader) mapEntry(typ protowire.Type, field string, m *map[string]string, hint int) {
	e := r.sub(typ, field)
	var k, v string
	for num, t, ok := e.next(); ok; num, t, ok = e.next() {
		switch num {
		case mapKey:
			k = e.str(t, "key")
		case mapValue:
			v = e.str(t, "value")
		default:
			e.skip(num, t)
		}
	}
	r.adopt(&e)
	if r.err != nil {
		return
	}
	if *m == nil {
		*m = make(map[string]string, hint)
	} else if len(*m) >= maxSelectorOrMapEntries {
		r.fail(field, "more than %d entries", maxSelectorOrMapEntries)
		return
	}
	(*m)[k] = v
}

func idx(field string, i int) string { return fmt.Sprintf("%s[%d]", field, i) }

// decodePodRequest decodes a PodRequest with the validation sdk/wire.PodRequestFromProto
// applies, reusing what podCache decoded earlier where the bytes are the same (cache.go).
func decodePodRequest(b []byte) (*policy.PodRequest, error) { return decodePodRequestWith(b, true) }

// decodePodRequestWith decodes with the node, namespace and CNI caches or without them. A
// request that carries one of these fields twice (protobuf merges the two; the host never
// writes that) is decoded again without them: the merge must neither start from nor write
// into a cached value, and its result is not the value of either field's bytes alone.
func decodePodRequestWith(b []byte, cached bool) (*policy.PodRequest, error) {
	r := reader{a: &reqArena, b: reqArena.copyRequest(b), msg: msgPodRequest, index: -1}
	out := podCache.newRequest()
	var nodeBytes, nsBytes, cniBytes []byte
	var podRest bool // a pod field carried more than the name and uid
	var refs, sent uint64
	for num, typ, ok := r.next(); ok; num, typ, ok = r.next() {
		switch num {
		case podReqPod:
			s := r.sub(typ, "pod")
			podRest = decodePod(&s, &out.Pod) || podRest
			sent |= partPodRest
			r.adopt(&s)
		case podReqNamespace:
			s := r.sub(typ, "namespace")
			if cached && nsBytes != nil {
				return decodePodRequestWith(b, false)
			}
			sent |= partNamespace
			if nsBytes = s.b; cached && podCache.ns != nil && equalBytes(s.b, podCache.ns) {
				out.Namespace = podCache.nsVal
				continue
			}
			decodeNamespace(&s, &out.Namespace)
			r.adopt(&s)
		case podReqNode:
			s := r.sub(typ, "node")
			if cached && nodeBytes != nil {
				return decodePodRequestWith(b, false)
			}
			sent |= partNode
			if nodeBytes = s.b; cached && podCache.node != nil && equalBytes(s.b, podCache.node) {
				out.Node = podCache.nodeVal
				continue
			}
			decodeNode(&s, &out.Node)
			r.adopt(&s)
		case podReqCNI:
			s := r.sub(typ, "cni")
			if cached && cniBytes != nil {
				return decodePodRequestWith(b, false)
			}
			sent |= partCNI
			if cniBytes = s.b; cached && podCache.cni != nil && equalBytes(s.b, podCache.cni) {
				out.CNI = podCache.cniVal
				continue
			}
			decodeCNI(&s, &out.CNI)
			r.adopt(&s)
		case podReqPools:
			s := r.subAt(typ, fieldPools, len(out.Pools))
			out.Pools = append(out.Pools, policy.PoolView{})
			podCache.poolView(&s, &out.Pools[len(out.Pools)-1])
			r.adopt(&s)
		case podReqPoolRefs:
			podCache.poolRefs(&r, r.bytes(typ, fieldPools), &out.Pools)
		case podReqPoolSame:
			podCache.sameRun(&r, r.varint(typ, fieldPools), &out.Pools)
		case podReqPartRefs:
			refs |= r.varint(typ, "part references")
		default:
			r.skip(num, typ)
		}
	}
	if refs != 0 {
		podCache.partRefs(&r, out, refs, sent, podRest)
	}
	if r.err != nil {
		return nil, r.err
	}
	podCache.finish(out)
	if len(out.Pools) == 0 {
		out.Pools = nil // as a decoder that allocates per request would leave it
	}
	// Remember what was decoded; the byte slices are views of the request's copy, never written again.
	podCache.pools, podCache.views = podCache.pools[:len(out.Pools)], podCache.views[:len(out.Pools)]
	if !cached {
		return out, nil
	}
	podCache.remember(out, nodeBytes, nsBytes, cniBytes, sent&^refs&partPodRest != 0)
	return out, nil
}

// decodePod decodes a Pod into p and reports whether it carried fields other than the
// name and uid (the part a part reference stands for).
func decodePod(r *reader, p *policy.Pod) (rest bool) {
	for num, typ, ok := r.next(); ok; num, typ, ok = r.next() {
		rest = rest || (num != podName && num != podUID)
		switch num {
		case podNamespace:
			p.Namespace = r.str(typ, "namespace")
		case podName:
			p.Name = r.str(typ, "name")
		case podUID:
			p.UID = r.str(typ, "uid")
		case podLabels:
			r.cachedMap(num, typ, "labels", &p.Labels, &podCache.podLabels)
		case podAnnotations:
			r.cachedMap(num, typ, "annotations", &p.Annotations, &podCache.podAnnotations)
		case podOwnerKind:
			p.OwnerKind = r.str(typ, "owner_kind")
		case podOwnerName:
			p.OwnerName = r.str(typ, "owner_name")
		default:
			r.skip(num, typ)
		}
	}
	return rest
}

func decodeNamespace(r *reader, n *policy.Namespace) {
	c := countFields(r.b)
	for num, typ, ok := r.next(); ok; num, typ, ok = r.next() {
		switch num {
		case nsName:
			n.Name = r.str(typ, "name")
		case nsLabels:
			r.mapEntry(typ, "labels", &n.Labels, c[nsLabels])
		case nsAnnotations:
			r.mapEntry(typ, "annotations", &n.Annotations, c[nsAnnotations])
		default:
			r.skip(num, typ)
		}
	}
}

func decodeNode(r *reader, n *policy.Node) {
	c := countFields(r.b)
	for num, typ, ok := r.next(); ok; num, typ, ok = r.next() {
		switch num {
		case nodeName:
			n.Name = r.str(typ, "name")
		case nodeLabels:
			r.mapEntry(typ, "labels", &n.Labels, c[nodeLabels])
		default:
			r.skip(num, typ)
		}
	}
}

func decodeCNI(r *reader, c *policy.CNIRequest) {
	// A CNI field that comes twice merges as protobuf merges a message: lists append.
	n := countFields(r.b)
	c.Pools = append(r.a.strings(len(c.Pools)+n[cniPools]), c.Pools...)
	c.DefaultIPv4Pools = append(r.a.strings(len(c.DefaultIPv4Pools)+n[cniDefaultIPv4]), c.DefaultIPv4Pools...)
	c.DefaultIPv6Pools = append(r.a.strings(len(c.DefaultIPv6Pools)+n[cniDefaultIPv6]), c.DefaultIPv6Pools...)
	for num, typ, ok := r.next(); ok; num, typ, ok = r.next() {
		switch num {
		case cniIfName:
			c.IfName = r.str(typ, "if_name")
		case cniNetwork:
			c.Network = r.str(typ, "network")
		case cniMultusName:
			c.MultusName = r.str(typ, "multus_name")
		case cniPools:
			c.Pools = append(c.Pools, r.str(typ, "pools"))
		case cniDefaultIPv4:
			c.DefaultIPv4Pools = append(c.DefaultIPv4Pools, r.str(typ, "default_ipv4_pools"))
		case cniDefaultIPv6:
			c.DefaultIPv6Pools = append(c.DefaultIPv6Pools, r.str(typ, "default_ipv6_pools"))
		default:
			r.skip(num, typ)
		}
	}
}

func decodePoolView(r *reader, p *policy.PoolView) {
	c := countFields(r.b)
	p.CIDRs = r.a.prefixes(c[pvCIDRs])
	p.Excluded = r.a.strings(c[pvExcluded])
	p.Reserved = r.a.strings(c[pvReserved])
	p.NodeName = r.a.strings(c[pvNodeName])
	p.NamespaceName = r.a.strings(c[pvNamespaceName])
	p.MultusName = r.a.strings(c[pvMultusName])
	famSeen := false
	for num, typ, ok := r.next(); ok; num, typ, ok = r.next() {
		switch num {
		case pvName:
			p.Name = r.str(typ, "name")
		case pvFamily:
			famSeen = true
			switch v := r.varint(typ, "family"); v {
			case familyIPv4:
				p.Family = policy.IPv4
			case familyIPv6:
				p.Family = policy.IPv6
			case 0:
				r.fail("family", "family unspecified")
			default:
				r.fail("family", "unknown family value %d", int32(v))
			}
		case pvCIDRs:
			b := r.bytes(typ, "cidrs")
			if r.err != nil {
				return
			}
			pfx, err := netip.ParsePrefix(r.a.str(b))
			if err != nil {
				r.fail(idx("cidrs", len(p.CIDRs)), "bad CIDR %q", b)
				return
			}
			p.CIDRs = append(p.CIDRs, pfx)
		case pvSubnet:
			p.Subnet = r.str(typ, "subnet")
		case pvTotal:
			p.Total = r.varint(typ, "total")
		case pvFree:
			p.Free = r.varint(typ, "free")
		case pvDefault:
			p.Default = r.varint(typ, "default") != 0
		case pvDisabled:
			p.Disabled = r.varint(typ, "disabled") != 0
		case pvTerminating:
			p.Terminating = r.varint(typ, "terminating") != 0
		case pvExcluded:
			p.Excluded = append(p.Excluded, r.str(typ, "excluded"))
		case pvReserved:
			p.Reserved = append(p.Reserved, r.str(typ, "reserved"))
		case pvAllExcluded:
			p.AllExcluded = r.varint(typ, "all_excluded") != 0
		case pvAllReserved:
			p.AllReserved = r.varint(typ, "all_reserved") != 0
		case pvNodeName:
			p.NodeName = append(p.NodeName, r.str(typ, "node_name"))
		case pvNodeAffinity:
			p.NodeAffinity = decodeSelectorField(r, typ, "node_affinity")
		case pvNamespaceName:
			p.NamespaceName = append(p.NamespaceName, r.str(typ, "namespace_name"))
		case pvNamespaceAffinity:
			p.NamespaceAffinity = decodeSelectorField(r, typ, "namespace_affinity")
		case pvPodAffinity:
			p.PodAffinity = decodeSelectorField(r, typ, "pod_affinity")
		case pvMultusName:
			p.MultusName = append(p.MultusName, r.str(typ, "multus_name"))
		default:
			r.skip(num, typ)
		}
	}
	if !famSeen && r.err == nil {
		r.fail("family", "family unspecified")
	}
}

// decodeSelectorField decodes an embedded LabelSelector; present but empty is an empty
// (match-everything) selector, as with the generated code.
func decodeSelectorField(r *reader, typ protowire.Type, field string) *policy.LabelSelector {
	s := r.sub(typ, field)
	sel := r.a.selector()
	decodeSelector(&s, sel)
	r.adopt(&s)
	return sel
}

func decodeSelector(r *reader, sel *policy.LabelSelector) {
	c := countFields(r.b)
	for num, typ, ok := r.next(); ok; num, typ, ok = r.next() {
		switch num {
		case selMatchLabels:
			r.mapEntry(typ, "match_labels", &sel.MatchLabels, c[selMatchLabels])
		case selMatchExpressions:
			s := r.subAt(typ, "match_expressions", len(sel.MatchExpressions))
			var req policy.Requirement
			for n, t, ok := s.next(); ok; n, t, ok = s.next() {
				switch n {
				case reqKey:
					req.Key = s.str(t, "key")
				case reqOperator:
					req.Operator = s.str(t, "operator")
				case reqValues:
					req.Values = append(req.Values, s.str(t, "values"))
				default:
					s.skip(n, t)
				}
			}
			if s.err == nil {
				switch req.Operator {
				case policy.OpIn, policy.OpNotIn, policy.OpExists, policy.OpDoesNotExist:
				default:
					s.fail("operator", "unknown operator %q (want In, NotIn, Exists or DoesNotExist)", req.Operator)
				}
			}
			if s.err == nil && req.Key == "" {
				s.fail("key", "empty key")
			}
			r.adopt(&s)
			sel.MatchExpressions = append(sel.MatchExpressions, req)
		default:
			r.skip(num, typ)
		}
	}
}

// decodeNodeRequest decodes a NodeRequest with the validation of
// sdk/wire.NodeRequestFromProto.
func decodeNodeRequest(b []byte) (*policy.NodeRequest, error) {
	r := reader{a: &reqArena, b: reqArena.copyRequest(b), msg: msgNodeRequest, index: -1}
	out := &policy.NodeRequest{}
	for num, typ, ok := r.next(); ok; num, typ, ok = r.next() {
		switch num {
		case nodeReqNode:
			s := r.sub(typ, "node")
			decodeNode(&s, &out.Node)
			r.adopt(&s)
		case nodeReqConfigs:
			out.Configs = append(out.Configs, policy.CIDRConfigView{})
			s := r.subAt(typ, fieldConfigs, len(out.Configs)-1)
			decodeCIDRConfig(&s, &out.Configs[len(out.Configs)-1])
			r.adopt(&s)
		default:
			r.skip(num, typ)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

func decodeCIDRConfig(r *reader, c *policy.CIDRConfigView) {
	for num, typ, ok := r.next(); ok; num, typ, ok = r.next() {
		switch num {
		case cfgName:
			c.Name = r.str(typ, "name")
		case cfgNodeSelector:
			s := r.sub(typ, "node_selector")
			decodeSelector(&s, &c.NodeSelector)
			r.adopt(&s)
		case cfgIPv4:
			c.IPv4 = decodeCIDRSpec(r, typ, "ipv4", false)
		case cfgIPv6:
			c.IPv6 = decodeCIDRSpec(r, typ, "ipv6", true)
		case cfgFreeBlocks:
			c.FreeBlocks = r.varint(typ, "free_blocks")
		default:
			r.skip(num, typ)
		}
	}
}

func decodeCIDRSpec(r *reader, typ protowire.Type, field string, v6 bool) *policy.CIDRSpec {
	s := r.sub(typ, field)
	var cidr string
	var mask int32
	for n, t, ok := s.next(); ok; n, t, ok = s.next() {
		switch n {
		case specCIDR:
			cidr = s.str(t, fieldCIDR)
		case specPerNodeMaskSize:
			mask = int32(s.varint(t, "per_node_mask_size")) // int32 on the wire: sign-extended varint
		default:
			s.skip(n, t)
		}
	}
	var spec *policy.CIDRSpec
	if s.err == nil {
		p, err := netip.ParsePrefix(cidr)
		switch {
		case err != nil:
			s.fail(fieldCIDR, "bad CIDR %q", cidr)
		case p.Addr().Is6() != v6 || p.Addr().Is4In6():
			s.fail(fieldCIDR, "CIDR %q is of the wrong family", cidr)
		case mask < int32(p.Bits()) || int(mask) > p.Addr().BitLen():
			s.fail("per_node_mask_size", "%d outside /%d../%d", mask, p.Bits(), p.Addr().BitLen())
		default:
			spec = &policy.CIDRSpec{CIDR: p, PerNodeMaskSize: int(mask)}
		}
	}
	r.adopt(&s)
	return spec
}

// Encoding. Only decisions and PluginInfo go out of a guest; each is small, so nested
// messages are sized up front and written in one pass.

func codeValue(c policy.Code) uint64 {
	switch c {
	case policy.Decided:
		return codeDecided
	case policy.Skip:
		return codeSkip
	case policy.NoFit:
		return codeNoFit
	}
	return 0 // DECISION_CODE_UNSPECIFIED: the host rejects it, naming the field
}

// appendCause appends a DecisionCause field. Its values are policy.Cause's; an enum is an
// int32 varint, so a negative one (which the host rejects) is sign-extended as proto writes it.
func appendCause(b []byte, num protowire.Number, c policy.Cause) []byte {
	if c == policy.CauseUnspecified {
		return b
	}
	return appendVarintField(b, num, uint64(int64(c)))
}

// appendVarintField and appendLen write one-byte tags, values and lengths directly, as the
// decoder reads them (see reader.next): in a Go wasm guest each protowire call costs tens
// of nanoseconds, which were most of encoding a small decision.
func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if num < 16 && v < 0x80 {
		return append(b, byte(num)<<3|byte(protowire.VarintType), byte(v))
	}
	return appendTagged(b, num, protowire.VarintType, v)
}

// appendLen appends the tag of length-delimited field num and the length n.
func appendLen(b []byte, num protowire.Number, n int) []byte {
	if num < 16 && n < 0x80 {
		return append(b, byte(num)<<3|byte(protowire.BytesType), byte(n))
	}
	return appendTagged(b, num, protowire.BytesType, uint64(n))
}

// appendTagged is the general case of appendVarintField and appendLen.
func appendTagged(b []byte, num protowire.Number, typ protowire.Type, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, typ), v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b // proto3: default values are not written
	}
	return append(appendLen(b, num, len(s)), s...)
}

func appendCandidates(b []byte, num protowire.Number, cs []policy.Candidate) []byte {
	for _, c := range cs {
		if c.Pool == "" {
			b = appendLen(b, num, 0) // an empty Candidate; the host rejects it, naming the field
			continue
		}
		b = appendLen(b, num, protowire.SizeTag(candPool)+protowire.SizeBytes(len(c.Pool)))
		b = appendString(b, candPool, c.Pool)
	}
	return b
}

// appendPodDecision appends the PodDecision encoding of d.
func appendPodDecision(b []byte, d policy.PodDecision) []byte {
	if v := codeValue(d.Code); v != 0 {
		b = appendVarintField(b, podDecCode, v)
	}
	b = appendString(b, podDecReason, d.Reason)
	b = appendCandidates(b, podDecIPv4, d.IPv4)
	b = appendCandidates(b, podDecIPv6, d.IPv6)
	b = appendString(b, podDecSource, d.Source)
	b = appendCause(b, podDecCause, d.Cause)
	return appendRejections(b, d.Rejected)
}

// appendRejections appends PodDecision.rejected (contract 1.2). A family other than IPv4
// and IPv6 is written as FAMILY_UNSPECIFIED (both), as sdk/wire writes it; an empty pool
// name is written as it is, and the host rejects it naming the field.
func appendRejections(b []byte, rs []policy.Rejection) []byte {
	for _, r := range rs {
		var fam uint64
		switch r.Family {
		case policy.IPv4:
			fam = familyIPv4
		case policy.IPv6:
			fam = familyIPv6
		}
		size := sizeString(rejPool, r.Pool) + sizeString(rejReason, r.Reason)
		if fam != 0 {
			size += protowire.SizeTag(rejFamily) + protowire.SizeVarint(fam)
		}
		if r.Cause != policy.CauseUnspecified {
			size += protowire.SizeTag(rejCause) + protowire.SizeVarint(uint64(int64(r.Cause)))
		}
		b = protowire.AppendTag(b, podDecRejected, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		b = appendString(b, rejPool, r.Pool)
		if fam != 0 {
			b = protowire.AppendTag(b, rejFamily, protowire.VarintType)
			b = protowire.AppendVarint(b, fam)
		}
		b = appendCause(b, rejCause, r.Cause)
		b = appendString(b, rejReason, r.Reason)
	}
	return b
}

// sizeString is the encoded size of appendString(nil, num, s).
func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

// appendNodeDecision appends the NodeDecision encoding of d.
func appendNodeDecision(b []byte, d policy.NodeDecision) []byte {
	if v := codeValue(d.Code); v != 0 {
		b = protowire.AppendTag(b, nodeDecCode, protowire.VarintType)
		b = protowire.AppendVarint(b, v)
	}
	b = appendString(b, nodeDecReason, d.Reason)
	for _, c := range d.Configs {
		b = protowire.AppendTag(b, nodeDecConfigs, protowire.BytesType) // repeated: empty strings are written too
		b = protowire.AppendString(b, c)
	}
	return appendCause(b, nodeDecCause, d.Cause)
}

// appendPluginInfo appends the PluginInfo encoding for a pool policy.
func appendPluginInfo(b []byte, name, version, contract string) []byte {
	b = appendString(b, infoName, name)
	b = appendString(b, infoVersion, version)
	b = protowire.AppendTag(b, infoKind, protowire.VarintType)
	b = protowire.AppendVarint(b, kindPoolPolicy)
	return appendString(b, infoContractVersion, contract)
}
