// Package wire converts between the Go types of the plugin contracts (sdk/policy, sdk/cloud,
// sdk/datapath) and their protobuf messages (sdk/proto/pluginv1).
//
// It is the edge of every out-of-process transport: the go-plugin gRPC glue (sdk/pluginrpc)
// and the WASM ABI both use it, so a value means the same thing whatever carried it. The
// package imports no gRPC and builds for GOOS=wasip1.
//
// XxxToProto never fails: it encodes what it is given, and an invalid Go value (an unknown
// family, a zero netip.Prefix) becomes a wire value the receiver rejects. XxxFromProto
// validates everything a peer could get wrong (missing messages, unspecified or unknown enum
// values, unparsable addresses and CIDRs, out-of-range numbers) and returns an error wrapping
// ErrInvalid that names the offending field, e.g.
//
//	wire: pod decision: ipv4[2].pool: empty pool name
//
// ToProto results alias the maps and slices of their input (no copies on the hot path);
// FromProto results alias the message's maps. Neither side may mutate them while the other
// is in use.
package wire

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("invalid wire message")

// fieldError names the message and the field path that failed validation.
type fieldError struct {
	msg   string // "pod decision"
	field string // "ipv4[2].pool"
	why   string
}

func (e *fieldError) Error() string {
	if e.field == "" {
		return fmt.Sprintf("wire: %s: %s", e.msg, e.why)
	}
	return fmt.Sprintf("wire: %s: %s: %s", e.msg, e.field, e.why)
}

func (e *fieldError) Unwrap() error { return ErrInvalid }

func invalid(msg, field, format string, args ...any) error {
	return &fieldError{msg: msg, field: field, why: fmt.Sprintf(format, args...)}
}

func idx(field string, i int) string { return fmt.Sprintf("%s[%d]", field, i) }
