// Package blockalloc carves per-node CIDR blocks out of larger CIDRs (IPPool CIDRs,
// ClusterCIDRConfig CIDRs) and remembers which blocks are taken.
//
// A Set holds non-overlapping prefixes of both families. Blocks of any size can be mixed: a
// block is free when it overlaps no prefix in the set, so configs with overlapping CIDRs or
// different per-node mask sizes never hand out overlapping blocks. Allocation is first fit
// (lowest free aligned block), which keeps the result deterministic for a given set.
//
// core/allocator hands out single addresses from a bitmap; blocks are few and large (a /104
// of /120 blocks is 65,536 blocks, a /48 of /64 blocks as many), so a sorted list of taken
// prefixes with gap search is both smaller and simpler here.
package blockalloc

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/allot-ipam/allot/core/internal/addrmath"
)

var (
	// ErrOverlap: the prefix overlaps a prefix already in the set.
	ErrOverlap = errors.New("blockalloc: overlaps an allocated block")
	// ErrFull: no free block of the requested size is left in the CIDR.
	ErrFull = errors.New("blockalloc: no free block")
	// ErrInvalid: bad prefix or mask size.
	ErrInvalid = errors.New("blockalloc: invalid block request")
)

type span struct {
	start, end addrmath.U128 // inclusive
	p          netip.Prefix
}

// Set is a set of non-overlapping prefixes (taken blocks) of both families. The zero value is
// empty and ready. A Set is not safe for concurrent use.
type Set struct {
	v4, v6 []span // sorted by start; disjoint
}

func toSpan(p netip.Prefix) span {
	start := addrmath.FromAddr(p.Addr())
	size := addrmath.Pow2(p.Addr().BitLen() - p.Bits())
	return span{start: start, end: start.Add(size.Sub(addrmath.One)), p: p}
}

func (s *Set) list(p netip.Prefix) *[]span {
	if p.Addr().Is4() {
		return &s.v4
	}
	return &s.v6
}

func check(p netip.Prefix) error {
	if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
		return fmt.Errorf("%w: prefix %v", ErrInvalid, p)
	}
	if p.Masked() != p {
		return fmt.Errorf("%w: prefix %v has host bits set", ErrInvalid, p)
	}
	return nil
}

// overlapRange returns the index range [i, j) of spans overlapping sp.
func overlapRange(l []span, sp span) (int, int) {
	i, _ := slices.BinarySearchFunc(l, sp.start, func(e span, t addrmath.U128) int { return e.start.Cmp(t) })
	if i > 0 && l[i-1].end.Cmp(sp.start) >= 0 {
		i--
	}
	j := i
	for j < len(l) && l[j].start.Cmp(sp.end) <= 0 {
		j++
	}
	return i, j
}

// Len is the number of prefixes in the set.
func (s *Set) Len() int { return len(s.v4) + len(s.v6) }

// Reserve adds p to the set. It fails with ErrOverlap (naming the prefix in the way) when p
// overlaps a prefix in the set, including p itself.
func (s *Set) Reserve(p netip.Prefix) error {
	if err := check(p); err != nil {
		return err
	}
	l := s.list(p)
	sp := toSpan(p)
	i, j := overlapRange(*l, sp)
	if i != j {
		return fmt.Errorf("%w: %v overlaps %v", ErrOverlap, p, (*l)[i].p)
	}
	*l = slices.Insert(*l, i, sp)
	return nil
}

// Release removes exactly p from the set and reports whether it was there.
func (s *Set) Release(p netip.Prefix) bool {
	if check(p) != nil {
		return false
	}
	l := s.list(p)
	sp := toSpan(p)
	i, j := overlapRange(*l, sp)
	for k := i; k < j; k++ {
		if (*l)[k].p == p {
			*l = slices.Delete(*l, k, k+1)
			return true
		}
	}
	return false
}

// Contains reports whether exactly p is in the set.
func (s *Set) Contains(p netip.Prefix) bool {
	if check(p) != nil {
		return false
	}
	l := *s.list(p)
	i, j := overlapRange(l, toSpan(p))
	for k := i; k < j; k++ {
		if l[k].p == p {
			return true
		}
	}
	return false
}

// Overlapping returns the prefixes in the set that overlap p, in address order.
func (s *Set) Overlapping(p netip.Prefix) []netip.Prefix {
	if check(p) != nil {
		return nil
	}
	l := *s.list(p)
	i, j := overlapRange(l, toSpan(p))
	out := make([]netip.Prefix, 0, j-i)
	for k := i; k < j; k++ {
		out = append(out, l[k].p)
	}
	return out
}

