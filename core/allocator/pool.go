package allocator

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/allot-ipam/allot/core/addrset"
	"github.com/allot-ipam/allot/core/internal/addrmath"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Config describes one pool.
type Config struct {
	// Name identifies the pool in error messages; required.
	Name string
	// CIDRs are the pool's prefixes: at least one, all of one family, masked,
	// not overlapping. They need not be contiguous.
	CIDRs []netip.Prefix
	// Exclude lists addresses that are never handed out. Each range must lie
	// inside the pool's CIDRs (it may cross from one CIDR into an adjacent
	// one). Overlapping ranges are allowed and merged.
	Exclude []addrset.Range
	// Gateway, if set, is never handed out. It must be inside a CIDR and may
	// not be an IPv4 network or broadcast address.
	Gateway netip.Addr
	// Family (policy.IPv4 or policy.IPv6) lets a pool start with no CIDR at
	// all: CIDRs are then added and removed at run time (AddCIDR, RemoveCIDR),
	// as a node's blocks arrive and leave. With CIDRs given it is optional and
	// must match them.
	Family policy.Family
}

// Stats is a snapshot of a pool's counters.
type Stats struct {
	// Usable is the number of addresses that can ever be handed out: CIDR
	// sizes minus exclusions, network/broadcast and gateway. It saturates at
	// math.MaxUint64 (an IPv6 /64 alone holds 2^64).
	Usable uint64
	// Used is the number of addresses allocated now.
	Used uint64
	// Free is Usable - Used.
	Free uint64
}

// Utilization returns Used/Usable in [0, 1]. A pool with nothing usable
// reports 1: it cannot hand out anything, which is what alerts care about.
func (s Stats) Utilization() float64 {
	if s.Usable == 0 {
		return 1
	}
	return float64(s.Used) / float64(s.Usable)
}

const maxSpare = 4 // recycled chunks kept to make materialization allocation-free

// span is one CIDR as a run of uint64 offsets from its first address.
type span struct {
	prefix    netip.Prefix
	base      addrmath.U128
	last      uint64     // last usable offset: 2^hostbits-1, capped at 2^64-1
	lastChunk uint64     // last >> chunkShift
	ends      bool       // IPv4 <= /30: offsets 0 and last are network and broadcast
	anycast   bool       // IPv6 <= /126: offset 0 is the subnet-router anycast address (RFC 4291 2.6.1)
	gw        netip.Addr // the block's own gateway (AddCIDRWithGateway), never handed out
	excl      intervals
	usable    uint64 // saturating
	used      uint64
	chunks    map[uint64]*chunk // materialized chunks, by chunk index; lookups only, never ranged for results
	hot       *chunk            // one-entry cache in front of chunks: most operations hit the same chunk
	hotCI     uint64
	full      intervals // runs of chunk indices whose chunk is materialized and full
}

// Pool allocates addresses from a set of CIDRs. It is NOT safe for concurrent
// use: the caller (core/ipam) serializes access with its own lock.
type Pool struct {
	name     string
	is4      bool
	spans    []span // sorted by base address
	usable   uint64
	used     uint64
	excludes []addrset.Range // as configured, for error messages
	gateway  netip.Addr

	// next-fit cursor: the search for AllocateNext starts here.
	curSpan int
	curOff  uint64

	// idle is the most recently emptied chunk, kept materialized so that an
	// allocate/release ping-pong does not churn the map; at most one empty
	// chunk is ever kept.
	idle     *chunk
	idleSpan int
	idleCI   uint64
	spare    []*chunk
}

// New validates cfg and builds an empty pool. Errors name the offending field.
func New(cfg Config) (*Pool, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("allocator: Name: must not be empty")
	}
	errf := func(format string, args ...any) error {
		return fmt.Errorf("allocator: pool %q: "+format, append([]any{cfg.Name}, args...)...)
	}
	if cfg.Family != "" && !cfg.Family.Valid() {
		return nil, errf("Family: %q is not %q or %q", cfg.Family, policy.IPv4, policy.IPv6)
	}
	if len(cfg.CIDRs) == 0 {
		if cfg.Family == "" {
			return nil, errf("CIDRs: at least one CIDR is required (or set Family for a pool whose CIDRs come at run time)")
		}
		if len(cfg.Exclude) > 0 || cfg.Gateway.IsValid() {
			return nil, errf("Exclude/Gateway: a pool without CIDRs can have neither")
		}
		return &Pool{name: cfg.Name, is4: cfg.Family == policy.IPv4}, nil
	}
	is4, err := checkCIDRs(cfg, errf)
	if err != nil {
		return nil, err
	}
	p := &Pool{name: cfg.Name, is4: is4, excludes: slices.Clone(cfg.Exclude), gateway: cfg.Gateway}

	prefixes := slices.Clone(cfg.CIDRs)
	slices.SortFunc(prefixes, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	excl := make([][]interval, len(prefixes))
	p.spans = make([]span, len(prefixes))
	for i, pf := range prefixes {
		excl[i] = initSpan(&p.spans[i], pf, is4)
	}
	for i, r := range cfg.Exclude {
		if err := p.exclude(excl, i, r, errf); err != nil {
			return nil, err
		}
	}
	if g := cfg.Gateway; g.IsValid() {
		if err := p.excludeGateway(excl, g, errf); err != nil {
			return nil, err
		}
	}
	for i := range p.spans {
		p.spans[i].finish(excl[i])
	}
	p.recount()
	return p, nil
}

