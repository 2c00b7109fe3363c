package guest

import (
	"net/netip"
	"unsafe"

	"github.com/allot-ipam/allot/sdk/policy"
	"google.golang.org/protobuf/encoding/protowire"
)

// arena keeps a decoded request's allocations few. Allocation is the dominant cost of Go
// code in a wasm guest (a small allocation costs on the order of a microsecond under
// wazero, against tens of nanoseconds natively), so instead of one allocation per string
// and per repeated field the decoder:
//
//   - copies the request once into a private buffer and makes every string a view of it
//     (the buffer is never written again, so the strings are as immutable as any Go
//     string, and they stay valid after the call: the collector keeps the buffer alive);
//   - carves every repeated string field, CIDR list and label selector of a request out of
//     a few shared chunks, each carved slice with cap == len so that a policy appending to
//     one cannot overwrite its neighbour.
//
// Maps are still allocated one by one (they must be real Go maps), pre-sized.
type arena struct {
	src  []byte
	strs []string
	pfxs []netip.Prefix
	sels []policy.LabelSelector
}

const chunk = 128

func newArena(req []byte) *arena {
	return &arena{src: append([]byte(nil), req...)}
}

// str returns b, which must lie within a.src, as a string without copying.
func (a *arena) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// strings returns an empty slice with room for exactly n strings (nil for n == 0).
func (a *arena) strings(n int) []string {
	if n == 0 {
		return nil
	}
	if len(a.strs) < n {
		a.strs = make([]string, max(n, chunk))
	}
	out := a.strs[:0:n]
	a.strs = a.strs[n:]
	return out
}

func (a *arena) prefixes(n int) []netip.Prefix {
	if n == 0 {
		return nil
	}
	if len(a.pfxs) < n {
		a.pfxs = make([]netip.Prefix, max(n, chunk))
	}
	out := a.pfxs[:0:n]
	a.pfxs = a.pfxs[n:]
	return out
}

func (a *arena) selector() *policy.LabelSelector {
	if len(a.sels) == 0 {
		a.sels = make([]policy.LabelSelector, chunk/4)
	}
	s := &a.sels[0]
	a.sels = a.sels[1:]
	return s
}

// fieldCounts counts the occurrences of each field number below 32 in one message, so
// repeated fields and maps can be sized before decoding. Malformed input stops the count;
// the decoder then reports it.
type fieldCounts [32]int

func countFields(b []byte) (c fieldCounts) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return c
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return c
		}
		b = b[m:]
		if num < 32 {
			c[num]++
		}
	}
	return c
}
