package allocator

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/allot-ipam/allot/core/internal/addrmath"
)

// CIDRStats is one CIDR's counters.
type CIDRStats struct {
	Prefix netip.Prefix
	// Usable saturates at math.MaxUint64, like Stats.Usable.
	Usable uint64
	Used   uint64
}

// CIDRs returns the pool's CIDRs in address order.
func (p *Pool) CIDRs() []netip.Prefix {
	out := make([]netip.Prefix, len(p.spans))
	for i := range p.spans {
		out[i] = p.spans[i].prefix
	}
	return out
}

// CIDRStats returns the counters of every CIDR, in address order.
func (p *Pool) CIDRStats() []CIDRStats {
	out := make([]CIDRStats, len(p.spans))
	for i := range p.spans {
		s := &p.spans[i]
		out[i] = CIDRStats{Prefix: s.prefix, Usable: s.usable, Used: s.used}
	}
	return out
}

// AddCIDR adds a CIDR to the pool at run time (a block handed to the node). It is
// validated like a CIDR given to New: masked, of the pool's family, not overlapping a CIDR
// of the pool. The pool's configured exclusions and gateway apply to it where they fall
// inside it. Adding a CIDR the pool already has is an error wrapping ErrInUse, so a caller
// cannot mistake a duplicate for a new block.
func (p *Pool) AddCIDR(c netip.Prefix) error { return p.AddCIDRWithGateway(c, netip.Addr{}) }

// AddCIDRWithGateway is AddCIDR with gw, an address of c other than its network, broadcast
// or anycast address, reserved as the block's gateway: never handed out and not counted as
// usable. An invalid gw reserves nothing.
func (p *Pool) AddCIDRWithGateway(c netip.Prefix, gw netip.Addr) error {
	errf := func(format string, args ...any) error {
		return fmt.Errorf("allocator: pool %q: "+format, append([]any{p.name}, args...)...)
	}
	if err := p.checkNewCIDR(c, errf); err != nil {
		return err
	}
	var ns span
	excl := initSpan(&ns, c, p.is4)
	first, last := addrmath.FromAddr(c.Addr()), addrmath.FromAddr(addrmath.LastOf(c))
	for _, r := range p.excludes {
		if r.From.Is4() == p.is4 {
			if iv, ok := clip(addrmath.FromAddr(r.From), addrmath.FromAddr(r.To), first, last, ns.last); ok {
				excl = append(excl, iv)
			}
		}
	}
	if g := p.gateway; g.IsValid() && c.Contains(g) {
		u := addrmath.FromAddr(g)
		if d := u.Sub(first); d.Hi == 0 && d.Lo <= ns.last && !(ns.ends && (d.Lo == 0 || d.Lo == ns.last)) {
			excl = append(excl, interval{d.Lo, d.Lo})
		}
	}
	if gw.IsValid() {
		d := addrmath.FromAddr(gw).Sub(first)
		switch {
		case gw.Is4() != p.is4 || !c.Contains(gw):
			return errf("add CIDR %s: gateway %s is not inside it", c, gw)
		case d.Hi != 0 || d.Lo > ns.last:
			return errf("add CIDR %s: gateway %s is beyond the first 2^64 addresses", c, gw)
		case (ns.ends || ns.anycast) && d.Lo == 0, ns.ends && d.Lo == ns.last:
			return errf("add CIDR %s: gateway %s is its network, broadcast or anycast address", c, gw)
		}
		ns.gw = gw
		excl = append(excl, interval{d.Lo, d.Lo})
	}
	ns.finish(excl)
	p.insertSpan(ns, first)
	p.recount()
	return nil
}

// checkNewCIDR refuses a CIDR that is invalid, of the other family or overlapping one of
// the pool's.
func (p *Pool) checkNewCIDR(c netip.Prefix, errf func(string, ...any) error) error {
	switch {
	case !c.IsValid():
		return errf("add CIDR: invalid prefix %q", c)
	case c != c.Masked():
		return errf("add CIDR %s: host bits set (did you mean %s?)", c, c.Masked())
	case c.Addr().Is4In6():
		return errf("add CIDR %s: IPv4-mapped IPv6 prefixes are not supported; use the IPv4 form", c)
	case c.Addr().Is4() != p.is4:
		return errf("add CIDR %s: not of the pool's family (%s)", c, p.Family().Label())
	}
	for i := range p.spans {
		if o := p.spans[i].prefix; o.Overlaps(c) {
			if o == c {
				return errf("add CIDR %s: already in the pool: %w", c, ErrInUse)
			}
			return errf("add CIDR %s: overlaps %s of the pool", c, o)
		}
	}
	return nil
}