// Prefixes returns every prefix in the set, IPv4 first, each family in address order.
func (s *Set) Prefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, s.Len())
	for _, l := range [][]span{s.v4, s.v6} {
		for _, sp := range l {
			out = append(out, sp.p)
		}
	}
	return out
}

func checkBlock(within netip.Prefix, bits int) error {
	if err := check(within); err != nil {
		return err
	}
	if bits < within.Bits() || bits > within.Addr().BitLen() {
		return fmt.Errorf("%w: mask size %d must be between %d (the prefix length of %v) and %d",
			ErrInvalid, bits, within.Bits(), within, within.Addr().BitLen())
	}
	return nil
}

// FindFree returns the lowest free block of prefix length bits inside within, without taking
// it; ok is false when there is none.
func (s *Set) FindFree(within netip.Prefix, bits int) (p netip.Prefix, ok bool, err error) {
	if err := checkBlock(within, bits); err != nil {
		return netip.Prefix{}, false, err
	}
	l := *s.list(within)
	w := toSpan(within)
	size := addrmath.Pow2(within.Addr().BitLen() - bits)
	mask := size.Sub(addrmath.One)
	last := w.end.Sub(mask) // the highest address a block may start at
	i, j := overlapRange(l, w)
	c := w.start
	for k := i; k <= j; k++ {
		if c.Cmp(last) > 0 {
			return netip.Prefix{}, false, nil
		}
		// c <= last, so rounding c up to the block size cannot pass w.end or overflow.
		cand := c.Add(mask).And(mask.Not())
		if cand.Cmp(last) > 0 {
			return netip.Prefix{}, false, nil
		}
		if k == j || cand.Add(mask).Cmp(l[k].start) < 0 {
			return netip.PrefixFrom(cand.Addr(within.Addr().Is4()), bits), true, nil
		}
		if l[k].end.Cmp(w.end) >= 0 {
			return netip.Prefix{}, false, nil
		}
		if l[k].end.Cmp(c) >= 0 {
			c = l[k].end.Add(addrmath.One)
		}
	}
	return netip.Prefix{}, false, nil
}

// Allocate takes the lowest free block of prefix length bits inside within; ErrFull when there
// is none.
func (s *Set) Allocate(within netip.Prefix, bits int) (netip.Prefix, error) {
	p, ok, err := s.FindFree(within, bits)
	if err != nil {
		return netip.Prefix{}, err
	}
	if !ok {
		return netip.Prefix{}, fmt.Errorf("%w of size /%d in %v", ErrFull, bits, within)
	}
	if err := s.Reserve(p); err != nil {
		return netip.Prefix{}, fmt.Errorf("blockalloc: internal error: free block %v: %w", p, err)
	}
	return p, nil
}

// TotalBlocks is the number of blocks of prefix length bits in within (saturating).
func TotalBlocks(within netip.Prefix, bits int) uint64 {
	if checkBlock(within, bits) != nil {
		return 0
	}
	if bits-within.Bits() >= 64 {
		return ^uint64(0)
	}
	return addrmath.Pow2(bits - within.Bits()).Sat64()
}

// FreeBlocks counts the blocks of prefix length bits inside within that overlap no prefix in
// the set (saturating at 2^64-1).
func (s *Set) FreeBlocks(within netip.Prefix, bits int) uint64 {
	if checkBlock(within, bits) != nil {
		return 0
	}
	l := *s.list(within)
	w := toSpan(within)
	hostBits := within.Addr().BitLen() - bits
	if bits-within.Bits() >= 128 {
		bits-- // ::/0 in /128s: 2^128 blocks do not fit; count 2^127 (saturates anyway)
	}
	total := addrmath.Pow2(bits - within.Bits())
	used := addrmath.U128{}
	i, j := overlapRange(l, w)
	var lastBlock addrmath.U128
	haveLast := false
	for k := i; k < j; k++ {
		sp := l[k]
		if sp.start.Cmp(w.start) <= 0 && sp.end.Cmp(w.end) >= 0 {
			return 0 // a taken prefix covers all of within
		}
		if sp.p.Bits() <= bits {
			used = used.Add(addrmath.Pow2(bits - sp.p.Bits()))
			continue
		}
		// A prefix smaller than a block: count its block once.
		b := sp.start.Shr(hostBits)
		if haveLast && b.Cmp(lastBlock) == 0 {
			continue
		}
		lastBlock, haveLast = b, true
		used = used.Add(addrmath.One)
	}
	if used.Cmp(total) >= 0 {
		return 0
	}
	return total.Sub(used).Sat64()
}
