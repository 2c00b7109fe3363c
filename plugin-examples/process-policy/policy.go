package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/allot-ipam/allot/sdk/policy"
)

// DefaultLabel is the pod label naming the pool a pod wants.
const DefaultLabel = "allot.io/pool"

// LabelPolicy picks the pool named by a pod label; without the label it falls back to the
// CNI config's default pools, then to the cluster's default pools; with none of them it
// answers Skip so the next policy of the chain decides.
type LabelPolicy struct {
	policy.PodOnly // node CIDR configs: no opinion
	// Label is the pod label to read; empty means DefaultLabel.
	Label string
}

var _ policy.PoolPolicy = LabelPolicy{}

func (p LabelPolicy) label() string {
	if p.Label == "" {
		return DefaultLabel
	}
	return p.Label
}

// usable says why a pool cannot serve, or "" if it can.
func usable(v *policy.PoolView) string {
	switch {
	case v.Disabled:
		return "disabled"
	case v.Terminating:
		return "terminating"
	case v.Free == 0:
		return "exhausted"
	}
	return ""
}

// SelectPodPools implements policy.PoolPolicy.
func (p LabelPolicy) SelectPodPools(_ context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	byName := make(map[string]*policy.PoolView, len(req.Pools))
	for i := range req.Pools {
		byName[req.Pools[i].Name] = &req.Pools[i]
	}
	label := p.label()

	// 1. The pod's label: an explicit wish is honoured or refused, never silently replaced.
	if name, ok := req.Pod.Labels[label]; ok {
		v, ok := byName[name]
		if !ok {
			return noFit("pod label %s names pool %q, which does not exist", label, name), nil
		}
		if why := usable(v); why != "" {
			return noFit("pod label %s names pool %q, which is %s", label, name, why), nil
		}
		d := policy.PodDecision{Code: policy.Decided, Source: "pod label " + label}
		add(&d, v)
		return d, nil
	}

	// 2. The CNI config's default pools, in the order the config lists them.
	var d policy.PodDecision
	for _, name := range slices.Concat(req.CNI.DefaultIPv4Pools, req.CNI.DefaultIPv6Pools) {
		if v, ok := byName[name]; ok && usable(v) == "" {
			add(&d, v)
		}
	}
	if len(d.IPv4)+len(d.IPv6) > 0 {
		d.Code, d.Source = policy.Decided, "CNI config default pools"
		return d, nil
	}

	// 3. The cluster's default pools, by name (req.Pools is sorted by name).
	for i := range req.Pools {
		if v := &req.Pools[i]; v.Default && usable(v) == "" {
			add(&d, v)
		}
	}
	if len(d.IPv4)+len(d.IPv6) > 0 {
		d.Code, d.Source = policy.Decided, "cluster default pools"
		return d, nil
	}
	return policy.PodDecision{Code: policy.Skip, Reason: fmt.Sprintf("no %s label and no usable default pool", label)}, nil
}

func add(d *policy.PodDecision, v *policy.PoolView) {
	c := policy.Candidate{Pool: v.Name}
	if v.Family == policy.IPv6 {
		d.IPv6 = append(d.IPv6, c)
	} else {
		d.IPv4 = append(d.IPv4, c)
	}
}

func noFit(format string, args ...any) policy.PodDecision {
	return policy.PodDecision{Code: policy.NoFit, Reason: fmt.Sprintf(format, args...)}
}
