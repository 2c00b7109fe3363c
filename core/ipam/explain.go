package ipam

import (
	"context"
	"net/netip"
	"strconv"

	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/explain"
	"github.com/allot-ipam/allot/core/store"
)

// take is how takeLocked takes addresses: tr (nil unless allotctl explain asked for it)
// records what each candidate pool was, and dry finds the addresses an ADD would get without
// taking them (AllocateDryRun).
type take struct {
	tr  *explain.Trace
	dry bool
}

func (tk take) next(p *pool) (netip.Addr, error) {
	if tk.dry {
		return p.alloc.PeekNext()
	}
	return p.alloc.AllocateNext()
}

func (tk take) allocate(p *pool, a netip.Addr) error {
	if tk.dry {
		return p.alloc.CanAllocate(a)
	}
	return p.alloc.Allocate(a)
}

// exhausted notes a candidate without a free address (counted only when real).
func (tk take) exhausted(m *Manager, p *pool) {
	if !tk.dry {
		m.opts.Metrics.exhausted(p.alloc.Name())
	}
	if tk.tr != nil {
		s := p.alloc.Stats()
		tk.tr.Pool(p.alloc.Name(), p.family, api.VerdictExhausted, allocatorUsage(s))
	}
}

func allocatorUsage(s allocator.Stats) string {
	return "all " + strconv.FormatUint(s.Usable, 10) + " usable addresses in use"
}

// chose records a in the trace with the block (pool CIDR) it lies in.
func (tk take) chose(p *pool, a store.Address) store.Address {
	if tk.tr != nil {
		var block netip.Prefix
		for _, pr := range p.prefix {
			if pr.Contains(a.Prefix.Addr()) {
				block = pr
				break
			}
		}
		tk.tr.Chose(a.Pool, a.Prefix, block, a.Gateway)
	}
	return a
}

var _ explain.DryRunner = (*Manager)(nil)

// AllocateDryRun decides req as Allocate would, and finds the addresses it would take, but
// takes, writes and counts nothing (allotctl explain --dry-run). A dynamic pool without a
// free address is reported exhausted: a real ADD would wait for a new block.
func (m *Manager) AllocateDryRun(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	requested, err := req.Validate()
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	views := m.poolViewsLocked()
	m.mu.Unlock()
	d, err := m.decideFresh(ctx, req, views)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	addrs, err := m.takeLocked(req, d, requested, take{tr: explain.From(ctx), dry: true})
	if err != nil {
		return nil, err
	}
	return m.allocationOf(store.Record{Owner: toOwner(req.Owner), Network: req.Network,
		Pod: store.Pod{Namespace: req.Pod.Namespace, Name: req.Pod.Name, UID: req.Pod.UID}, Addresses: addrs}), nil
}
