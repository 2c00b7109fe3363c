// Package sharedpool serves CNI requests for networks whose addresses come from shared pools
// (SharedIPPool, Spiderpool style): addresses handed out one by one to pods on any node, the
// record of who holds which address kept in the cluster.
//
// # Records
//
//   - AddressClaim (cluster scope), one per held address, named k8s.ClaimName(addr). Creating
//     it is the atomic test-and-set of the address: the API server accepts one Create per
//     name, so two agents racing for one address cannot both win, and no lock is needed.
//   - AllotEndpoint (namespaced, name = pod name): the pod's interfaces with their addresses,
//     pools, gateway and routes. For a StatefulSet pod it outlives the pod.
//
// # Exported API (agent mode; allotd's daemon routes requests for shared networks here)
//
//	a, err := sharedpool.New(sharedpool.Options{
//		Node:       "node-1",          // this node
//		Client:     liveClient,        // controller-runtime client.Client, uncached: writes and current reads
//		Policy:     policyFor,         // func(network string) policy.PoolPolicy, required
//		PodContext: agent.PodContext,  // fills pod labels/annotations/owner, namespace, node labels
//		Registerer: reg,               // prometheus (nil: not registered)
//	})
//	err = a.Watch(ctx, informerCache) // SharedIPPool, ReservedIP, AddressClaim informers feed the index
//	// (or feed it by hand: a.Index().UpsertPool / DeletePool / UpsertReserved / UpsertClaim ... in tests)
//
//	a.Allocate(ctx, *api.AllocateRequest) (*api.Allocation, error)   // CNI ADD, one interface
//	a.Release(ctx, *api.ReleaseRequest) error                       // CNI DEL
//	a.Check(ctx, *api.CheckRequest) (*api.Allocation, error)        // CNI CHECK
//	a.GC(ctx, *api.GCRequest) (*api.GCResponse, error)               // CNI GC (this node's non-StatefulSet holders)
//	a.Pools(ctx) ([]api.PoolStatus, error)                           // one entry per pool and family
//	a.Allocations(ctx) ([]api.Allocation, error)                     // what pods of this node hold
//	a.Synced() bool                                                  // index filled from the informers
//
// Errors are *api.Error with the usual codes: CodeExhausted (names every pool tried),
// CodeNoPool (the policy's reason), CodeInvalid (names the field), CodeUnavailable (API
// server not answering on ADD, or the index not synced yet).
//
// # ADD
//
//  1. The pod's requests are serialised per pod on this node (interfaces of one pod update
//     one AllotEndpoint).
//  2. The pod's AllotEndpoint is read from the API server. If it already lists this interface
//     for this pod UID, the ADD is a repeat (a kubelet retry, possibly with a new container
//     ID): the same addresses are returned, claims and endpoint updated (resourceVersion) if
//     the container ID changed. If it belongs to an earlier pod of the same StatefulSet (same
//     name, other UID, maybe another node), the addresses are taken back: every claim's
//     holder is updated with resourceVersion, then the endpoint. An address whose pool the
//     pod's pool policy no longer chooses (its annotations changed) is freed instead, and that
//     family allocated anew.
//  3. Otherwise claims already held by (pod UID, interface) are reused (an agent killed after
//     creating a claim, before the endpoint was written).
//  4. Otherwise the network's policy (spiderpool-priority by default) picks candidate pools
//     per family from views of the pools: free counts from the claim index, reserved
//     addresses removed, conflicting (sharedpool.Conflicts), disabled and terminating pools
//     filtered. For each family, candidate pools in order: the first free address after
//     this node's cursor (a position hashed from the node name, so nodes fill separate
//     stretches; addresses this node is racing for are skipped) and its claim created;
//     AlreadyExists means another agent won it: the address is remembered as taken, the
//     cursor jumps, and the retry picks uniformly among the free addresses (counted in
//     allot_shared_conflicts_total). All candidates full: CodeExhausted naming them.
//  5. The AllotEndpoint is created or updated, then the answer is sent.
//
// # DEL
//
// Non-StatefulSet pod: its claims for (container ID, interface) are deleted with
// Preconditions{UID, ResourceVersion} and the interface is removed from the endpoint (the
// endpoint is deleted when empty). StatefulSet pod: nothing is freed; the operator's GC frees
// the addresses when the StatefulSet is scaled down or deleted. If the API server cannot be
// reached, DEL logs and succeeds: the operator's GC reclaims claims of pods that are gone.
package sharedpool