// checkCIDRs checks cfg.CIDRs (valid, masked, one family, disjoint) against cfg.Family and
// returns whether the pool is IPv4.
func checkCIDRs(cfg Config, errf func(string, ...any) error) (bool, error) {
	is4 := cfg.CIDRs[0].Addr().Is4()
	if cfg.Family != "" && is4 != (cfg.Family == policy.IPv4) {
		return false, errf("Family: %s does not match CIDRs[0] %s", cfg.Family, cfg.CIDRs[0])
	}
	for i, c := range cfg.CIDRs {
		switch {
		case !c.IsValid():
			return false, errf("CIDRs[%d]: invalid prefix %q", i, c)
		case c != c.Masked():
			return false, errf("CIDRs[%d] %s: host bits set (did you mean %s?)", i, c, c.Masked())
		case c.Addr().Is4In6():
			return false, errf("CIDRs[%d] %s: IPv4-mapped IPv6 prefixes are not supported; use the IPv4 form", i, c)
		case c.Addr().Is4() != is4:
			return false, errf("CIDRs[%d] %s: family differs from CIDRs[0] %s; a pool holds one family", i, c, cfg.CIDRs[0])
		}
		for j := range i {
			if cfg.CIDRs[j].Overlaps(c) {
				return false, errf("CIDRs[%d] %s overlaps CIDRs[%d] %s", i, c, j, cfg.CIDRs[j])
			}
		}
	}
	return is4, nil
}

// exclude adds Exclude[i] (r) to the exclusions of the spans it covers; every address of it
// must be inside some CIDR.
func (p *Pool) exclude(excl [][]interval, i int, r addrset.Range, errf func(string, ...any) error) error {
	if err := validateRange(r); err != nil {
		return errf("Exclude[%d]: %v", i, err)
	}
	if r.From.Is4() != p.is4 {
		return errf("Exclude[%d] %s: family differs from the pool's (%s)", i, r, p.Family().Label())
	}
	cur, to := addrmath.FromAddr(r.From), addrmath.FromAddr(r.To)
	for {
		si := p.spanOf(cur)
		if si < 0 {
			return errf("Exclude[%d] %s: %s is not inside any CIDR of the pool", i, r, cur.Addr(p.is4))
		}
		s := &p.spans[si]
		end := addrmath.FromAddr(addrmath.LastOf(s.prefix))
		if to.Cmp(end) < 0 {
			end = to
		}
		if iv, ok := clip(cur, end, s.base, end, s.last); ok {
			excl[si] = append(excl[si], iv)
		}
		if end == to {
			return nil
		}
		cur = end.Add64(1)
	}
}

// excludeGateway keeps the gateway g from being handed out; it may not be an address the
// span reserves already (network, broadcast, subnet-router anycast).
func (p *Pool) excludeGateway(excl [][]interval, g netip.Addr, errf func(string, ...any) error) error {
	if g.Zone() != "" || g.Is4() != p.is4 {
		return errf("Gateway %s: must be an unzoned %s address", g, p.Family().Label())
	}
	u := addrmath.FromAddr(g)
	si := p.spanOf(u)
	if si < 0 {
		return errf("Gateway %s: not inside any CIDR of the pool", g)
	}
	s := &p.spans[si]
	if d := u.Sub(s.base); d.Hi == 0 && d.Lo <= s.last {
		if s.ends && (d.Lo == 0 || d.Lo == s.last) {
			return errf("Gateway %s: is the network or broadcast address of %s", g, s.prefix)
		}
		if s.anycast && d.Lo == 0 {
			return errf("Gateway %s: is the subnet-router anycast address of %s", g, s.prefix)
		}
		excl[si] = append(excl[si], interval{d.Lo, d.Lo})
	}
	return nil
}

