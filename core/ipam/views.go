package ipam

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/sdk/policy"
)

// poolViewsLocked is what the policy sees of the pools, sorted by name.
func (m *Manager) poolViewsLocked() []policy.PoolView {
	out := make([]policy.PoolView, 0, len(m.poolKeys))
	for _, k := range m.poolKeys {
		p := m.pools[k]
		st := p.alloc.Stats()
		v := policy.PoolView{
			Name:    k.name,
			Family:  p.family,
			CIDRs:   p.prefix,
			Total:   st.Usable,
			Free:    st.Free,
			Default: p.spec.Default,
			// Policies that filter disabled pools (spiderpool-priority) skip it; the
			// manager refuses it for every other policy (takeNextLocked).
			Disabled: p.disabled,
		}
		for _, r := range p.spec.Allocator.Exclude {
			v.Excluded = append(v.Excluded, rangeString(r.From.String(), r.To.String()))
		}
		v.AllExcluded = st.Usable == 0
		m.applySelectionLocked(k, &v)
		out = append(out, v)
	}
	return out
}

func rangeString(from, to string) string {
	if from == to {
		return from
	}
	return from + "-" + to
}

// Pools implements api.Service.
func (m *Manager) Pools(ctx context.Context) ([]api.PoolStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.poolStatusLocked(), nil
}

func (m *Manager) poolStatusLocked() []api.PoolStatus {
	out := make([]api.PoolStatus, 0, len(m.poolKeys))
	for _, k := range m.poolKeys {
		p := m.pools[k]
		st := p.alloc.Stats()
		ps := api.PoolStatus{
			Name:        k.name,
			Family:      string(p.family),
			Usable:      st.Usable,
			Used:        st.Used,
			Free:        st.Free,
			Utilization: st.Utilization(),
			Default:     p.spec.Default,
		}
		for _, pr := range p.prefix {
			ps.CIDRs = append(ps.CIDRs, pr.String())
		}
		out = append(out, ps)
	}
	return out
}

// Allocations implements api.Service; sorted by owner.
func (m *Manager) Allocations(ctx context.Context) ([]api.Allocation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]api.Allocation, 0, len(m.owners))
	for _, h := range m.owners {
		out = append(out, *m.allocationOf(h.rec))
	}
	sort.Slice(out, func(i, j int) bool { return ownerLess(toOwner(out[i].Owner), toOwner(out[j].Owner)) })
	return out, nil
}

// Status implements api.Service.
func (m *Manager) Status(ctx context.Context) (*api.Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := &api.Status{
		Version:     m.opts.Version,
		Mode:        m.opts.Mode,
		Uptime:      time.Since(m.start).Round(time.Second).String(),
		Pools:       m.poolStatusLocked(),
		Allocations: len(m.owners),
	}
	free := false
	for _, p := range st.Pools {
		if p.Free > 0 {
			free = true
		}
	}
	st.Ready = free
	switch {
	case !free && m.opts.Dynamic != nil:
		// Blocks arrive on demand: an ADD waits for one, so the node stays ready.
		st.Ready = true
		st.Message = "no free address on this node yet; blocks are requested from the operator on demand"
	case !free:
		st.Message = "every pool is exhausted"
	case len(m.problems) > 0:
		st.Message = fmt.Sprintf("%d problem(s) found in the store at start: %s", len(m.problems), m.problems[0])
	}
	return st, nil
}

// Plugins implements api.Service.
func (m *Manager) Plugins(ctx context.Context) ([]api.PluginStatus, error) {
	if m.opts.PluginStatus == nil {
		return []api.PluginStatus{}, nil
	}
	return m.opts.PluginStatus(ctx), nil
}

func (m *Manager) updatePoolMetrics() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.updatePoolMetricsLocked()
}

// updatePoolMetricsOfLocked updates the gauges of the pools of addrs only (an ADD changes
// no other pool) and returns those pools' series, per address (nil: no such pool).
func (m *Manager) updatePoolMetricsOfLocked(addrs []store.Address) [2]*poolMetrics {
	var out [2]*poolMetrics
	for i, a := range addrs {
		k := poolKey{a.Pool, famOf(a.Prefix.Addr())}
		if p, ok := m.pools[k]; ok {
			pm := m.poolMetricsLocked(k, p)
			st := p.alloc.Stats()
			pm.set(st.Usable, st.Used)
			if i < len(out) {
				out[i] = pm
			}
		}
	}
	return out
}

func (m *Manager) updatePoolMetricsLocked() {
	for _, k := range m.poolKeys {
		p := m.pools[k]
		st := p.alloc.Stats()
		m.poolMetricsLocked(k, p).set(st.Usable, st.Used)
	}
}

// poolMetricsLocked returns p's series, looking them up the first time. A pool's series are
// deleted (Metrics.dropPool) only with the pool itself.
func (m *Manager) poolMetricsLocked(k poolKey, p *pool) *poolMetrics {
	if p.metrics == nil {
		p.metrics = m.opts.Metrics.forPool(k.name, string(k.fam))
	}
	return p.metrics
}
