package operator

import (
	"context"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-ipam/allot/core/blockalloc"
)

// state is the leader's view of every block held by a node, across both modes. It is rebuilt
// from the API server each time this replica becomes leader, before anything is handed out,
// and changed only under mu. One blockalloc.Set holds every block of every pool and config,
// so two nodes can never hold overlapping blocks, whatever the pools and configs say.
type state struct {
	mu  sync.Mutex
	set blockalloc.Set

	// AllotNode name -> blocks it holds (multi-pool).
	allot map[string]*allotHold
	// Node name -> pod CIDRs it holds (ClusterCIDRConfig).
	nodes map[string]*nodeHold

	// unmet[pool][node] says why a node's request for the pool is not met; pool changes
	// re-queue those nodes, pool status reports exhaustion from it.
	unmet map[string]map[string]unmetReason
	// waiting holds Nodes no ClusterCIDRConfig could serve (no match, or all full); config
	// changes and freed blocks re-queue them.
	waiting map[string]string
	// foreign holds Nodes whose pod CIDRs another allocator set (kube-controller-manager's
	// --allocate-node-cidrs), with the message last reported, so the Event is sent once.
	foreign map[string]string
	// terminating pools and configs hand out nothing; set under mu by their reconcilers so a
	// node reconcile cannot race a finalizer removal.
	terminating map[string]bool

	ready chan struct{} // closed once rebuilt
}

type unmetReason struct {
	exhausted bool // no free block (else: pool missing, terminating, family missing...)
	message   string
}

// allotHold is what the operator knows one AllotNode holds.
type allotHold struct {
	uid types.UID
	// generation of the object the blocks were last read from or written to; a cached object
	// with a lower generation is stale and ignored (generation grows with every spec change).
	generation int64
	blocks     map[netip.Prefix]string // block -> pool
	// lastStatus fingerprints the operator-owned status fields last written, so a reconcile
	// on a cache that has not seen that write yet does not write (and conflict) again.
	lastStatus string
	// statusDue: the status write with only good news waits until then, extended once
	// (statusExtended) when nodes were still getting blocks at the first (statusWait).
	statusDue      time.Time
	statusExtended bool
	// doubt: blocks of a spec write whose outcome is unknown (an ambiguous error); they stay
	// in blocks (reserved) until a live read settles them (resolveDoubt).
	doubt *doubtWrite
}

// doubtWrite is a spec write that may or may not have landed: the blocks it added (block ->
// pool) and the resourceVersion it was sent against (its precondition).
type doubtWrite struct {
	rv     string
	blocks map[netip.Prefix]string
}

// nodeHold is what one Node holds from ClusterCIDRConfigs.
type nodeHold struct {
	uid    types.UID
	config string
	blocks []netip.Prefix
	// doubtRV, when set, is the resourceVersion a pod CIDR write of blocks was sent against
	// that failed ambiguously: the blocks stay held until a live read settles it.
	doubtRV string
}

func newState() *state {
	s := &state{ready: make(chan struct{})}
	s.reset()
	return s
}

// reset empties the state (the leader's rebuild starts from nothing).
func (s *state) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.set = blockalloc.Set{}
	s.allot = map[string]*allotHold{}
	s.nodes = map[string]*nodeHold{}
	s.unmet = map[string]map[string]unmetReason{}
	s.waiting = map[string]string{}
	s.foreign = map[string]string{}
	s.terminating = map[string]bool{}
}

// waitReady waits until the leader has rebuilt the state (reconcilers call it first).
func (s *state) waitReady(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *state) setUnmet(pool, node string, r unmetReason) {
	m := s.unmet[pool]
	if m == nil {
		m = map[string]unmetReason{}
		s.unmet[pool] = m
	}
	m[node] = r
}

// clearUnmet forgets every unmet request of node.
func (s *state) clearUnmet(node string) {
	for pool, m := range s.unmet {
		delete(m, node)
		if len(m) == 0 {
			delete(s.unmet, pool)
		}
	}
}

// unmetOf returns node's unmet requests, by pool.
func (s *state) unmetOf(node string) map[string]unmetReason {
	out := map[string]unmetReason{}
	for pool, m := range s.unmet {
		if r, ok := m[node]; ok {
			out[pool] = r
		}
	}
	return out
}

// unmetNodes returns the nodes with an unmet request for pool, sorted.
func (s *state) unmetNodes(pool string) []string {
	out := make([]string, 0, len(s.unmet[pool]))
	for n := range s.unmet[pool] {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (s *state) waitingNodes() []string {
	out := make([]string, 0, len(s.waiting))
	for n := range s.waiting {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// addrs is the number of addresses a node can hand to pods from block p, saturating at
// MaxInt64. It must match core/allocator, which never hands out an IPv4 block's network and
// broadcast addresses (/30 and shorter) nor an IPv6 block's subnet-router anycast address
// (/126 and shorter): counting the raw size would mark a request fulfilled while the node
// is short, and the last pod would wait forever.
func addrs(p netip.Prefix) int64 {
	hb := p.Addr().BitLen() - p.Bits()
	if hb >= 63 {
		return math.MaxInt64
	}
	n := int64(1) << hb
	// The agent reserves each block's first usable address as its pods' gateway
	// (ipam.DynamicOptions.BlockGateway) besides the IPv4 network and broadcast or the IPv6
	// subnet-router anycast address.
	switch {
	case hb < 2:
		return n
	case p.Addr().Is4():
		return n - 3
	default:
		return n - 2
	}
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func sortPrefixes(ps []netip.Prefix) {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
}
