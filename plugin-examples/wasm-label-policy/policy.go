package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/allot-ipam/allot/sdk/policy"
)

// Label keys a pod uses to pick its pools. Each value is a pool name or a comma-separated
// list of pool names, best first.
const (
	// LabelPool applies to every family the named pool has.
	LabelPool = "allot.io/pool"
	// LabelPoolIPv4 and LabelPoolIPv6 override LabelPool for one family.
	LabelPoolIPv4 = "allot.io/pool-ipv4"
	LabelPoolIPv6 = "allot.io/pool-ipv6"
)

// labelPolicy picks a pod's pools from its labels, falling back to the cluster default
// pools when the pod has none of the labels. It has no opinion on nodes (Skip).
type labelPolicy struct {
	policy.PodOnly
}

var _ policy.PoolPolicy = labelPolicy{}

// SelectPodPools implements policy.PoolPolicy.
func (labelPolicy) SelectPodPools(_ context.Context, r *policy.PodRequest) (policy.PodDecision, error) {
	labels := r.Pod.Labels
	both, hasBoth := labels[LabelPool]
	v4, has4 := labels[LabelPoolIPv4]
	v6, has6 := labels[LabelPoolIPv6]
	if !hasBoth && !has4 && !has6 {
		return defaults(r.Pools), nil
	}

	d := policy.PodDecision{Code: policy.Decided}
	var sources, problems []string
	pick := func(fam policy.Family, key, value string) []policy.Candidate {
		var out []policy.Candidate
		for _, name := range splitList(value) {
			p := policy.LookupPool(r.Pools, name, fam)
			switch {
			case p == nil:
				if key != LabelPool { // LabelPool names may have only one family
					problems = append(problems, fmt.Sprintf("%s pool %q does not exist", fam.Label(), name))
				}
			case p.Disabled:
				problems = append(problems, fmt.Sprintf("%s pool %q is disabled", fam.Label(), name))
			case p.Terminating:
				problems = append(problems, fmt.Sprintf("%s pool %q is terminating", fam.Label(), name))
			default:
				out = append(out, policy.Candidate{Pool: name})
			}
		}
		return out
	}
	for _, f := range []struct {
		fam        policy.Family
		key, value string
		has        bool
		dst        *[]policy.Candidate
	}{
		{policy.IPv4, LabelPoolIPv4, v4, has4, &d.IPv4},
		{policy.IPv6, LabelPoolIPv6, v6, has6, &d.IPv6},
	} {
		key, value := f.key, f.value
		if !f.has {
			key, value = LabelPool, both
			if !hasBoth {
				continue
			}
		}
		if *f.dst = pick(f.fam, key, value); len(*f.dst) > 0 {
			sources = append(sources, "pod label "+key)
		}
	}
	if len(d.IPv4)+len(d.IPv6) == 0 {
		reason := "pod labels name no usable pool"
		if hasBoth {
			reason = fmt.Sprintf("pod label %s=%q names no pool of either family", LabelPool, both)
		}
		if len(problems) > 0 {
			reason += ": " + strings.Join(problems, "; ")
		}
		return policy.PodDecision{Code: policy.NoFit, Reason: reason}, nil
	}
	d.Source = strings.Join(dedup(sources), ", ")
	if len(problems) > 0 {
		d.Reason = "skipped: " + strings.Join(problems, "; ")
	}
	return d, nil
}

// defaults answers the cluster default pools of each family, in name order (the host
// sends pools sorted by name), skipping disabled and terminating ones.
func defaults(pools []policy.PoolView) policy.PodDecision {
	d := policy.PodDecision{Code: policy.Decided, Source: "default pools"}
	for i := range pools {
		p := &pools[i]
		if !p.Default || p.Disabled || p.Terminating {
			continue
		}
		switch p.Family {
		case policy.IPv4:
			d.IPv4 = append(d.IPv4, policy.Candidate{Pool: p.Name})
		case policy.IPv6:
			d.IPv6 = append(d.IPv6, policy.Candidate{Pool: p.Name})
		}
	}
	if len(d.IPv4)+len(d.IPv6) == 0 {
		return policy.PodDecision{Code: policy.NoFit,
			Reason: fmt.Sprintf("pod has no %s label and no default pool is usable", LabelPool)}
	}
	return d
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func dedup(ss []string) []string {
	var out []string
	for _, s := range ss {
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}
