package explain

import "github.com/allot-ipam/allot/sdk/policy"

// maxDetailPools bounds what a kept trace holds. The per-pool reasons are asked for from the
// recorded request, which holds a view of every pool: a few kilobytes on a node with a few
// pools, but on a cluster of hundreds of shared pools thousands of kept requests would be
// hundreds of megabytes. Past this many pools a successful ADD keeps only each pool's name and
// counts (its explanation shows pools the policy left out as "not chosen"); a failed one keeps
// everything, since "why did it fail" is what explain is for, and a dry run is always full.
const maxDetailPools = 64

// compact drops the request and policies of a trace with many pools (see maxDetailPools).
func (t *Trace) compact() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pools) <= maxDetailPools {
		return
	}
	slim := make([]policy.PoolView, len(t.pools))
	for i, v := range t.pools {
		slim[i] = policy.PoolView{Name: v.Name, Family: v.Family, Free: v.Free, Total: v.Total}
	}
	t.pools = slim
	for i := range t.steps {
		t.steps[i].Policy, t.steps[i].Request = nil, nil
	}
}
