package eni

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"sync"
)

// ReleaseState is the state of one address in the release handshake between the operator
// and a node's agent (Cilium's status.ipam.release-ips).
//
//	(none) --operator--> marked-for-release --agent--> ready-for-release --operator--> released --agent--> (none)
//	                            |                              |
//	                            +--agent--> do-not-release     +--operator (abort)--> (none)
//	                            +--operator (abort)--> (none)   do-not-release --operator--> (none)
//
// The operator marks an address only after it has been excess for the release delay; it
// unassigns it from the cloud only when the agent answered ready-for-release, which the agent
// does only for an address no pod holds and which it then stops handing out. So no address
// leaves a node while a pod may hold it.
type ReleaseState string

const (
	StateNone         ReleaseState = ""
	StateMarked       ReleaseState = "marked-for-release"
	StateReady        ReleaseState = "ready-for-release"
	StateDoNotRelease ReleaseState = "do-not-release"
	StateReleased     ReleaseState = "released"
)

// Transition moves one address's entry from From to To. StateNone as From means "absent",
// as To "delete the entry".
type Transition struct {
	Addr     netip.Addr
	From, To ReleaseState
}

func (t Transition) String() string {
	return fmt.Sprintf("%s: %q -> %q", t.Addr, t.From, t.To)
}

// operatorMoves and agentMoves are the transitions each side may make.
var (
	operatorMoves = map[[2]ReleaseState]bool{
		{StateNone, StateMarked}:       true,
		{StateMarked, StateNone}:       true, // abort
		{StateReady, StateNone}:        true, // abort
		{StateDoNotRelease, StateNone}: true, // the agent refused: forget it
		{StateReady, StateReleased}:    true,
		{StateReleased, StateNone}:     true, // cleanup of a stale entry (node agent gone)
	}
	agentMoves = map[[2]ReleaseState]bool{
		{StateMarked, StateReady}:        true,
		{StateMarked, StateDoNotRelease}: true,
		{StateReleased, StateNone}:       true,
	}
)

// OperatorMayApply reports whether the operator side may make t.
func OperatorMayApply(t Transition) bool { return operatorMoves[[2]ReleaseState{t.From, t.To}] }

// AgentMayApply reports whether the agent side may make t.
func AgentMayApply(t Transition) bool { return agentMoves[[2]ReleaseState{t.From, t.To}] }

// Handshake carries the release entries of each node between the operator and the node's
// agent. In a cluster it is the per-node object's status (the operator writes marks, the
// agent answers, conflicts resolved by resourceVersion); MemoryHandshake is the in-process
// implementation used by the standalone daemon and tests.
type Handshake interface {
	// States returns the node's entries (a copy).
	States(ctx context.Context, node string) (map[netip.Addr]ReleaseState, error)
	// Apply applies ts to the node's entries atomically per entry: a transition applies only
	// if the entry is in From at that moment (compare and set). It returns the transitions
	// that did not apply because the entry had moved.
	Apply(ctx context.Context, node string, ts []Transition) (rejected []Transition, err error)
}

// AgentAnswer is the agent's half of the handshake as a pure function: for every entry the
// operator marked it answers ready-for-release when inUse says no pod holds the address, else
// do-not-release; it drops entries the operator marked released. The agent must apply the
// answers with Handshake.Apply and, from the moment an address is ready-for-release (or
// marked), stop handing it out (see Reserved).
func AgentAnswer(states map[netip.Addr]ReleaseState, inUse func(netip.Addr) bool) []Transition {
	var out []Transition
	for _, a := range sortedAddrs(states) {
		switch st := states[a]; st {
		case StateMarked:
			to := StateReady
			if inUse(a) {
				to = StateDoNotRelease
			}
			out = append(out, Transition{Addr: a, From: st, To: to})
		case StateReleased:
			out = append(out, Transition{Addr: a, From: st, To: StateNone})
		}
	}
	return out
}

// Reserved reports whether the agent must not hand out an address in state st: it is being
// released, or may be any moment.
func Reserved(st ReleaseState) bool {
	return st == StateMarked || st == StateReady || st == StateReleased
}

// MemoryHandshake is an in-memory Handshake. The zero value is ready to use.
type MemoryHandshake struct {
	mu    sync.Mutex
	nodes map[string]map[netip.Addr]ReleaseState
}

// States implements Handshake.
func (m *MemoryHandshake) States(_ context.Context, node string) (map[netip.Addr]ReleaseState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[netip.Addr]ReleaseState, len(m.nodes[node]))
	for a, s := range m.nodes[node] {
		out[a] = s
	}
	return out, nil
}

// Apply implements Handshake.
func (m *MemoryHandshake) Apply(_ context.Context, node string, ts []Transition) ([]Transition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.nodes == nil {
		m.nodes = map[string]map[netip.Addr]ReleaseState{}
	}
	entries := m.nodes[node]
	if entries == nil {
		entries = map[netip.Addr]ReleaseState{}
		m.nodes[node] = entries
	}
	var rejected []Transition
	for _, t := range ts {
		if entries[t.Addr] != t.From {
			rejected = append(rejected, t)
			continue
		}
		if t.To == StateNone {
			delete(entries, t.Addr)
		} else {
			entries[t.Addr] = t.To
		}
	}
	if len(entries) == 0 {
		delete(m.nodes, node)
	}
	return rejected, nil
}

// DeleteNode drops a node's entries (the node object is gone).
func (m *MemoryHandshake) DeleteNode(node string) {
	m.mu.Lock()
	delete(m.nodes, node)
	m.mu.Unlock()
}

// Checked wraps a Handshake so that every Apply is checked against one side's allowed
// transitions; a forbidden transition is an error and nothing is applied.
func Checked(h Handshake, allowed func(Transition) bool, side string) Handshake {
	return checked{h: h, allowed: allowed, side: side}
}

type checked struct {
	h       Handshake
	allowed func(Transition) bool
	side    string
}

func (c checked) States(ctx context.Context, node string) (map[netip.Addr]ReleaseState, error) {
	return c.h.States(ctx, node)
}

func (c checked) Apply(ctx context.Context, node string, ts []Transition) ([]Transition, error) {
	for _, t := range ts {
		if !c.allowed(t) {
			return nil, fmt.Errorf("eni: handshake: the %s may not make transition %s on node %q", c.side, t, node)
		}
	}
	return c.h.Apply(ctx, node, ts)
}

func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}
