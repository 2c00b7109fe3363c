package allocator

import "errors"

// Sentinel errors. Every error returned by a Pool wraps exactly one of these
// (test with errors.Is); the message adds the pool name, the address and,
// for ErrExcluded, the reason (network, broadcast, gateway or which Exclude).
var (
	// ErrExhausted: no address of the pool can be handed out.
	ErrExhausted = errors.New("address pool exhausted")
	// ErrInUse: the requested address is already allocated.
	ErrInUse = errors.New("address already in use")
	// ErrOutOfRange: the address is not inside any CIDR of the pool (or of the
	// wrong family, or beyond the first 2^64 addresses of a huge IPv6 prefix).
	ErrOutOfRange = errors.New("address out of range")
	// ErrExcluded: the address is inside the pool but can never be handed out.
	ErrExcluded = errors.New("address excluded")
	// ErrNotAllocated: Release of an address that is not held. Callers that
	// release idempotently treat it as success.
	ErrNotAllocated = errors.New("address not allocated")
)
