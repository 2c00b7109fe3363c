// Package addrset is a set of IP addresses of one family held as sorted, merged, inclusive
// ranges. Shared pools are written as lists of single addresses and "a-b" ranges, with
// exclusions and cluster-wide reservations taken away; this package turns those lists into
// one canonical value that can be counted, indexed, compared and printed back, so the agents,
// the operator and the admission webhook all compute the same usable addresses.
package addrset

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/allot-ipam/allot/core/internal/addrmath"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Range is an inclusive range of addresses of one family (From <= To): allot's one range
// type, also the allocator's exclusions (allocator.Config.Exclude).
type Range struct{ From, To netip.Addr }

// String is "a" for a single address, else "a-b".
func (r Range) String() string {
	if r.From == r.To {
		return r.From.String()
	}
	return r.From.String() + "-" + r.To.String()
}

// Contains reports whether a lies in r (same family, From <= a <= To).
func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() == r.From.Is4() && r.From.Compare(a) <= 0 && a.Compare(r.To) <= 0
}

// size is the number of addresses in r as a 128-bit count; the whole IPv6 space (2^128)
// saturates to 2^128-1.
func (r Range) size() addrmath.U128 {
	d := addrmath.FromAddr(r.To).Sub(addrmath.FromAddr(r.From))
	if d.Hi == ^uint64(0) && d.Lo == ^uint64(0) {
		return d
	}
	return d.Add64(1)
}

// Set is an immutable set of addresses of one family. The zero value is the empty set of
// no particular family; it combines with a set of either family.
type Set struct {
	fam    policy.Family
	ranges []Range // sorted, disjoint, not adjacent
}

// Family is the set's family ("" for an empty set built without one).
func (s Set) Family() policy.Family { return s.fam }

// Empty reports whether s holds no address.
func (s Set) Empty() bool { return len(s.ranges) == 0 }

// Ranges returns the set's ranges in ascending order (a copy).
func (s Set) Ranges() []Range { return append([]Range(nil), s.ranges...) }

// Strings renders the set as "a" / "a-b" entries, the form Parse reads.
func (s Set) Strings() []string {
	out := make([]string, len(s.ranges))
	for i, r := range s.ranges {
		out[i] = r.String()
	}
	return out
}

// String joins Strings with commas.
func (s Set) String() string { return strings.Join(s.Strings(), ",") }

func famOf(a netip.Addr) policy.Family {
	if a.Is4() {
		return policy.IPv4
	}
	return policy.IPv6
}

// parseAddr accepts an address of fam in canonical or any standard form; an IPv4-mapped IPv6
// address is refused in an IPv6 set (it would alias an IPv4 address) and zones are refused.
func parseAddr(s string, fam policy.Family) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q has a zone; write the address alone", s)
	}
	if a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%q is an IPv4-mapped IPv6 address; write the IPv4 address", s)
	}
	if fam != "" && famOf(a) != fam {
		return netip.Addr{}, fmt.Errorf("%q is not an %s address", s, fam.Label())
	}
	return a, nil
}

// ParseRange reads "a" or "a-b" (inclusive, a <= b) of family fam ("" accepts either; both
// ends must then be of one family).
func ParseRange(s string, fam policy.Family) (Range, error) {
	from, to, isRange := strings.Cut(s, "-")
	a, err := parseAddr(from, fam)
	if err != nil {
		return Range{}, err
	}
	if !isRange {
		return Range{a, a}, nil
	}
	b, err := parseAddr(to, famOf(a))
	if err != nil {
		return Range{}, err
	}
	if b.Less(a) {
		return Range{}, fmt.Errorf("%q: the range ends before it starts", s)
	}
	return Range{a, b}, nil
}

// Parse reads a list of "a" / "a-b" entries of family fam into a set; overlapping and
// adjacent entries merge. An error names the entry as field[i].
func Parse(field string, fam policy.Family, items []string) (Set, error) {
	rs := make([]Range, 0, len(items))
	for i, it := range items {
		r, err := ParseRange(it, fam)
		if err != nil {
			return Set{}, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		rs = append(rs, r)
	}
	return FromRanges(fam, rs), nil
}

// ParseMixed reads entries of either family (a ReservedIP list) into one set per family.
func ParseMixed(field string, items []string) (v4, v6 Set, err error) {
	var r4, r6 []Range
	for i, it := range items {
		r, err := ParseRange(it, "")
		if err != nil {
			return Set{}, Set{}, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		if r.From.Is4() {
			r4 = append(r4, r)
		} else {
			r6 = append(r6, r)
		}
	}
	return FromRanges(policy.IPv4, r4), FromRanges(policy.IPv6, r6), nil
}

// FromPrefix is every address of p.
func FromPrefix(p netip.Prefix) Set {
	p = p.Masked()
	return Set{fam: famOf(p.Addr()), ranges: []Range{{p.Addr(), addrmath.LastOf(p)}}}
}

// FromRanges builds a set from ranges of family fam in any order; overlapping and adjacent
// ranges merge. Ranges of another family are a programming error and panic.
func FromRanges(fam policy.Family, rs []Range) Set {
	if len(rs) == 0 {
		return Set{fam: fam}
	}
	sorted := append([]Range(nil), rs...)
	for _, r := range sorted {
		if famOf(r.From) != fam || famOf(r.To) != fam || r.To.Less(r.From) {
			panic(fmt.Sprintf("addrset: range %s does not belong in an %s set", r, fam))
		}
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].From.Less(sorted[j].From) })
	out := sorted[:1]
	for _, r := range sorted[1:] {
		last := &out[len(out)-1]
		if touches(*last, r) {
			if last.To.Less(r.To) {
				last.To = r.To
			}
			continue
		}
		out = append(out, r)
	}
	return Set{fam: fam, ranges: out}
}

