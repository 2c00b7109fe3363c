package allocator

import (
	"fmt"
	"math/bits"
)

// checkInvariants verifies the internal bookkeeping against a recount. Tests
// call it after every operation.
func (p *Pool) checkInvariants() error {
	var used, usable uint64
	empty := 0
	for si := range p.spans {
		s := &p.spans[si]
		var sUsed uint64
		var wantFull []interval
		for ci, c := range s.chunks {
			if ci > s.lastChunk {
				return fmt.Errorf("span %d: chunk %d beyond last chunk %d", si, ci, s.lastChunk)
			}
			var ref chunk
			ref.reset(s, ci)
			if ref.fixed != c.fixed {
				return fmt.Errorf("span %d chunk %d: fixed %d, recount %d", si, ci, c.fixed, ref.fixed)
			}
			n := 0
			for w, x := range c.bits {
				if x&ref.bits[w] != ref.bits[w] {
					return fmt.Errorf("span %d chunk %d word %d: fixed bit cleared", si, ci, w)
				}
				n += bits.OnesCount64(x &^ ref.bits[w])
				if (x != ^uint64(0)) != (c.nonFull&(1<<uint(w)) != 0) {
					return fmt.Errorf("span %d chunk %d word %d: summary bit wrong", si, ci, w)
				}
			}
			if n != int(c.alloc) {
				return fmt.Errorf("span %d chunk %d: alloc %d, recount %d", si, ci, c.alloc, n)
			}
			if c.alloc == 0 {
				empty++
				if c != p.idle {
					return fmt.Errorf("span %d chunk %d: empty but not the idle chunk", si, ci)
				}
			}
			if c.full() {
				wantFull = append(wantFull, interval{ci, ci})
			}
			sUsed += uint64(c.alloc)
		}
		if sUsed != s.used {
			return fmt.Errorf("span %d: used %d, recount %d", si, s.used, sUsed)
		}
		// full must be exactly the merged set of full chunks.
		merged := mergeIntervals(wantFull)
		if len(merged) != len(s.full) {
			return fmt.Errorf("span %d: full runs %v, want %v", si, s.full, merged)
		}
		for i := range merged {
			if merged[i] != s.full[i] {
				return fmt.Errorf("span %d: full runs %v, want %v", si, s.full, merged)
			}
		}
		used += s.used
		usable += s.usable
	}
	if empty > 1 {
		return fmt.Errorf("%d empty chunks materialized, want at most 1", empty)
	}
	if used != p.used {
		return fmt.Errorf("pool used %d, spans sum %d", p.used, used)
	}
	if usable != p.usable && p.usable != ^uint64(0) {
		return fmt.Errorf("pool usable %d, spans sum %d", p.usable, usable)
	}
	if len(p.spans) == 0 {
		if p.curSpan != 0 || p.curOff != 0 || p.used != 0 || p.usable != 0 {
			return fmt.Errorf("empty pool: cursor (%d, %d), used %d, usable %d", p.curSpan, p.curOff, p.used, p.usable)
		}
		return nil
	}
	if p.curSpan < 0 || p.curSpan >= len(p.spans) || p.curOff > p.spans[p.curSpan].last {
		return fmt.Errorf("cursor (%d, %d) out of range", p.curSpan, p.curOff)
	}
	return nil
}

// chunkCount returns the number of materialized chunks (memory tests).
func (p *Pool) chunkCount() int {
	n := 0
	for i := range p.spans {
		n += len(p.spans[i].chunks)
	}
	return n
}
