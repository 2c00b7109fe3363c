package wire

import (
	"fmt"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"google.golang.org/protobuf/encoding/protowire"
)

// PodDecision.Rejected (contract 1.2): per-pool reasons, optional. A plugin of 1.0 or 1.1
// sends none, which the host reads as "no per-pool detail".

const (
	fDecRejected                                = 7
	fRejPool, fRejFamily, fRejCause, fRejReason = 1, 2, 3, 4
)

var rejectionFields = fields{known: bits(1, 2, 3, 4), varints: bits(2, 3)}

func rejectionsToProto(rs []policy.Rejection) []*pb.Rejection {
	if len(rs) == 0 {
		return nil
	}
	out := make([]*pb.Rejection, len(rs))
	for i, r := range rs {
		out[i] = &pb.Rejection{Pool: r.Pool, Family: rejFamilyToProto(r.Family), Cause: CauseToProto(r.Cause), Reason: r.Reason}
	}
	return out
}

// rejFamilyToProto: an empty family (both) is FAMILY_UNSPECIFIED, valid here.
func rejFamilyToProto(f policy.Family) pb.Family {
	if f == "" {
		return pb.Family_FAMILY_UNSPECIFIED
	}
	return FamilyToProto(f)
}

func rejectionsFromProto(ms []*pb.Rejection) ([]policy.Rejection, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	out := make([]policy.Rejection, len(ms))
	for i, m := range ms {
		if m == nil {
			return nil, invalid(msgPodDecision, idx("rejected", i), "missing message")
		}
		r, field, err := rejectionOf(m.Pool, int32(m.Family), int32(m.Cause), m.Reason)
		if err != nil {
			return nil, invalid(msgPodDecision, idx("rejected", i)+"."+field, "%v", err)
		}
		out[i] = r
	}
	return out, nil
}

// rejectionOf checks one rejection; on error it names the field at fault.
func rejectionOf(pool string, fam, cause int32, reason string) (policy.Rejection, string, error) {
	r := policy.Rejection{Pool: pool, Reason: reason}
	if pool == "" {
		return r, "pool", fmt.Errorf("empty pool name")
	}
	if fam != int32(pb.Family_FAMILY_UNSPECIFIED) {
		f, err := FamilyFromProto(pb.Family(fam))
		if err != nil {
			return r, "family", err
		}
		r.Family = f
	}
	c, err := CauseFromProto(pb.DecisionCause(cause))
	if err != nil {
		return r, "cause", err
	}
	r.Cause = c
	return r, "", nil
}

// appendRejections writes d's rejections (after the fields before them, as proto.Marshal
// orders fields by number).
func (e *encoder) rejections(rs []policy.Rejection) {
	for _, r := range rs {
		at := e.open(fDecRejected)
		e.b = appendStr(e.b, fRejPool, r.Pool)
		e.uint(fRejFamily, uint64(int64(rejFamilyToProto(r.Family))))
		e.uint(fRejCause, uint64(int64(CauseToProto(r.Cause))))
		e.b = appendStr(e.b, fRejReason, r.Reason)
		e.close(at)
	}
}

// decodeRejection decodes element i of PodDecision.rejected.
func decodeRejection(d *decoder, typ protowire.Type, rs []policy.Rejection) []policy.Rejection {
	s := d.sub(typ, "rejected", len(rs))
	var pool, reason string
	var fam, cause uint64
	for num, t, ok := s.next(rejectionFields); ok; num, t, ok = s.next(rejectionFields) {
		switch num {
		case fRejPool:
			pool = s.str(t, "pool")
		case fRejFamily:
			fam = s.varint(t, "family")
		case fRejCause:
			cause = s.varint(t, "cause")
		case fRejReason:
			reason = s.str(t, "reason")
		default:
			s.skip(num, t)
		}
	}
	if s.err == nil {
		r, field, err := rejectionOf(pool, int32(fam), int32(cause), reason)
		if err != nil {
			s.fail(field, "%v", err)
		}
		rs = append(rs, r)
	}
	d.adopt(&s)
	return rs
}
