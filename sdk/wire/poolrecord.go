package wire

import "github.com/allot-ipam/allot/sdk/policy"

// AppendPoolRecord appends p as one PodRequest.pools field, tag included: the bytes
// AppendPodRequest writes for it, so that a request may be written as AppendPodRequest of
// everything but the pools followed by one record per pool. A transport that sends some
// pools by reference (sdk/pluginrpc) encodes only the others.
func AppendPoolRecord(dst []byte, p *policy.PoolView) ([]byte, error) {
	e := encoder{b: dst}
	e.pool(p)
	if e.err != nil {
		return dst, e.err
	}
	return e.b, nil
}
