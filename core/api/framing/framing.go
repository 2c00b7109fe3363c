// Package framing is the framing of allotd's framed binary protocol (core/api/frame,
// core/api/API.md): the preface, the frame header, the operations and a frame reader, without
// the payloads. core/api/frame adds the payload codec (the protocol's generated messages);
// allot-cni uses this package with a codec of its own (core/cniplugin/wire), so it links no
// protobuf runtime.
//
// A connection starts with the client's 10-byte Preface. The server tells it from HTTP by the
// first byte (0x00 starts no HTTP method) and answers with the same Preface before its first
// frame; an older allotd answers "HTTP/1.1 400 ...", which a client recognises by those first
// bytes. Then both sides send frames:
//
//	length uint32 (big endian; of what follows, at least 5) | id uint32 | op uint8 | payload
//
// A request's id is chosen by the client and repeated in its answer, so one connection may
// carry many requests at once and answers may come in any order. An answer's op is the
// request's op on success, or OpError with an encoded api.Error.
package framing

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Preface opens a framed connection in both directions. Its first byte, 0x00, is what the
// server sniffs: no HTTP request can start with it. It ends a line so that an HTTP server
// (an older allotd) answers 400 at once instead of waiting for the rest of a request line.
const Preface = "\x00ALLOT/1\r\n"

// HeaderSize is the size of a frame's header: length, id and op.
const HeaderSize = 9

// MaxPayload bounds a frame's payload: a GC request lists every valid attachment on the
// node (as the HTTP server's body limit).
const MaxPayload = 8 << 20

// Op is a frame's operation.
type Op uint8

// Operations. Values are part of the protocol: never renumber.
const (
	OpError       Op = 0 // answer only: payload is an api.Error
	OpAllocate    Op = 1
	OpRelease     Op = 2
	OpCheck       Op = 3
	OpGC          Op = 4
	OpStatus      Op = 5
	OpPools       Op = 6
	OpAllocations Op = 7
	OpPlugins     Op = 8
	OpExplain     Op = 9
)

func (o Op) String() string {
	switch o {
	case OpError:
		return "error"
	case OpAllocate:
		return "allocate"
	case OpRelease:
		return "release"
	case OpCheck:
		return "check"
	case OpGC:
		return "gc"
	case OpStatus:
		return "status"
	case OpPools:
		return "pools"
	case OpAllocations:
		return "allocations"
	case OpPlugins:
		return "plugins"
	case OpExplain:
		return "explain"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Begin appends a frame header with a placeholder length to dst and returns the buffer and
// the header's offset; append the payload, then call End.
func Begin(dst []byte, id uint32, op Op) ([]byte, int) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, id)
	return append(dst, byte(op)), start
}

// End fills in the length of the frame begun at start.
func End(buf []byte, start int) []byte {
	binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4))
	return buf
}

// Append appends a whole frame.
func Append(dst []byte, id uint32, op Op, payload []byte) []byte {
	dst, start := Begin(dst, id, op)
	return End(append(dst, payload...), start)
}

// ErrTooLarge is returned for a frame whose payload exceeds MaxPayload.
var ErrTooLarge = errors.New("frame: payload exceeds limit")

// Reader reads frames. The payload Next returns is valid until the following call.
type Reader struct {
	r   *bufio.Reader
	buf []byte
	// h is the header being read: a local array would escape through io.ReadFull and cost
	// an allocation per frame.
	h [HeaderSize]byte
}

// NewReader reads frames from r (which should be buffered).
func NewReader(r *bufio.Reader) *Reader { return &Reader{r: r} }

// Next reads one frame. A stream that ends between frames gives io.EOF; one that ends inside
// a frame gives io.ErrUnexpectedEOF.
func (r *Reader) Next() (id uint32, op Op, payload []byte, err error) {
	h := r.h[:]
	if _, err := io.ReadFull(r.r, h); err != nil {
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n < HeaderSize-4 {
		return 0, 0, nil, fmt.Errorf("frame: length: %d is shorter than a header", n)
	}
	size := int(n) - (HeaderSize - 4)
	if size > MaxPayload {
		return 0, 0, nil, fmt.Errorf("%w: length: %d bytes", ErrTooLarge, size)
	}
	id = binary.BigEndian.Uint32(h[4:8])
	op = Op(h[8])
	if cap(r.buf) < size {
		r.buf = make([]byte, size, max(size, 512))
	}
	r.buf = r.buf[:size]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, fmt.Errorf("frame: payload of %s #%d: %w", op, id, err)
	}
	return id, op, r.buf, nil
}

// Parse splits one frame off the front of b, for callers holding whole buffers (tests,
// fuzzing). It returns the rest of b.
func Parse(b []byte) (id uint32, op Op, payload, rest []byte, err error) {
	if len(b) < HeaderSize {
		return 0, 0, nil, nil, fmt.Errorf("frame: header: %w", io.ErrUnexpectedEOF)
	}
	n := binary.BigEndian.Uint32(b[:4])
	if n < HeaderSize-4 {
		return 0, 0, nil, nil, fmt.Errorf("frame: length: %d is shorter than a header", n)
	}
	size := int(n) - (HeaderSize - 4)
	if size > MaxPayload {
		return 0, 0, nil, nil, fmt.Errorf("%w: length: %d bytes", ErrTooLarge, size)
	}
	if len(b)-HeaderSize < size {
		return 0, 0, nil, nil, fmt.Errorf("frame: payload: %w", io.ErrUnexpectedEOF)
	}
	end := HeaderSize + size
	return binary.BigEndian.Uint32(b[4:8]), Op(b[8]), b[HeaderSize:end], b[end:], nil
}
