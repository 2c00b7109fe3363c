package allocator

import (
	"fmt"
	"net/netip"
)

// PeekNext returns the address AllocateNext would hand out now, changing nothing (not even
// the next-fit cursor): a dry run (allotctl explain --dry-run) names the very address the next
// ADD would get.
func (p *Pool) PeekNext() (netip.Addr, error) {
	if p.used >= p.usable {
		return netip.Addr{}, fmt.Errorf("allocator: pool %q: %w (%d of %d in use)", p.name, ErrExhausted, p.used, p.usable)
	}
	si, o := p.curSpan, p.curOff
	for range len(p.spans) + 1 {
		s := &p.spans[si]
		if s.used < s.usable {
			if off, _, ok := s.findFree(o); ok {
				return s.base.Add64(off).Addr(p.is4), nil
			}
		}
		si, o = (si+1)%len(p.spans), 0
	}
	return netip.Addr{}, fmt.Errorf("allocator: pool %q: internal error: counters say %d free but none found: %w",
		p.name, p.usable-p.used, ErrExhausted)
}

// CanAllocate says whether Allocate(a) would succeed now, with the error it would return,
// changing nothing.
func (p *Pool) CanAllocate(a netip.Addr) error {
	si, off, ok := p.find(a)
	if !ok {
		return p.outOfRange("allocate", a)
	}
	s := &p.spans[si]
	if s.isExcluded(off) {
		return fmt.Errorf("allocator: pool %q: allocate %s: %s: %w", p.name, a, p.excludedReason(s, off, a), ErrExcluded)
	}
	if c := s.chunk(off >> chunkShift); c != nil && c.isSet(off&chunkMask) {
		return fmt.Errorf("allocator: pool %q: allocate %s: %w", p.name, a, ErrInUse)
	}
	return nil
}
