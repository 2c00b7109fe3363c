package frame

import (
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/allot-ipam/allot/core/api"
)

// appendAllocationWire appends a's apiv1.Allocation encoding exactly as the generated
// MarshalVT of allocationPB(a) writes it (fields in number order, empty strings left out,
// owner, every IP and route written even when empty, the pod only when set), without
// building the message: an answer to every ADD and CHECK, whose six small objects per
// answer were a good part of the server's garbage. FuzzAppendAllocation holds the two to
// the same bytes.
func appendAllocationWire(b []byte, a *api.Allocation) []byte {
	b = appendSub(b, 1, ownerSize(a.Owner))
	b = appendStr(appendStr(b, 1, a.Owner.ContainerID), 2, a.Owner.IfName)
	b = appendStr(b, 2, a.Network)
	if a.Pod != (api.PodRef{}) {
		b = appendSub(b, 3, strSize(1, a.Pod.Namespace)+strSize(2, a.Pod.Name)+strSize(3, a.Pod.UID))
		b = appendStr(appendStr(appendStr(b, 1, a.Pod.Namespace), 2, a.Pod.Name), 3, a.Pod.UID)
	}
	for _, ip := range a.IPs {
		b = appendSub(b, 4, strSize(1, ip.Address)+strSize(2, ip.Gateway)+strSize(3, ip.Pool))
		b = appendStr(appendStr(appendStr(b, 1, ip.Address), 2, ip.Gateway), 3, ip.Pool)
	}
	for _, r := range a.Routes {
		b = appendSub(b, 5, strSize(1, r.Dst)+strSize(2, r.GW))
		b = appendStr(appendStr(b, 1, r.Dst), 2, r.GW)
	}
	if !a.Created.IsZero() {
		if n := a.Created.UnixNano(); n != 0 {
			b = protowire.AppendTag(b, 6, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(n))
		}
	}
	return b
}

func ownerSize(o api.Owner) int { return strSize(1, o.ContainerID) + strSize(2, o.IfName) }

// strSize is the size of a string field; proto3 leaves an empty one out.
func strSize(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func appendStr(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendSub appends the tag and length of a submessage of size bytes, which follow.
func appendSub(b []byte, num protowire.Number, size int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(size))
}

// decodeAllocationWire decodes an Allocation answer as DecodeAllocation does, for the
// encodings allotd writes (appendAllocationWire: each singular field at most once, no
// unknown fields, valid UTF-8), without building the generated message: every string is
// a substring of one copy of b, so an answer costs three allocations instead of about
// twelve. It reports false for anything else (a merged or repeated singular field, an
// unknown field, bad UTF-8, malformed bytes), and DecodeAllocation then decodes with the
// generated code, which merges, skips and names the field at fault as protobuf says.
// FuzzDecodeAllocationWire holds the two to the same result.
func decodeAllocationWire(b []byte, a *api.Allocation) bool {
	s := string(b)
	var out api.Allocation
	ips, routes, ok := scanAllocation(s, &out)
	if !ok {
		return false
	}
	out.IPs = make([]api.IPConfig, 0, ips)
	if routes > 0 {
		out.Routes = make([]api.Route, 0, routes)
	}
	if !allocationLists(s, &out) {
		return false
	}
	*a = out
	return true
}

// scanAllocation checks the fields of an Allocation encoding, sets its singular ones in
// out and counts its addresses and routes.
func scanAllocation(s string, out *api.Allocation) (ips, routes int, ok bool) {
	var seen [7]bool
	for r := s; len(r) > 0; {
		num, typ, n := protowire.ConsumeTag([]byte(r[:min(len(r), 5)]))
		if n < 0 || num < 1 || num > 6 || (num != 4 && num != 5 && seen[num]) {
			return 0, 0, false
		}
		seen[num] = true
		r = r[n:]
		if num == 6 {
			if typ != protowire.VarintType {
				return 0, 0, false
			}
			v, n := protowire.ConsumeVarint([]byte(r[:min(len(r), 10)]))
			if n < 0 {
				return 0, 0, false
			}
			if v != 0 {
				out.Created = time.Unix(0, int64(v))
			}
			r = r[n:]
			continue
		}
		v, rest, ok := wireBytes(r, typ)
		if !ok {
			return 0, 0, false
		}
		r = rest
		switch num {
		case 1:
			ok = wireStrings(v, &out.Owner.ContainerID, &out.Owner.IfName)
		case 2:
			out.Network = v
			ok = utf8.ValidString(v)
		case 3:
			ok = wireStrings(v, &out.Pod.Namespace, &out.Pod.Name, &out.Pod.UID)
		case 4:
			ips++
		case 5:
			routes++
		}
		if !ok {
			return 0, 0, false
		}
	}
	return ips, routes, true
}

// allocationLists appends the addresses and routes of an Allocation encoding that
// scanAllocation accepted to out's.
func allocationLists(s string, out *api.Allocation) bool {
	for r := s; len(r) > 0; {
		num, typ, n := protowire.ConsumeTag([]byte(r[:min(len(r), 5)]))
		r = r[n:]
		if num == 6 {
			_, n := protowire.ConsumeVarint([]byte(r[:min(len(r), 10)]))
			r = r[n:]
			continue
		}
		v, rest, _ := wireBytes(r, typ)
		r = rest
		switch num {
		case 4:
			var ip api.IPConfig
			if !wireStrings(v, &ip.Address, &ip.Gateway, &ip.Pool) {
				return false
			}
			out.IPs = append(out.IPs, ip)
		case 5:
			var rt api.Route
			if !wireStrings(v, &rt.Dst, &rt.GW) {
				return false
			}
			out.Routes = append(out.Routes, rt)
		}
	}
	return true
}

// wireBytes splits a length-delimited field's value off r.
func wireBytes(r string, typ protowire.Type) (v, rest string, ok bool) {
	if typ != protowire.BytesType {
		return "", "", false
	}
	l, n := protowire.ConsumeVarint([]byte(r[:min(len(r), 10)]))
	if n < 0 || l > uint64(len(r)-n) {
		return "", "", false
	}
	return r[n : n+int(l)], r[n+int(l):], true
}

// wireStrings decodes a submessage of string fields numbered 1..len(dst), each at most
// once, into dst.
func wireStrings(m string, dst ...*string) bool {
	var seen uint8
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag([]byte(m[:min(len(m), 5)]))
		if n < 0 || num < 1 || int(num) > len(dst) || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		v, rest, ok := wireBytes(m[n:], typ)
		if !ok || !utf8.ValidString(v) {
			return false
		}
		*dst[num-1] = v
		m = rest
	}
	return true
}

