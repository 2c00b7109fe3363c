package agent

import (
	"math"
	"net/netip"
	"slices"
	"sort"

	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

// families says which families a cluster pool (IPPool) has.
type families struct{ v4, v6 bool }

func (f families) has(fam policy.Family) bool {
	if fam == policy.IPv4 {
		return f.v4
	}
	return f.v6
}

// demand is what the agent wants for one pool and family.
type demand struct {
	pool    string
	fam     policy.Family
	needed  uint64
	blocks  ipam.PoolUsage
	release []netip.Prefix // blocks releasable now (before the release delay)
}

// computeDemand applies the pre-allocation formula to every local pool, and to every cluster
// pool of pools (which may not have a local pool yet).
func computeDemand(usage []ipam.PoolUsage, pools map[string]families, pre map[string]int) []demand {
	seen := map[string]map[policy.Family]bool{}
	var out []demand
	for _, u := range usage {
		p := uint64(max(pre[u.Name], 0))
		if f, known := pools[u.Name]; known && !f.has(u.Family) {
			p = 0 // the pool has no such family (any more): only what is in use counts
		} else if !known {
			p = 0 // not a cluster pool (deleted, or not seen yet): keep only what is in use
		}
		d := demand{pool: u.Name, fam: u.Family, blocks: u}
		d.needed = NeededIPs(u.Used, uint64(u.Pending), p)
		d.release = Releasable(u.CIDRs, d.needed)
		out = append(out, d)
		if seen[u.Name] == nil {
			seen[u.Name] = map[policy.Family]bool{}
		}
		seen[u.Name][u.Family] = true
	}
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
			if pools[n].has(fam) && !seen[n][fam] {
				out = append(out, demand{pool: n, fam: fam, needed: NeededIPs(0, 0, uint64(max(pre[n], 0)))})
			}
		}
	}
	slices.SortFunc(out, func(a, b demand) int {
		if a.pool != b.pool {
			if a.pool < b.pool {
				return -1
			}
			return 1
		}
		if a.fam < b.fam {
			return -1
		}
		if a.fam > b.fam {
			return 1
		}
		return 0
	})
	return out
}

func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// requestedOf turns the demand into spec.ipam.pools.requested: one entry per pool that
// needs an address in some family, sorted by pool.
func requestedOf(ds []demand) []v1alpha1.PoolRequest {
	var out []v1alpha1.PoolRequest
	for _, d := range ds {
		if d.needed == 0 {
			continue
		}
		if len(out) == 0 || out[len(out)-1].Pool != d.pool {
			out = append(out, v1alpha1.PoolRequest{Pool: d.pool})
		}
		r := &out[len(out)-1]
		if d.fam == policy.IPv4 {
			r.Needed.IPv4 = clampInt64(d.needed)
		} else {
			r.Needed.IPv6 = clampInt64(d.needed)
		}
	}
	return out
}

// statusOf turns local usage into status.ipam: one entry per pool with a block or an
// address in use, sorted by pool.
func statusOf(usage []ipam.PoolUsage) v1alpha1.NodeIPAMStatus {
	var st v1alpha1.NodeIPAMStatus
	for _, u := range usage {
		if len(u.CIDRs) == 0 && u.Used == 0 {
			continue
		}
		if len(st.Pools) == 0 || st.Pools[len(st.Pools)-1].Pool != u.Name {
			st.Pools = append(st.Pools, v1alpha1.PoolUsage{Pool: u.Name})
		}
		p := &st.Pools[len(st.Pools)-1]
		fu := &v1alpha1.FamilyUsage{Used: clampInt64(u.Used), Available: clampInt64(u.Usable)}
		if u.Family == policy.IPv4 {
			p.IPv4 = fu
		} else {
			p.IPv6 = fu
		}
	}
	return st
}

func equalRequested(a, b []v1alpha1.PoolRequest) bool {
	return slices.Equal(a, b)
}

func equalStatus(a, b v1alpha1.NodeIPAMStatus) bool {
	return slices.EqualFunc(a.Pools, b.Pools, func(x, y v1alpha1.PoolUsage) bool {
		return x.Pool == y.Pool && equalFU(x.IPv4, y.IPv4) && equalFU(x.IPv6, y.IPv6)
	})
}

func equalFU(a, b *v1alpha1.FamilyUsage) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// allocatedBlocks flattens spec.ipam.pools.allocated into (pool, block) keys; entries that
// do not parse are returned apart (they are logged, never used).
func allocatedBlocks(node *v1alpha1.AllotNode) (blocks []blockKey, bad []string) {
	for _, pa := range node.Spec.IPAM.Pools.Allocated {
		for _, c := range pa.CIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil || p != p.Masked() {
				bad = append(bad, pa.Pool+":"+c)
				continue
			}
			blocks = append(blocks, blockKey{pa.Pool, p})
		}
	}
	slices.SortFunc(blocks, compareBlockKey)
	return blocks, bad
}

// withoutBlocks returns allocated minus the blocks of drop (entries left empty are removed).
func withoutBlocks(allocated []v1alpha1.PoolAllocation, drop map[blockKey]bool) ([]v1alpha1.PoolAllocation, bool) {
	changed := false
	var out []v1alpha1.PoolAllocation
	for _, pa := range allocated {
		n := v1alpha1.PoolAllocation{Pool: pa.Pool}
		for _, c := range pa.CIDRs {
			if p, err := netip.ParsePrefix(c); err == nil && drop[blockKey{pa.Pool, p}] {
				changed = true
				continue
			}
			n.CIDRs = append(n.CIDRs, c)
		}
		if len(n.CIDRs) > 0 {
			out = append(out, n)
		} else if len(pa.CIDRs) > 0 {
			changed = true
		}
	}
	return out, changed
}
