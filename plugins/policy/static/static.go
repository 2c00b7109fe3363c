// Package static is the foundation pool policy: the pools named in the CNI ipam config, else
// the cluster's default pools.
package static

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/allot-ipam/allot/sdk/policy"
)

// Name is the policy's registry name.
const Name = "static"

// Sources, as they appear in PodDecision.Source.
const (
	SourceCNIPools     = "CNI config ipam.pools"
	SourceDefaultPools = "default pools"
)

// Policy answers from the CNI config's pool list, else from the pools marked Default.
type Policy struct {
	policy.PodOnly
}

var _ policy.PoolPolicy = (*Policy)(nil)

// New returns the static policy. It has no configuration.
func New() *Policy { return &Policy{} }

// FromConfig is the registry factory. The static policy takes no configuration, so any key
// is an error naming that key.
func FromConfig(cfg map[string]any) (policy.PoolPolicy, error) {
	if len(cfg) > 0 {
		keys := make([]string, 0, len(cfg))
		for k := range cfg {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return nil, fmt.Errorf("%s: config field %q: unknown field (this policy takes no configuration)", Name, keys[0])
	}
	return New(), nil
}

// SelectPodPools implements policy.PoolPolicy.
//
// With pools named in the CNI config (CNIRequest.Pools) the candidates are those pools, split
// per family by PoolView.Family, in the order given; a name that is no pool is NoFit. A pool
// with both families is a candidate in both. Without named pools the candidates are the pools
// marked Default, per family, sorted by name. With neither, the policy has no opinion (Skip).
func (p *Policy) SelectPodPools(ctx context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	d := decide(req)
	if policy.DetailWanted(ctx) && d.Code == policy.Decided {
		d.Rejected = rejected(req, d)
	}
	return d, nil
}

func decide(req *policy.PodRequest) policy.PodDecision {
	if len(req.CNI.Pools) > 0 {
		return fromNames(req)
	}
	var d policy.PodDecision
	for i := range req.Pools {
		pv := &req.Pools[i]
		if !pv.Default {
			continue
		}
		switch pv.Family {
		case policy.IPv4:
			d.IPv4 = append(d.IPv4, policy.Candidate{Pool: pv.Name})
		case policy.IPv6:
			d.IPv6 = append(d.IPv6, policy.Candidate{Pool: pv.Name})
		}
	}
	if len(d.IPv4) == 0 && len(d.IPv6) == 0 {
		return policy.PodDecision{Code: policy.Skip, Reason: "no pools named in the CNI config (ipam.pools) and no default pools"}
	}
	// The host sends pools sorted by name; sort anyway so the answer never depends on it.
	byName := func(a, b policy.Candidate) int { return strings.Compare(a.Pool, b.Pool) }
	slices.SortStableFunc(d.IPv4, byName)
	slices.SortStableFunc(d.IPv6, byName)
	d.Code = policy.Decided
	d.Source = SourceDefaultPools
	return d
}

// rejected says, for allotctl explain, why each other pool is no candidate.
func rejected(req *policy.PodRequest, d policy.PodDecision) []policy.Rejection {
	why := "not a default pool, and the CNI config (ipam.pools) names none"
	if len(req.CNI.Pools) > 0 {
		why = "not named in the CNI config (ipam.pools)"
	}
	var out []policy.Rejection
	for i := range req.Pools {
		pv := &req.Pools[i]
		if !d.Names(pv.Name, pv.Family) {
			out = append(out, policy.Rejection{Pool: pv.Name, Family: pv.Family, Cause: policy.CauseNoMatch, Reason: why})
		}
	}
	return out
}

func fromNames(req *policy.PodRequest) policy.PodDecision {
	d := policy.PodDecision{Code: policy.Decided, Source: SourceCNIPools}
	for i, name := range req.CNI.Pools {
		if slices.Contains(req.CNI.Pools[:i], name) {
			return noFit(policy.CauseInvalid, fmt.Sprintf("CNI config ipam.pools[%d]: pool %q is listed twice", i, name))
		}
		found := false
		for j := range req.Pools {
			pv := &req.Pools[j]
			if pv.Name != name {
				continue
			}
			switch pv.Family {
			case policy.IPv4:
				d.IPv4 = append(d.IPv4, policy.Candidate{Pool: name})
				found = true
			case policy.IPv6:
				d.IPv6 = append(d.IPv6, policy.Candidate{Pool: name})
				found = true
			}
		}
		if !found {
			return noFit(policy.CauseNoMatch, fmt.Sprintf("CNI config ipam.pools[%d] names pool %q, which does not exist", i, name))
		}
	}
	return d
}

func noFit(cause policy.Cause, reason string) policy.PodDecision {
	return policy.PodDecision{Code: policy.NoFit, Cause: cause, Reason: reason, Source: SourceCNIPools}
}