// appendAllocateRequestWire appends r's apiv1.AllocateRequest encoding exactly as the
// generated MarshalVT writes it (owner always, empty strings left out, the pod only when
// set, every element of a list written), without building the message: the request of
// every ADD. FuzzAllocateRequestWire holds the two to the same bytes.
func appendAllocateRequestWire(b []byte, r *api.AllocateRequest) []byte {
	b = appendSub(b, 1, ownerSize(r.Owner))
	b = appendStr(appendStr(b, 1, r.Owner.ContainerID), 2, r.Owner.IfName)
	b = appendStr(b, 2, r.Network)
	if r.Pod != (api.PodRef{}) {
		b = appendSub(b, 3, strSize(1, r.Pod.Namespace)+strSize(2, r.Pod.Name)+strSize(3, r.Pod.UID))
		b = appendStr(appendStr(appendStr(b, 1, r.Pod.Namespace), 2, r.Pod.Name), 3, r.Pod.UID)
	}
	for i, list := range [...][]string{r.Pools, r.IPs, r.DefaultIPv4Pools, r.DefaultIPv6Pools} {
		for _, s := range list {
			b = protowire.AppendTag(b, protowire.Number(4+i), protowire.BytesType)
			b = protowire.AppendString(b, s)
		}
	}
	return b
}

// decodeAllocateRequestWire decodes an ADD as DecodeAllocateRequest does, for encodings
// with each singular field at most once, no unknown fields and valid UTF-8 (what allot-cni
// and the Go client write), every string a substring of one copy of b; it reports false
// for anything else, which the generated code then decodes (decodeAllocationWire says why).
func decodeAllocateRequestWire(b []byte, r *api.AllocateRequest) bool {
	var out api.AllocateRequest
	var seen [4]bool
	lists := [...]*[]string{&out.Pools, &out.IPs, &out.DefaultIPv4Pools, &out.DefaultIPv6Pools}
	for s := string(b); len(s) > 0; {
		num, typ, n := protowire.ConsumeTag([]byte(s[:min(len(s), 5)]))
		if n < 0 || num < 1 || num > 7 || (num < 4 && seen[num]) {
			return false
		}
		v, rest, ok := wireBytes(s[n:], typ)
		if !ok {
			return false
		}
		s = rest
		switch num {
		case 1:
			seen[1], ok = true, wireStrings(v, &out.Owner.ContainerID, &out.Owner.IfName)
		case 2:
			seen[2], ok, out.Network = true, utf8.ValidString(v), v
		case 3:
			seen[3], ok = true, wireStrings(v, &out.Pod.Namespace, &out.Pod.Name, &out.Pod.UID)
		default:
			ok = utf8.ValidString(v)
			*lists[num-4] = append(*lists[num-4], v)
		}
		if !ok {
			return false
		}
	}
	*r = out
	return true
}
