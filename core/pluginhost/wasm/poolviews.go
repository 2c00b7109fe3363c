package wasm

import (
	"math"
	"slices"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
)

// Skipping the encoding of pools the instance already has. With pool references
// (poolrefs.go) an unchanged pool travels as a varint, but finding out that it is unchanged
// by encoding it and comparing bytes cost most of the host's share of a decision (CIDRs
// formatted, selectors' keys sorted, for every pool on every call). So each instance also
// keeps a private copy of the views it last sent in full (wire.PoolSnapshot), and when every pool of a request
// equals its copy (apart from the free count) the request is encoded without pools and one
// run of references follows: the same bytes withPoolRefs would have produced. Any other
// request takes the full path, which refreshes both mirrors.

// encodePod appends the request for this instance: with references when the guest takes
// them, through the view mirror when every pool matches it.
// same: the guest takes runs of unchanged pools (featureSameRuns).
func (in *instance) encodePod(dst []byte, req *policy.PodRequest, refs, same bool) ([]byte, error) {
	if !refs {
		return appendPodRequest(dst, req)
	}
	if in.viewsMatch(req.Pools) {
		head := *req
		head.Pools = nil
		out, err := appendPodRequest(dst, &head)
		if err != nil {
			return dst, err
		}
		run := in.refRun[:0]
		for i := range req.Pools {
			run = append(run, in.pools[i].ref(req.Pools[i].Free, same))
		}
		in.refRun = run[:0]
		return appendRuns(out, run), nil
	}
	full, err := appendPodRequest(in.fullReq[:0], req)
	if err != nil {
		return dst, err
	}
	in.fullReq = full[:0]
	out := in.withPoolRefs(dst, full, same)
	in.rememberViews(req.Pools)
	return out, nil
}

// viewsMatch reports whether every pool equals the view the instance last received in
// full at its position, apart from a free count the reference carries.
func (in *instance) viewsMatch(pools []policy.PoolView) bool {
	if len(pools) == 0 || len(in.views) != len(pools) || len(in.pools) != len(pools) {
		return false
	}
	for i := range pools {
		p := &pools[i]
		// A record without a leading free count had Free 0; a reference cannot give it one,
		// nor carry the two highest counts (splitFree).
		if in.pools[i].split != (p.Free != 0) || p.Free >= math.MaxUint64-1 || !in.views[i].Same(p) {
			return false
		}
	}
	return true
}

// rememberViews records private copies of the views withPoolRefs just mirrored (it keeps
// in.pools as long as the request, or empties it for a malformed one).
func (in *instance) rememberViews(pools []policy.PoolView) {
	if len(in.pools) != len(pools) {
		in.views = in.views[:0]
		return
	}
	in.views = slices.Grow(in.views[:0], len(pools))[:len(pools)]
	for i := range pools {
		if !in.views[i].Same(&pools[i]) {
			in.views[i] = wire.SnapshotPool(&pools[i])
		}
	}
}
