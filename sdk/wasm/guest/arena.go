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
//   - copies the request into a private buffer and makes every string a view of it. The
//     copies are carved, one after the other, out of blocks of blockSize bytes that are
//     never written again once carved, so the strings are as immutable as any Go string
//     and stay valid after the call (the collector keeps a block alive while any view of
//     it is). A request costs an allocation once per block, not once per call;
//   - carves every repeated string field, CIDR list and label selector of a request out of
//     a few shared chunks, each carved slice with cap == len so that a policy appending to
//     one cannot overwrite its neighbour.
//
// There is one arena per instance (reqArena): the exports run one at a time. Maps are
// still allocated one by one (they must be real Go maps), pre-sized.
type arena struct {
	block []byte // the uncarved rest of the current block
	strs  []string
	pfxs  []netip.Prefix
	sels  []policy.LabelSelector
}

const (
	chunk = 128
	// blockSize is the size of the blocks requests are copied into: a few dozen requests
	// with pool references, while a cache entry pinning an old block keeps at most this
	// much alive.
	blockSize = 16 << 10
)

var reqArena arena

// copyRequest returns a private, never rewritten copy of req.
func (a *arena) copyRequest(req []byte) []byte {
	n := len(req)
	if n > len(a.block) {
		if n > blockSize/4 { // a large request gets its own buffer rather than wasting a block
			return append(make([]byte, 0, n), req...)
		}
		a.block = make([]byte, blockSize)
	}
	src := a.block[:n:n]
	a.block = a.block[n:]
	copy(src, req)
	return src
}

// str returns b, which must lie within a request copy (copyRequest), as a string without
// copying.
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
