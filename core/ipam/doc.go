// Package ipam is the node's address manager: it owns the pools of the node, asks the pool
// policy which pool serves a request, takes the address from the pool's allocator, and makes
// the allocation durable in the store before answering. It implements api.Service.
//
// Invariants, and how they are kept:
//
//   - An address is never held by two owners. Every pool's allocator is only touched under
//     Manager.mu, and pools never overlap (config validation).
//   - An acknowledged allocation survives a crash. Allocate returns only after store.Put has
//     committed; on start, New rebuilds the allocators from the store.
//   - A freed address is not handed out again before the free is durable. Release frees the
//     address in memory only after store.Delete has committed; otherwise a crash could bring
//     back a record whose address a second owner already holds.
//   - ADD and DEL are idempotent per owner and serialized per owner: a second request for an
//     owner with a request in flight waits for it, then sees its outcome.
//   - Store writes never use the caller's context: a cancelled request must still learn
//     whether its write committed, or memory and disk could disagree.
//   - In agent mode (Options.Dynamic) the same hold while blocks come and go: a block
//     overlapping any pool is refused, held addresses are taken in a block before anything
//     is handed out from it, and a block is removed only while nothing of it is taken
//     (dynamic.go). An ADD that finds its pools exhausted waits for a block with its owner
//     still in flight.
//
// The lock is held only for the in-memory steps, never across the store commit, so
// concurrent requests share one fsync (the store group-commits).
package ipam
