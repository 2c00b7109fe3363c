package wasm

import (
	"maps"
	"slices"

	"github.com/allot-ipam/allot/sdk/policy"
)

// Skipping the encoding of pools the instance already has. With pool references
// (poolrefs.go) an unchanged pool travels as a varint, but finding out that it is unchanged
// by encoding it and comparing bytes cost most of the host's share of a decision (CIDRs
// formatted, selectors' keys sorted, for every pool on every call). So each instance also
// keeps a private copy of the views it last sent in full, and when every pool of a request
// equals its copy (apart from the free count) the request is encoded without pools and one
// run of references follows: the same bytes withPoolRefs would have produced. Any other
// request takes the full path, which refreshes both mirrors.

// encodePod appends the request for this instance: with references when the guest takes
// them, through the view mirror when every pool matches it.
func (in *instance) encodePod(dst []byte, req *policy.PodRequest, refs bool) ([]byte, error) {
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
			var ref uint64
			if in.pools[i].split {
				ref = req.Pools[i].Free + 1
			}
			run = append(run, ref)
		}
		in.refRun = run[:0]
		return appendRefRun(out, run), nil
	}
	full, err := appendPodRequest(in.fullReq[:0], req)
	if err != nil {
		return dst, err
	}
	in.fullReq = full[:0]
	out := in.withPoolRefs(dst, full)
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
		// A record without a leading free count had Free 0; a reference cannot give it one.
		if in.pools[i].split != (p.Free != 0) || !sameView(&in.views[i], p) {
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
		if !sameView(&in.views[i], &pools[i]) {
			in.views[i] = cloneView(&pools[i])
		}
	}
}

// sameView reports whether a and b encode to the same pool record apart from Free
// (TestSameViewCoversEveryField keeps it in step with policy.PoolView).
func sameView(a, b *policy.PoolView) bool {
	return a.Name == b.Name && a.Family == b.Family && a.Subnet == b.Subnet && a.Total == b.Total &&
		a.Default == b.Default && a.Disabled == b.Disabled && a.Terminating == b.Terminating &&
		a.AllExcluded == b.AllExcluded && a.AllReserved == b.AllReserved &&
		slices.Equal(a.CIDRs, b.CIDRs) && slices.Equal(a.Excluded, b.Excluded) &&
		slices.Equal(a.Reserved, b.Reserved) && slices.Equal(a.NodeName, b.NodeName) &&
		slices.Equal(a.NamespaceName, b.NamespaceName) && slices.Equal(a.MultusName, b.MultusName) &&
		sameSelector(a.NodeAffinity, b.NodeAffinity) && sameSelector(a.NamespaceAffinity, b.NamespaceAffinity) &&
		sameSelector(a.PodAffinity, b.PodAffinity)
}

// sameSelector: nil and empty differ (an empty selector is encoded, as an empty message);
// nil and empty maps and lists do not (neither is encoded).
func sameSelector(a, b *policy.LabelSelector) bool {
	if a == nil || b == nil {
		return a == b
	}
	return maps.Equal(a.MatchLabels, b.MatchLabels) &&
		slices.EqualFunc(a.MatchExpressions, b.MatchExpressions, func(x, y policy.Requirement) bool {
			return x.Key == y.Key && x.Operator == y.Operator && slices.Equal(x.Values, y.Values)
		})
}

// cloneView copies v deeply, so that a caller changing its views in place later cannot
// change the mirror.
func cloneView(v *policy.PoolView) policy.PoolView {
	c := *v
	c.CIDRs = slices.Clone(v.CIDRs)
	c.Excluded = slices.Clone(v.Excluded)
	c.Reserved = slices.Clone(v.Reserved)
	c.NodeName = slices.Clone(v.NodeName)
	c.NamespaceName = slices.Clone(v.NamespaceName)
	c.MultusName = slices.Clone(v.MultusName)
	c.NodeAffinity = cloneSelector(v.NodeAffinity)
	c.NamespaceAffinity = cloneSelector(v.NamespaceAffinity)
	c.PodAffinity = cloneSelector(v.PodAffinity)
	return c
}

func cloneSelector(s *policy.LabelSelector) *policy.LabelSelector {
	if s == nil {
		return nil
	}
	c := &policy.LabelSelector{MatchLabels: maps.Clone(s.MatchLabels)}
	for _, r := range s.MatchExpressions {
		c.MatchExpressions = append(c.MatchExpressions,
			policy.Requirement{Key: r.Key, Operator: r.Operator, Values: slices.Clone(r.Values)})
	}
	return c
}
