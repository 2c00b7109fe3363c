// Package allocator hands out addresses from one pool: a set of CIDRs of one
// family (IPv4 or IPv6, discontiguous allowed) minus excluded addresses.
//
// # What is never handed out
//
//   - Configured exclusions (Config.Exclude), single addresses or ranges.
//   - The gateway (Config.Gateway), treated as one more exclusion.
//   - For IPv6 prefixes of /126 or shorter, the first address (the
//     subnet-router anycast address, RFC 4291 2.6.1) is never handed out.
//   - For IPv4 prefixes of /30 or shorter, the network and broadcast
//     addresses. A /31 (RFC 3021) and a /32 use every address.
//   - Nothing else.
//
// # Representation
//
// Each CIDR is a span: its first address (a 128-bit integer; IPv4 uses the
// IPv4-mapped form) and the offsets 0..last of its addresses as uint64.
// Offsets are split into chunks of 4096 addresses. A chunk is a two-level
// bitmap: 64 words of 64 bits plus one summary word whose bit w says "word w
// has a clear bit", so the first free address of a chunk at or after any
// position is found with two TrailingZeros64, in O(1).
//
// Chunks are materialized lazily, in a map keyed by chunk index, only when an
// address in them is allocated; a chunk that becomes empty is dropped again.
// Memory is therefore proportional to the addresses in use (at most one chunk,
// about 0.6 KiB, per allocated address, and one chunk per 4096 when allocation
// is dense as AllocateNext makes it), not to the size of the range: an empty
// IPv6 /64 pool is a few hundred bytes; 1000 addresses from it, one chunk.
// Two details keep the steady state allocation-free: the most recently
// emptied chunk stays materialized (the "idle" chunk, at most one per pool)
// so an allocate/release ping-pong at a chunk edge does not churn the map,
// and dropped chunks are recycled through a spare list of up to 4. A
// one-entry cache in front of the map avoids most map lookups. Go maps do not
// shrink, so the map's own table keeps its high-water size; it costs about
// 16 bytes per chunk ever materialized at once.
//
// Exclusions are NOT pre-marked bit by bit (one can cover 2^64 addresses):
// each span keeps them, with network/broadcast/gateway, as a sorted list of
// merged offset intervals. When a chunk is materialized, the part of that list
// falling inside it (plus, for spans smaller than a chunk, the offsets past
// the end) is stamped into its bitmap as "fixed" bits, counted separately
// from allocations. Searching a materialized chunk therefore needs no
// exclusion lookups; in an unmaterialized chunk everything that is not
// excluded is free, and one binary search over the intervals finds the first
// such offset.
//
// # Search
//
// AllocateNext is next-fit: it continues just after the address it handed
// out last, wrapping round the pool once, so a released address is reused as
// late as possible (good for IPAM: stale references to a freed address do not
// immediately hit a new pod). From the cursor, the search looks at one chunk:
//
//   - materialized and not full: O(1) bitmap search;
//   - materialized and full: skip the whole run of consecutive full chunks in
//     one step. Each span keeps the full chunks as a sorted list of merged
//     runs of chunk indices (binary search to find, O(runs) memmove to update
//     when a chunk becomes full or stops being full);
//   - not materialized: skip the exclusion interval containing the position,
//     if any (one binary search), and the address found is free.
//
// So the cost does not grow with the size of full or excluded regions, only
// with the number of alternations between them that lie between the cursor
// and the next free address. Exhaustion is detected in O(1) before searching:
// used == usable. A span whose own counters say it is full is skipped whole.
//
// Allocate, Release and IsAllocated are O(log spans + log exclusions) plus a
// map lookup. Benchmarks (bench_test.go) put an AllocateNext+Release pair at
// about 50 to 90 ns (best of 10 runs on a busy 2-core machine), 0 allocations,
// for an empty, 50%-full or 99%-full IPv4 /16 (holes scattered at random) and
// for an IPv6 /64. The worst case benchmarked, a /16 with exactly one free
// address, costs about 230 ns because every call wraps round the pool.
//
// # The 64-bit offset limit
//
// Offsets are uint64, so a span addresses at most 2^64 addresses. A prefix
// with more than 64 host bits (an IPv6 prefix shorter than /64) uses only its
// first 2^64 addresses, base through base+2^64-1. Addresses after those are
// still inside the CIDR (Contains reports true, and exclusions may reach into
// them, where they are ignored), but Allocate reports ErrOutOfRange with a
// message naming the limit. Counters saturate: Stats.Usable is
// min(true count, math.MaxUint64), so a /64 or several of them report
// MaxUint64 (the exact 2^64 does not fit) — no arithmetic here wraps or
// panics. Nobody hands out more than 2^64 addresses from one node pool.
//
// # Validation
//
// New rejects: no Name; no CIDRs; invalid, unmasked or IPv4-mapped-IPv6
// prefixes; mixed families; overlapping CIDRs (naming both); exclusions that
// are malformed, of the other family, or not covered by the pool's CIDRs (an
// exclusion may cross from one CIDR into an adjacent one, but not a gap); a
// gateway outside the CIDRs or equal to an IPv4 network/broadcast address.
// Every message names the field (CIDRs[i], Exclude[i], Gateway).
//
// # Errors
//
// Operations return errors wrapping one of the sentinels ErrExhausted,
// ErrInUse, ErrOutOfRange, ErrExcluded (the message says network, broadcast,
// gateway or which Exclude[i]) and ErrNotAllocated, with the pool name and
// the address in the message.
//
// # Concurrency and determinism
//
// A Pool is NOT safe for concurrent use. The caller (core/ipam) already holds
// a lock around each pool operation together with its persistence step, so
// a second mutex here would only cost time. Results are deterministic: the
// same sequence of calls on the same Config gives the same addresses; nothing
// depends on map iteration order (ForEachAllocated sorts chunk indices) or on
// randomness.
package allocator
