package allocator

import (
	"cmp"
	"math/bits"
	"slices"
)

const (
	chunkShift = 12
	chunkSize  = 1 << chunkShift // addresses per chunk
	chunkMask  = chunkSize - 1
	chunkWords = chunkSize / 64 // 64 words: one summary word covers them all
)

// chunk is the bitmap of chunkSize consecutive offsets of one span.
// A set bit means "not available": allocated, or fixed (excluded, reserved,
// or past the end of the span). Fixed bits are stamped in when the chunk is
// materialized, so the search inside a chunk never consults the exclusion
// list; alloc counts only allocations so Stats stay exact.
type chunk struct {
	bits    [chunkWords]uint64
	nonFull uint64 // bit w set <=> bits[w] has a zero bit (second bitmap level)
	alloc   uint16 // allocated addresses in this chunk
	fixed   uint16 // unavailable-by-configuration addresses in this chunk
}

func (c *chunk) full() bool { return int(c.alloc)+int(c.fixed) == chunkSize }

func (c *chunk) isSet(b uint64) bool { return c.bits[b>>6]&(1<<(b&63)) != 0 }

func (c *chunk) set(b uint64) {
	w := b >> 6
	c.bits[w] |= 1 << (b & 63)
	if c.bits[w] == ^uint64(0) {
		c.nonFull &^= 1 << w
	}
}

func (c *chunk) clear(b uint64) {
	w := b >> 6
	c.bits[w] &^= 1 << (b & 63)
	c.nonFull |= 1 << w
}

// findZero returns the first clear bit at index >= from: O(1) thanks to the
// nonFull summary word.
func (c *chunk) findZero(from uint64) (uint64, bool) {
	w := from >> 6
	if x := ^c.bits[w] & (^uint64(0) << (from & 63)); x != 0 {
		return w<<6 | uint64(bits.TrailingZeros64(x)), true
	}
	if w == chunkWords-1 {
		return 0, false
	}
	s := c.nonFull & (^uint64(0) << (w + 1))
	if s == 0 {
		return 0, false
	}
	w = uint64(bits.TrailingZeros64(s))
	return w<<6 | uint64(bits.TrailingZeros64(^c.bits[w])), true
}

// reset prepares a (recycled) chunk to cover chunk index ci of span s:
// clears it and stamps the fixed bits.
func (c *chunk) reset(s *span, ci uint64) {
	*c = chunk{}
	lo := ci << chunkShift
	hi := lo | chunkMask
	if hi > s.last { // only the last chunk of a small span is partial
		c.markBits(s.last-lo+1, chunkMask)
		hi = s.last
	}
	for i := s.excl.search(lo); i < len(s.excl) && s.excl[i].lo <= hi; i++ {
		iv := s.excl[i]
		c.markBits(max(iv.lo, lo)-lo, min(iv.hi, hi)-lo)
	}
	n := 0
	for w, x := range c.bits {
		n += bits.OnesCount64(x)
		if x != ^uint64(0) {
			c.nonFull |= 1 << uint(w)
		}
	}
	c.fixed = uint16(n)
}

// markBits sets bits a..b inclusive (0 <= a <= b < chunkSize) word by word.
func (c *chunk) markBits(a, b uint64) {
	for a <= b {
		w := a >> 6
		end := min(b, w<<6|63)
		n := end - a + 1
		var m uint64
		if n == 64 {
			m = ^uint64(0)
		} else {
			m = (1<<n - 1) << (a & 63)
		}
		c.bits[w] |= m
		a = end + 1
	}
}

// interval is an inclusive range of uint64 offsets (or chunk indices).
type interval struct{ lo, hi uint64 }

// intervals is sorted, disjoint and non-adjacent (merged).
type intervals []interval

// search returns the index of the first interval with hi >= x.
func (v intervals) search(x uint64) int {
	lo, hi := 0, len(v)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if v[m].hi < x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// find returns the interval containing x.
func (v intervals) find(x uint64) (interval, bool) {
	if i := v.search(x); i < len(v) && v[i].lo <= x {
		return v[i], true
	}
	return interval{}, false
}

// insert adds the single point x (not yet present), merging neighbours.
func (v *intervals) insert(x uint64) {
	s := *v
	i := s.search(x)
	left := i > 0 && s[i-1].hi+1 == x
	right := i < len(s) && x+1 == s[i].lo
	switch {
	case left && right:
		s[i-1].hi = s[i].hi
		*v = append(s[:i], s[i+1:]...)
	case left:
		s[i-1].hi = x
	case right:
		s[i].lo = x
	default:
		s = append(s, interval{})
		copy(s[i+1:], s[i:])
		s[i] = interval{x, x}
		*v = s
	}
}

// remove deletes the single point x (present), splitting its interval.
func (v *intervals) remove(x uint64) {
	s := *v
	i := s.search(x)
	iv := s[i]
	switch {
	case iv.lo == x && iv.hi == x:
		*v = append(s[:i], s[i+1:]...)
	case iv.lo == x:
		s[i].lo++
	case iv.hi == x:
		s[i].hi--
	default:
		s[i].hi = x - 1
		s = append(s, interval{})
		copy(s[i+2:], s[i+1:])
		s[i+1] = interval{x + 1, iv.hi}
		*v = s
	}
}

// mergeIntervals sorts and merges overlapping or adjacent intervals.
func mergeIntervals(in []interval) intervals {
	if len(in) == 0 {
		return nil
	}
	s := slices.Clone(in)
	slices.SortFunc(s, func(a, b interval) int { return cmp.Compare(a.lo, b.lo) })
	out := intervals{s[0]}
	for _, iv := range s[1:] {
		last := &out[len(out)-1]
		if last.hi == ^uint64(0) || iv.lo <= last.hi+1 {
			last.hi = max(last.hi, iv.hi)
			continue
		}
		out = append(out, iv)
	}
	return out
}
