// Package labelpolicy is the policy the process-plugin tests run both in-process and
// through a plugin binary, to check the transport changes nothing.
package labelpolicy

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

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
	// Default pools by index, most free addresses first; name breaks ties. The indexes live
	// on the stack for up to 32 pools of each family.
	var buf4, buf6 [32]int
	v4, v6 := buf4[:0], buf6[:0]
	for i, p := range req.Pools {
		if !p.Default || p.Disabled || p.Terminating {
			continue
		}
		if p.Family == policy.IPv4 {
			v4 = append(v4, i)
		} else {
			v6 = append(v6, i)
		}
	}
	if len(v4)+len(v6) == 0 {
		return policy.PodDecision{Code: policy.Skip}, nil
	}
	d.IPv4, d.IPv6 = candidates(req.Pools, v4), candidates(req.Pools, v6)
	d.Code, d.Source = policy.Decided, "default pools"
	return d, nil
}

// candidates orders the pools at idx by free addresses, then name.
func candidates(pools []policy.PoolView, idx []int) []policy.Candidate {
	if len(idx) == 0 {
		return nil
	}
	slices.SortFunc(idx, func(a, b int) int {
		if pools[a].Free != pools[b].Free {
			return cmp.Compare(pools[b].Free, pools[a].Free)
		}
		return strings.Compare(pools[a].Name, pools[b].Name)
	})
	out := make([]policy.Candidate, len(idx))
	for i, j := range idx {
		out[i] = policy.Candidate{Pool: pools[j].Name}
	}
	return out
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