// clip returns the part of the range from-to inside the span first-last, as offsets from
// first capped at spanLast (the span's last offset); false when nothing of it is in the
// span's first 2^64 addresses.
func clip(from, to, first, last addrmath.U128, spanLast uint64) (interval, bool) {
	if to.Cmp(first) < 0 || from.Cmp(last) > 0 {
		return interval{}, false
	}
	if from.Cmp(first) < 0 {
		from = first
	}
	if to.Cmp(last) > 0 {
		to = last
	}
	lo, hi := from.Sub(first), to.Sub(first)
	if lo.Hi != 0 || lo.Lo > spanLast { // beyond the first 2^64: nothing to exclude
		return interval{}, false
	}
	h := spanLast
	if hi.Hi == 0 && hi.Lo < h {
		h = hi.Lo
	}
	return interval{lo.Lo, h}, true
}

// insertSpan puts ns, starting at first, in address order and keeps the cursors on the
// spans they were on.
func (p *Pool) insertSpan(ns span, first addrmath.U128) {
	i, _ := slices.BinarySearchFunc(p.spans, first, func(s span, u addrmath.U128) int { return s.base.Cmp(u) })
	p.spans = slices.Insert(p.spans, i, ns)
	// Span indices at or after i moved up by one.
	if len(p.spans) > 1 && p.curSpan >= i {
		p.curSpan++
	}
	if p.idle != nil && p.idleSpan >= i {
		p.idleSpan++
	}
	if p.curSpan >= len(p.spans) {
		p.curSpan, p.curOff = 0, 0
	}
}

// RemoveCIDR removes a CIDR from the pool (a block the node gives back). It is refused,
// with an error wrapping ErrInUse, while any address of the CIDR is allocated: nothing can
// be handed out from the CIDR once it returns nil, and nothing held in it is forgotten.
// Removing a CIDR the pool does not have wraps ErrOutOfRange.
func (p *Pool) RemoveCIDR(c netip.Prefix) error {
	i := slices.IndexFunc(p.spans, func(s span) bool { return s.prefix == c })
	if i < 0 {
		return fmt.Errorf("allocator: pool %q: remove CIDR %s: not a CIDR of the pool: %w", p.name, c, ErrOutOfRange)
	}
	s := &p.spans[i]
	if s.used > 0 {
		return fmt.Errorf("allocator: pool %q: remove CIDR %s: %d address(es) of it still allocated: %w", p.name, c, s.used, ErrInUse)
	}
	p.dropSpan(i)
	return nil
}

// DropCIDR removes a CIDR from the pool even while addresses of it are allocated, and returns
// how many were. The pool forgets them: whoever holds them (core/ipam's records) keeps
// account of them, and Release of one of them afterwards wraps ErrOutOfRange. It is for a
// block that is no longer the node's (taken away while in use): nothing more may be handed
// out from it. Dropping a CIDR the pool does not have wraps ErrOutOfRange.
func (p *Pool) DropCIDR(c netip.Prefix) (uint64, error) {
	i := slices.IndexFunc(p.spans, func(s span) bool { return s.prefix == c })
	if i < 0 {
		return 0, fmt.Errorf("allocator: pool %q: drop CIDR %s: not a CIDR of the pool: %w", p.name, c, ErrOutOfRange)
	}
	used := p.spans[i].used
	p.dropSpan(i)
	return used, nil
}

// dropSpan removes span i, recycling its chunks.
func (p *Pool) dropSpan(i int) {
	s := &p.spans[i]
	// Recycle its (empty) chunks; the idle chunk may be one of them.
	if p.idle != nil && p.idleSpan == i {
		p.idle = nil
	}
	for _, ch := range s.chunks {
		if len(p.spare) < maxSpare {
			p.spare = append(p.spare, ch)
		}
	}
	p.spans = slices.Delete(p.spans, i, i+1)
	if p.idle != nil && p.idleSpan > i {
		p.idleSpan--
	}
	switch {
	case len(p.spans) == 0:
		p.curSpan, p.curOff = 0, 0
	case p.curSpan == i:
		p.curSpan, p.curOff = i%len(p.spans), 0
	case p.curSpan > i:
		p.curSpan--
	}
	p.recount()
}
