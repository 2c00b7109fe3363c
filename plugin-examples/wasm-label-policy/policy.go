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
//
// It allocates only the candidate lists it returns (and text when something is wrong):
// in a wasm guest every allocation costs about a microsecond, more than the rest of the
// decision.
func (labelPolicy) SelectPodPools(_ context.Context, r *policy.PodRequest) (policy.PodDecision, error) {
	labels := r.Pod.Labels
	both, hasBoth := labels[LabelPool]
	v4, has4 := labels[LabelPoolIPv4]
	v6, has6 := labels[LabelPoolIPv6]
	if !hasBoth && !has4 && !has6 {
		return defaults(r.Pools), nil
	}

	d := policy.PodDecision{Code: policy.Decided}
	var problems []string
	var src4, src6 string // the label each family's candidates came from
	if key, value, ok := familyLabel(LabelPoolIPv4, v4, has4, both, hasBoth); ok {
		if d.IPv4 = pick(r.Pools, policy.IPv4, key, value, &problems); len(d.IPv4) > 0 {
			src4 = key
		}
	}
	if key, value, ok := familyLabel(LabelPoolIPv6, v6, has6, both, hasBoth); ok {
		if d.IPv6 = pick(r.Pools, policy.IPv6, key, value, &problems); len(d.IPv6) > 0 {
			src6 = key
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
	d.Source = source(src4, src6)
	if len(problems) > 0 {
		d.Reason = "skipped: " + strings.Join(problems, "; ")
	}
	return d, nil
}

// familyLabel is the label that names a family's pools: its own, else LabelPool.
func familyLabel(own, value string, has bool, both string, hasBoth bool) (key, v string, ok bool) {
	switch {
	case has:
		return own, value, true
	case hasBoth:
		return LabelPool, both, true
	}
	return "", "", false
}

// pick returns the usable pools of family fam that value (a comma-separated list) names,
// in its order, and appends why it skipped the others to problems.
func pick(pools []policy.PoolView, fam policy.Family, key, value string, problems *[]string) []policy.Candidate {
	var out []policy.Candidate
	for rest := value; rest != ""; {
		var name string
		name, rest, _ = strings.Cut(rest, ",")
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		p := policy.LookupPool(pools, name, fam)
		switch {
		case p == nil:
			if key != LabelPool { // LabelPool names may have only one family
				*problems = append(*problems, fmt.Sprintf("%s pool %q does not exist", fam.Label(), name))
			}
		case p.Disabled:
			*problems = append(*problems, fmt.Sprintf("%s pool %q is disabled", fam.Label(), name))
		case p.Terminating:
			*problems = append(*problems, fmt.Sprintf("%s pool %q is terminating", fam.Label(), name))
		default:
			out = append(out, policy.Candidate{Pool: name})
		}
	}
	return out
}

// source names the labels the candidates came from ("" for a family without any), each
// once, IPv4's first.
func source(key4, key6 string) string {
	switch {
	case key4 == "" || key4 == key6:
		return labelSource(key6)
	case key6 == "":
		return labelSource(key4)
	}
	return labelSource(key4) + ", " + labelSource(key6)
}

// labelSource is "pod label <key>", a constant for each key.
func labelSource(key string) string {
	switch key {
	case LabelPool:
		return "pod label " + LabelPool
	case LabelPoolIPv4:
		return "pod label " + LabelPoolIPv4
	}
	return "pod label " + LabelPoolIPv6
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
