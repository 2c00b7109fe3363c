// Package labelpolicy is the policy the process-plugin tests run both in-process and
// through a plugin binary, to check the transport changes nothing.
package labelpolicy

import (
	"context"
	"fmt"
	"slices"

	"github.com/allot-ipam/allot/sdk/policy"
)

// Label names the pool a pod wants.
const Label = "allot.io/pool"

// Policy picks the pool named by the pod's label, else the default pools, per family.
type Policy struct{}

// SelectPodPools implements policy.PoolPolicy.
func (Policy) SelectPodPools(_ context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	var d policy.PodDecision
	if name, ok := req.Pod.Labels[Label]; ok {
		for _, p := range req.Pools {
			if p.Name != name {
				continue
			}
			if p.Disabled || p.Terminating {
				return policy.PodDecision{Code: policy.NoFit, Reason: fmt.Sprintf("pod label %s names pool %q, which is disabled or terminating", Label, name)}, nil
			}
			c := []policy.Candidate{{Pool: name}}
			if p.Family == policy.IPv4 {
				d.IPv4 = c
			} else {
				d.IPv6 = c
			}
			d.Code, d.Source = policy.Decided, "pod label "+Label
			return d, nil
		}
		return policy.PodDecision{Code: policy.NoFit, Reason: fmt.Sprintf("pod label %s names pool %q, which does not exist", Label, name)}, nil
	}
	for _, p := range req.Pools {
		if !p.Default || p.Disabled || p.Terminating {
			continue
		}
		if p.Family == policy.IPv4 {
			d.IPv4 = append(d.IPv4, policy.Candidate{Pool: p.Name})
		} else {
			d.IPv6 = append(d.IPv6, policy.Candidate{Pool: p.Name})
		}
	}
	if len(d.IPv4)+len(d.IPv6) == 0 {
		return policy.PodDecision{Code: policy.Skip}, nil
	}
	// Most free addresses first; name breaks ties.
	free := map[string]uint64{}
	for _, p := range req.Pools {
		free[p.Name] = p.Free
	}
	order := func(a, b policy.Candidate) int {
		if free[a.Pool] != free[b.Pool] {
			if free[a.Pool] > free[b.Pool] {
				return -1
			}
			return 1
		}
		if a.Pool < b.Pool {
			return -1
		}
		return 1
	}
	slices.SortFunc(d.IPv4, order)
	slices.SortFunc(d.IPv6, order)
	d.Code, d.Source = policy.Decided, "default pools"
	return d, nil
}

// SelectNodeCIDRConfig implements policy.PoolPolicy: every config with free blocks, in order.
func (Policy) SelectNodeCIDRConfig(_ context.Context, req *policy.NodeRequest) (policy.NodeDecision, error) {
	var d policy.NodeDecision
	for _, c := range req.Configs {
		if c.FreeBlocks > 0 {
			d.Configs = append(d.Configs, c.Name)
		}
	}
	if len(d.Configs) == 0 {
		return policy.NodeDecision{Code: policy.NoFit, Reason: "no config has a free block"}, nil
	}
	return d, nil
}
