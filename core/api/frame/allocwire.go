package frame

import (
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
