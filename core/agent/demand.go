package agent

import (
	"net/netip"
	"slices"
	"time"

	"github.com/allot-ipam/allot/core/allocator"
)

// NeededIPs is Cilium's multi-pool pre-allocation formula ("Allocation Parameters" in
// docs.cilium.io/en/stable/network/concepts/ipam/multi-pool/; neededIPCeil in Cilium's pkg/ipam):
//
//	neededIPs = roundUp(inUse + pending + preAlloc, preAlloc)
//
// With preAlloc 0 nothing is kept in reserve: needed = inUse + pending. The result
// saturates instead of wrapping.
func NeededIPs(inUse, pending, preAlloc uint64) uint64 {
	n := inUse + pending
	if n < inUse {
		return ^uint64(0)
	}
	if preAlloc == 0 {
		return n
	}
	n += preAlloc
	if n < preAlloc {
		return ^uint64(0)
	}
	r := n % preAlloc
	if r == 0 {
		return n
	}
	up := n + preAlloc - r
	if up < n {
		return ^uint64(0)
	}
	return up
}

// Releasable returns the blocks of one pool and family that can be given back: blocks with
// no address in use whose removal still leaves at least needed addresses in the remaining
// blocks. Empty blocks are considered highest address first, so the result is
// deterministic and the low blocks (handed out first) stay.
func Releasable(blocks []allocator.CIDRStats, needed uint64) []netip.Prefix {
	var capacity uint64
	for _, b := range blocks {
		if capacity+b.Usable < capacity {
			capacity = ^uint64(0)
		} else {
			capacity += b.Usable
		}
	}
	empty := make([]allocator.CIDRStats, 0, len(blocks))
	for _, b := range blocks {
		if b.Used == 0 {
			empty = append(empty, b)
		}
	}
	slices.SortFunc(empty, func(a, b allocator.CIDRStats) int { return b.Prefix.Addr().Compare(a.Prefix.Addr()) })
	var out []netip.Prefix
	for _, b := range empty {
		if capacity-b.Usable >= needed && capacity >= b.Usable {
			capacity -= b.Usable
			out = append(out, b.Prefix)
		}
	}
	return out
}

// idleTracker remembers since when each block has been releasable, so a block is given back
// only after it stayed releasable for the release delay.
type idleTracker struct {
	since map[blockKey]time.Time
}

type blockKey struct {
	pool string
	cidr netip.Prefix
}

// update records the blocks releasable now (forgetting the others) and returns those
// releasable for at least delay, and the earliest time another one becomes due (zero if
// none).
func (t *idleTracker) update(now time.Time, releasable []blockKey, delay time.Duration) (due []blockKey, next time.Time) {
	if t.since == nil {
		t.since = map[blockKey]time.Time{}
	}
	keep := make(map[blockKey]bool, len(releasable))
	for _, k := range releasable {
		keep[k] = true
		s, ok := t.since[k]
		if !ok {
			s = now
			t.since[k] = now
		}
		if at := s.Add(delay); !now.Before(at) {
			due = append(due, k)
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	for k := range t.since {
		if !keep[k] {
			delete(t.since, k)
		}
	}
	slices.SortFunc(due, compareBlockKey)
	return due, next
}

func (t *idleTracker) forget(k blockKey) { delete(t.since, k) }

func compareBlockKey(a, b blockKey) int {
	if a.pool != b.pool {
		if a.pool < b.pool {
			return -1
		}
		return 1
	}
	if c := a.cidr.Addr().Compare(b.cidr.Addr()); c != 0 {
		return c
	}
	return a.cidr.Bits() - b.cidr.Bits()
}
