package wasm

import (
	"fmt"
	"unicode/utf8"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// The PodRequest encoder is sdk/wire's (AppendPodRequest), shared with the go-plugin
// transport. This file decodes PodDecision, the other half of the per-decision hot path,
// without reflection.
//
// Field numbers are those of sdk/proto/allot/plugin/v1/policy.proto.
const (
	fPodReqPools = 5 // for tests
	fPvFree      = 6

	fDecCode, fDecReason, fDecIPv4, fDecIPv6, fDecSource, fDecCause = 1, 2, 3, 4, 5, 6
	fCandPool                                                       = 1
)

// appendPodRequest appends the PodRequest encoding of r to dst (sdk/wire's shared encoder).
func appendPodRequest(dst []byte, r *policy.PodRequest) ([]byte, error) {
	return wire.AppendPodRequest(dst, r)
}

func fieldName(num protowire.Number) string {
	if num == fDecCode {
		return "code"
	}
	return "cause"
}

// decodePodDecision decodes a frame body, a view into guest memory: every string is copied.
// It decodes into the generated message by hand (protowire, no reflection) and leaves the
// validation and conversion to sdk/wire, shared with the other transports.
func decodePodDecision(b []byte) (policy.PodDecision, error) {
	var m pb.PodDecision
	bad := func(why string) (policy.PodDecision, error) {
		return policy.PodDecision{}, fmt.Errorf("%w: decode pod decision: %s", ErrABI, why)
	}
	str := func(v []byte) (string, bool) {
		if !utf8.Valid(v) {
			return "", false
		}
		return string(v), true
	}
	var cands [4]pb.Candidate // the usual decision names a pool or two per family
	used := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return bad(protowire.ParseError(n).Error())
		}
		b = b[n:]
		switch {
		case (num == fDecCode || num == fDecCause) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return bad(fieldName(num) + ": " + protowire.ParseError(n).Error())
			}
			if num == fDecCode {
				m.Code = pb.DecisionCode(int32(v))
			} else {
				m.Cause = pb.DecisionCause(int32(v))
			}
			b = b[n:]
		case (num == fDecReason || num == fDecSource || num == fDecIPv4 || num == fDecIPv6) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return bad(protowire.ParseError(n).Error())
			}
			b = b[n:]
			switch num {
			case fDecReason, fDecSource:
				s, ok := str(v)
				if !ok {
					return bad("string field contains invalid UTF-8")
				}
				if num == fDecReason {
					m.Reason = s
				} else {
					m.Source = s
				}
			default:
				c := &pb.Candidate{}
				if used < len(cands) {
					c = &cands[used]
					used++
				}
				for len(v) > 0 {
					cn, ct, k := protowire.ConsumeTag(v)
					if k < 0 {
						return bad("candidate: " + protowire.ParseError(k).Error())
					}
					v = v[k:]
					if cn == fCandPool && ct == protowire.BytesType {
						pv, k := protowire.ConsumeBytes(v)
						if k < 0 {
							return bad("candidate: " + protowire.ParseError(k).Error())
						}
						s, ok := str(pv)
						if !ok {
							return bad("string field contains invalid UTF-8")
						}
						c.Pool = s
						v = v[k:]
						continue
					}
					k = protowire.ConsumeFieldValue(cn, ct, v)
					if k < 0 {
						return bad("candidate: " + protowire.ParseError(k).Error())
					}
					v = v[k:]
				}
				if num == fDecIPv4 {
					m.Ipv4 = append(m.Ipv4, c)
				} else {
					m.Ipv6 = append(m.Ipv6, c)
				}
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return bad(protowire.ParseError(n).Error())
			}
			b = b[n:]
		}
	}
	d, err := wire.PodDecisionFromProto(&m)
	if err != nil {
		return policy.PodDecision{}, fmt.Errorf("%w: %w", ErrABI, err)
	}
	return d, nil
}