// touches: r starts inside or right after last (last.From <= r.From).
func touches(last, r Range) bool {
	if !last.To.Less(r.From) {
		return true
	}
	next := last.To.Next()
	return next.IsValid() && next == r.From
}

func (s Set) family(o Set) policy.Family {
	if s.fam == "" {
		return o.fam
	}
	if o.fam != "" && o.fam != s.fam && !o.Empty() && !s.Empty() {
		panic(fmt.Sprintf("addrset: mixing an %s set with an %s set", s.fam, o.fam))
	}
	return s.fam
}

// Union is s ∪ o.
func (s Set) Union(o Set) Set {
	fam := s.family(o)
	return FromRanges(fam, append(append([]Range(nil), s.ranges...), o.ranges...))
}

// Intersect is s ∩ o.
func (s Set) Intersect(o Set) Set {
	fam := s.family(o)
	var out []Range
	i, j := 0, 0
	for i < len(s.ranges) && j < len(o.ranges) {
		a, b := s.ranges[i], o.ranges[j]
		lo := a.From
		if lo.Less(b.From) {
			lo = b.From
		}
		hi := a.To
		if b.To.Less(hi) {
			hi = b.To
		}
		if !hi.Less(lo) {
			out = append(out, Range{lo, hi})
		}
		if a.To.Less(b.To) {
			i++
		} else {
			j++
		}
	}
	return Set{fam: fam, ranges: out}
}

// Subtract is s \ o.
func (s Set) Subtract(o Set) Set {
	fam := s.family(o)
	var out []Range
	j := 0
	for _, r := range s.ranges {
		cur := r
		alive := true
		for j < len(o.ranges) && o.ranges[j].To.Less(cur.From) {
			j++
		}
		for k := j; alive && k < len(o.ranges) && !cur.To.Less(o.ranges[k].From); k++ {
			x := o.ranges[k]
			if cur.From.Less(x.From) {
				out = append(out, Range{cur.From, x.From.Prev()})
			}
			if x.To.Less(cur.To) {
				cur.From = x.To.Next()
			} else {
				alive = false
			}
		}
		if alive {
			out = append(out, cur)
		}
	}
	return Set{fam: fam, ranges: out}
}

// Overlaps reports whether s and o share an address.
func (s Set) Overlaps(o Set) bool {
	if s.Empty() || o.Empty() || (s.fam != "" && o.fam != "" && s.fam != o.fam) {
		return false
	}
	return !s.Intersect(o).Empty()
}

// search returns the index of the first range whose To is >= a.
func (s Set) search(a netip.Addr) int {
	return sort.Search(len(s.ranges), func(i int) bool { return !s.ranges[i].To.Less(a) })
}

// Contains reports whether a is in s.
func (s Set) Contains(a netip.Addr) bool {
	i := s.search(a)
	return i < len(s.ranges) && !a.Less(s.ranges[i].From)
}

// Size is the number of addresses in s, saturating at the largest uint64.
func (s Set) Size() uint64 {
	var n addrmath.U128
	for _, r := range s.ranges {
		n = n.Add(r.size())
		if n.Hi != 0 {
			return ^uint64(0)
		}
	}
	return n.Lo
}

// Nth returns the i-th address of s in ascending order (from 0), false past the end.
func (s Set) Nth(i uint64) (netip.Addr, bool) {
	for _, r := range s.ranges {
		sz := r.size()
		if sz.Hi != 0 || i < sz.Lo {
			return addrmath.FromAddr(r.From).Add64(i).Addr(r.From.Is4()), true
		}
		i -= sz.Lo
	}
	return netip.Addr{}, false
}

// Index returns the position of a in s (the inverse of Nth), false if a is not in s or its
// position does not fit a uint64.
func (s Set) Index(a netip.Addr) (uint64, bool) {
	var before addrmath.U128
	for _, r := range s.ranges {
		if a.Less(r.From) {
			return 0, false
		}
		if !r.To.Less(a) {
			n := before.Add(addrmath.FromAddr(a).Sub(addrmath.FromAddr(r.From)))
			return n.Lo, n.Hi == 0
		}
		before = before.Add(r.size())
	}
	return 0, false
}

// Each calls fn for every address of s from the i-th on, in ascending order, wrapping
// around to the start, until fn returns false or every address was visited once. It is how
// allocators scan for a free address from a spread-out starting point.
func (s Set) Each(start uint64, fn func(netip.Addr) bool) {
	size := s.Size()
	if size == 0 {
		return
	}
	start %= size
	a, _ := s.Nth(start)
	ri := s.search(a)
	for n := uint64(0); n < size; n++ {
		if !fn(a) {
			return
		}
		if a == s.ranges[ri].To {
			ri = (ri + 1) % len(s.ranges)
			a = s.ranges[ri].From
		} else {
			a = a.Next()
		}
	}
}

// Prefixes is s as the fewest CIDRs, in address order: each range split greedily into the
// largest aligned prefixes it holds. An aligned block lies inside s only if it lies inside one
// of them (aligned blocks nest or are disjoint), which is what carving per-node blocks around
// reserved ranges relies on.
func (s Set) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, r := range s.ranges {
		a := r.From
		for {
			bitLen := a.BitLen()
			p := netip.PrefixFrom(a, bitLen)
			// The shortest prefix starting at a (aligned) that ends at or before r.To.
			for bits := 0; bits < bitLen; bits++ {
				q := netip.PrefixFrom(a, bits)
				if q.Masked().Addr() == a && !r.To.Less(addrmath.LastOf(q)) {
					p = q
					break
				}
			}
			out = append(out, p)
			last := addrmath.LastOf(p)
			if last == r.To {
				break
			}
			a = last.Next()
		}
	}
	return out
}
