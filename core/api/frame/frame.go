// Package frame is allotd's framed binary protocol: the same requests and answers as the
// HTTP/JSON API (core/api), on the same unix socket, for the CNI path.
//
// The framing (preface, header, operations, reader) is core/api/framing, re-exported here;
// this package adds the payloads: the generated messages of
// core/api/proto/allot/api/v1/api.proto (codec.go converts them to and from core/api's
// types). See core/api/API.md.
package frame

import (
	"bufio"

	"github.com/allot-ipam/allot/core/api/framing"
)

// The framing's names (core/api/framing), for the server and client that use this package.
const (
	Preface    = framing.Preface
	HeaderSize = framing.HeaderSize
	MaxPayload = framing.MaxPayload
)

// Op is a frame's operation.
type Op = framing.Op

// Operations. Values are part of the protocol: never renumber.
const (
	OpError       = framing.OpError
	OpAllocate    = framing.OpAllocate
	OpRelease     = framing.OpRelease
	OpCheck       = framing.OpCheck
	OpGC          = framing.OpGC
	OpStatus      = framing.OpStatus
	OpPools       = framing.OpPools
	OpAllocations = framing.OpAllocations
	OpPlugins     = framing.OpPlugins
	OpExplain     = framing.OpExplain
)

// ErrTooLarge is returned for a frame whose payload exceeds MaxPayload.
var ErrTooLarge = framing.ErrTooLarge

// Reader reads frames.
type Reader = framing.Reader

// NewReader reads frames from r (which should be buffered).
func NewReader(r *bufio.Reader) *Reader { return framing.NewReader(r) }

// Begin appends a frame header; see framing.Begin.
func Begin(dst []byte, id uint32, op Op) ([]byte, int) { return framing.Begin(dst, id, op) }

// End fills in the length of the frame begun at start.
func End(buf []byte, start int) []byte { return framing.End(buf, start) }

// Append appends a whole frame.
func Append(dst []byte, id uint32, op Op, payload []byte) []byte {
	return framing.Append(dst, id, op, payload)
}

// Parse splits one frame off the front of b; see framing.Parse.
func Parse(b []byte) (id uint32, op Op, payload, rest []byte, err error) { return framing.Parse(b) }