// initSpan sets up s for prefix pf and returns its built-in exclusions
// (network/broadcast, subnet-router anycast).
func initSpan(s *span, pf netip.Prefix, is4 bool) []interval {
	var excl []interval
	hostBits := pf.Addr().BitLen() - pf.Bits()
	s.prefix = pf
	s.base = addrmath.FromAddr(pf.Addr())
	s.last = addrmath.HostMask(min(hostBits, 64)).Lo
	s.lastChunk = s.last >> chunkShift
	if is4 && hostBits >= 2 {
		s.ends = true
		excl = append(excl, interval{0, 0}, interval{s.last, s.last})
	}
	// Routers on the link answer the subnet-router anycast address, so a pod holding it
	// would be unreachable; /127 and /128 (RFC 6164 point-to-point) have no such address.
	if !is4 && hostBits >= 2 {
		s.anycast = true
		excl = append(excl, interval{0, 0})
	}
	return excl
}

// finish merges the span's exclusions and counts its usable addresses.
func (s *span) finish(excl []interval) {
	s.excl = mergeIntervals(excl)
	n := addrmath.U128{Lo: s.last}.Add64(1)
	for _, iv := range s.excl {
		n = n.Sub(addrmath.U128{Lo: iv.hi - iv.lo}.Add64(1))
	}
	s.usable = n.Sat64()
}

// recount sets the pool's usable and used counters from its spans (saturating).
func (p *Pool) recount() {
	p.usable, p.used = 0, 0
	for i := range p.spans {
		s := &p.spans[i]
		if p.usable+s.usable < p.usable {
			p.usable = ^uint64(0)
		} else {
			p.usable += s.usable
		}
		p.used += s.used
	}
}

// spanOf returns the index of the span whose whole prefix contains u, or -1.
// (Unlike find, it accepts addresses beyond the first 2^64 of a prefix.)
func (p *Pool) spanOf(u addrmath.U128) int {
	i := p.spanBefore(u)
	if i < 0 || addrmath.FromAddr(addrmath.LastOf(p.spans[i].prefix)).Cmp(u) < 0 {
		return -1
	}
	return i
}

// spanBefore returns the index of the last span with base <= u, or -1.
func (p *Pool) spanBefore(u addrmath.U128) int {
	lo, hi := 0, len(p.spans)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if p.spans[m].base.Cmp(u) <= 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// find maps an address to (span index, offset); ok is false when the address
// is not an allocatable position of the pool (wrong family, outside every
// CIDR, or beyond the first 2^64 addresses of a huge prefix).
func (p *Pool) find(a netip.Addr) (si int, off uint64, ok bool) {
	if !a.IsValid() || a.Is4() != p.is4 || a.Zone() != "" {
		return 0, 0, false
	}
	u := addrmath.FromAddr(a)
	si = p.spanBefore(u)
	if si < 0 {
		return 0, 0, false
	}
	d := u.Sub(p.spans[si].base)
	if d.Hi != 0 || d.Lo > p.spans[si].last {
		return 0, 0, false
	}
	return si, d.Lo, true
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// Family returns the pool's family.
func (p *Pool) Family() policy.Family {
	if p.is4 {
		return policy.IPv4
	}
	return policy.IPv6
}

// Contains reports whether a is inside one of the pool's CIDRs (whether or
// not it can be handed out).
func (p *Pool) Contains(a netip.Addr) bool {
	if !a.IsValid() || a.Is4() != p.is4 {
		return false
	}
	i := p.spanBefore(addrmath.FromAddr(a))
	return i >= 0 && p.spans[i].prefix.Contains(a)
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	return Stats{Usable: p.usable, Used: p.used, Free: p.usable - p.used}
}

// AllocateNext hands out the next free address at or after the next-fit
// cursor (just after the previous AllocateNext result), wrapping around the
// pool once. Released addresses are therefore reused as late as possible.
func (p *Pool) AllocateNext() (netip.Addr, error) {
	si, off, c, err := p.nextFree()
	if err != nil {
		return netip.Addr{}, err
	}
	s := &p.spans[si]
	p.take(si, s, off, c)
	if off == s.last {
		p.curSpan, p.curOff = (si+1)%len(p.spans), 0
	} else {
		p.curSpan, p.curOff = si, off+1
	}
	return s.base.Add64(off).Addr(p.is4), nil
}

// nextFree finds the next free position at or after the next-fit cursor, wrapping around
// the pool once, and changes nothing (AllocateNext takes it, PeekNext only names it).
func (p *Pool) nextFree() (si int, off uint64, c *chunk, err error) {
	if p.used >= p.usable {
		return 0, 0, nil, fmt.Errorf("allocator: pool %q: %w (%d of %d in use)", p.name, ErrExhausted, p.used, p.usable)
	}
	si, o := p.curSpan, p.curOff
	for range len(p.spans) + 1 { // +1: the start span again, from offset 0
		s := &p.spans[si]
		if s.used < s.usable {
			if off, c, ok := s.findFree(o); ok {
				return si, off, c, nil
			}
		}
		si, o = (si+1)%len(p.spans), 0
	}
	// Unreachable while the counters are right; fail loudly rather than loop.
	return 0, 0, nil, fmt.Errorf("allocator: pool %q: internal error: counters say %d free but none found: %w",
		p.name, p.usable-p.used, ErrExhausted)
}

// chunk returns the materialized chunk ci, or nil.
func (s *span) chunk(ci uint64) *chunk {
	if s.hot != nil && s.hotCI == ci {
		return s.hot
	}
	c := s.chunks[ci]
	if c != nil {
		s.hot, s.hotCI = c, ci
	}
	return c
}

// findFree returns the first available offset >= o in the span, and its
// chunk if materialized. Full chunks are skipped a run at a time (s.full),
// excluded offsets an interval at a time (s.excl), so the cost does not grow
// with the size of full or excluded regions.
func (s *span) findFree(o uint64) (off uint64, c *chunk, ok bool) {
	for {
		ci := o >> chunkShift
		if c = s.chunk(ci); c != nil {
			if !c.full() {
				if b, ok := c.findZero(o & chunkMask); ok {
					return ci<<chunkShift | b, c, true
				}
			} else if r, ok := s.full.find(ci); ok {
				ci = r.hi
			}
			if ci >= s.lastChunk {
				return 0, nil, false
			}
			o = (ci + 1) << chunkShift
			continue
		}
		// Not materialized: everything not excluded is free.
		if iv, ok := s.excl.find(o); ok {
			if iv.hi >= s.last {
				return 0, nil, false
			}
			o = iv.hi + 1
			if o>>chunkShift != ci {
				continue
			}
		}
		return o, nil, true
	}
}

func (s *span) isExcluded(off uint64) bool {
	_, ok := s.excl.find(off)
	return ok
}

// take marks off (known available) as allocated.
func (p *Pool) take(si int, s *span, off uint64, c *chunk) {
	ci := off >> chunkShift
	if c == nil {
		c = p.materialize(s, ci)
	}
	c.set(off & chunkMask)
	c.alloc++
	if c.full() {
		s.full.insert(ci)
	}
	s.used++
	p.used++
}

func (p *Pool) materialize(s *span, ci uint64) *chunk {
	var c *chunk
	if n := len(p.spare); n > 0 {
		c, p.spare = p.spare[n-1], p.spare[:n-1]
	} else {
		c = new(chunk)
	}
	c.reset(s, ci)
	if s.chunks == nil {
		s.chunks = make(map[uint64]*chunk)
	}
	s.chunks[ci] = c
	s.hot, s.hotCI = c, ci
	return c
}

// retire is called when chunk c becomes empty. It stays materialized as the
// idle chunk; the previous idle chunk, if still empty, is dropped.
func (p *Pool) retire(si int, ci uint64, c *chunk) {
	if old := p.idle; old != nil && old != c && old.alloc == 0 {
		s := &p.spans[p.idleSpan]
		delete(s.chunks, p.idleCI)
		if s.hot == old {
			s.hot = nil
		}
		if len(p.spare) < maxSpare {
			p.spare = append(p.spare, old)
		}
	}
	p.idle, p.idleSpan, p.idleCI = c, si, ci
}

// Allocate takes a specific address.
func (p *Pool) Allocate(a netip.Addr) error {
	si, off, c, err := p.takeable(a)
	if err != nil {
		return err
	}
	p.take(si, &p.spans[si], off, c)
	return nil
}

// takeable finds a's position if a can be taken, or the error Allocate returns; it changes
// nothing (Allocate takes it, CanAllocate only asks).
func (p *Pool) takeable(a netip.Addr) (si int, off uint64, c *chunk, err error) {
	si, off, ok := p.find(a)
	if !ok {
		return 0, 0, nil, p.outOfRange("allocate", a)
	}
	s := &p.spans[si]
	if s.isExcluded(off) {
		return 0, 0, nil, fmt.Errorf("allocator: pool %q: allocate %s: %s: %w", p.name, a, p.excludedReason(s, off, a), ErrExcluded)
	}
	c = s.chunk(off >> chunkShift)
	if c != nil && c.isSet(off&chunkMask) {
		return 0, 0, nil, fmt.Errorf("allocator: pool %q: allocate %s: %w", p.name, a, ErrInUse)
	}
	return si, off, c, nil
}

// Release returns an address to the pool. Releasing an address that is not
// held returns ErrNotAllocated; one outside the pool returns ErrOutOfRange.
func (p *Pool) Release(a netip.Addr) error {
	si, off, ok := p.find(a)
	if !ok {
		return p.outOfRange("release", a)
	}
	s := &p.spans[si]
	ci, b := off>>chunkShift, off&chunkMask
	c := s.chunk(ci)
	if c == nil || !c.isSet(b) {
		return fmt.Errorf("allocator: pool %q: release %s: %w", p.name, a, ErrNotAllocated)
	}
	if c.fixed != 0 && s.isExcluded(off) { // a fixed bit, never allocated
		return fmt.Errorf("allocator: pool %q: release %s: %s: %w", p.name, a, p.excludedReason(s, off, a), ErrNotAllocated)
	}
	if c.full() {
		s.full.remove(ci)
	}
	c.clear(b)
	c.alloc--
	s.used--
	p.used--
	if c.alloc == 0 {
		p.retire(si, ci, c)
	}
	return nil
}

// IsAllocated reports whether a is currently allocated.
func (p *Pool) IsAllocated(a netip.Addr) bool {
	si, off, ok := p.find(a)
	if !ok {
		return false
	}
	s := &p.spans[si]
	c := s.chunk(off >> chunkShift)
	return c != nil && c.isSet(off&chunkMask) && (c.fixed == 0 || !s.isExcluded(off))
}

// ForEachAllocated calls fn for every allocated address in ascending order
// until fn returns false. fn must not modify the pool.
func (p *Pool) ForEachAllocated(fn func(netip.Addr) bool) {
	for si := range p.spans {
		s := &p.spans[si]
		if s.used == 0 {
			continue
		}
		keys := make([]uint64, 0, len(s.chunks))
		for ci, c := range s.chunks {
			if c.alloc > 0 {
				keys = append(keys, ci)
			}
		}
		slices.Sort(keys) // never depend on map order
		j := 0            // index into s.excl, advanced monotonically
		for _, ci := range keys {
			c := s.chunks[ci]
			for w, x := range c.bits {
				for x != 0 {
					b := uint64(w)<<6 | uint64(bits.TrailingZeros64(x))
					x &= x - 1
					off := ci<<chunkShift | b
					if off > s.last {
						break
					}
					for j < len(s.excl) && s.excl[j].hi < off {
						j++
					}
					if j < len(s.excl) && s.excl[j].lo <= off {
						continue
					}
					if !fn(s.base.Add64(off).Addr(p.is4)) {
						return
					}
				}
			}
		}
	}
}

func (p *Pool) outOfRange(op string, a netip.Addr) error {
	if a.IsValid() && a.Is4() == p.is4 && p.Contains(a) {
		i := p.spanBefore(addrmath.FromAddr(a))
		return fmt.Errorf("allocator: pool %q: %s %s: beyond the first 2^64 addresses of %s, which are the only ones used: %w",
			p.name, op, a, p.spans[i].prefix, ErrOutOfRange)
	}
	return fmt.Errorf("allocator: pool %q: %s %s: not inside any CIDR of the pool: %w", p.name, op, a, ErrOutOfRange)
}

// excludedReason says why offset off of span s is not allocatable.
func (p *Pool) excludedReason(s *span, off uint64, a netip.Addr) string {
	switch {
	case s.ends && off == 0:
		return "network address of " + s.prefix.String()
	case s.ends && off == s.last:
		return "broadcast address of " + s.prefix.String()
	case s.anycast && off == 0:
		return "subnet-router anycast address of " + s.prefix.String()
	case p.gateway == a:
		return "gateway address"
	case s.gw == a:
		return "gateway address of block " + s.prefix.String()
	}
	for i, r := range p.excludes {
		if r.Contains(a) {
			return fmt.Sprintf("excluded by Exclude[%d] %s", i, r)
		}
	}
	return "excluded"
}
