package eni

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/allot-ipam/allot/sdk/cloud"
)

type releaseResult struct {
	released, marked, errors, worked, inFlight int
	next                                       time.Time // earliest candidate due for marking
}

// release runs the operator's half of the handshake for one node. allowed is how many
// addresses may be in the handshake: the excess when releasing is on and the node needs
// nothing, else 0 (which aborts every mark). Addresses go back in units (Units): a
// delegated /28 only whole, once all its addresses are ready for release.
func (e *Engine) release(ctx context.Context, np *nodePass, needed, excess int) (rr releaseResult) {
	n, hs, now := np.n, e.opts.Handshake, e.opts.Now()
	allowed := 0
	if e.cfg.Release && needed == 0 {
		allowed = excess
	}
	states, err := hs.States(ctx, np.q.name)
	if err != nil {
		rr.errors++
		e.log.Warn("eni: handshake read failed", "node", np.q.name, "err", err)
		return rr
	}
	inUse := map[netip.Addr]bool{}
	for _, a := range np.s.Used {
		inUse[a] = true
	}
	st := Settle(states, Units(*np.inv, np.sel), inUse, allowed)
	for _, a := range st.Refused {
		n.refused[a] = now
	}
	rr.inFlight = allowed - st.Keep
	ts := append(st.Transitions, e.unassign(ctx, np, st.Ready, &rr)...)
	for a, t := range n.refused {
		if now.Sub(t) >= e.cfg.ReleaseDelay {
			delete(n.refused, a)
		}
	}
	if st.Keep > 0 {
		busy := func(a netip.Addr) bool {
			_, inHS := states[a]
			_, refused := n.refused[a]
			return inUse[a] || inHS || refused
		}
		_, cands := PickRelease(*np.inv, np.sel, busy, st.Keep)
		marks, marked, next := MarkDue(cands, n.excessSince, now, e.cfg.ReleaseDelay)
		ts = append(ts, marks...)
		rr.marked, rr.next = marked, next
		rr.inFlight += marked
	} else {
		clear(n.excessSince)
	}
	if len(ts) > 0 {
		rr.worked++
		rejected, err := hs.Apply(ctx, np.q.name, ts)
		if err != nil {
			rr.errors++
			e.log.Warn("eni: handshake write failed", "node", np.q.name, "err", err)
		}
		for _, t := range rejected {
			e.log.Debug("eni: handshake entry moved meanwhile", "node", np.q.name, "transition", t.String())
		}
	}
	e.opts.Metrics.countReleased(rr.released)
	return rr
}

// unassign gives the ready units back to the cloud, one call per interface, and returns
// their ready-to-released transitions.
func (e *Engine) unassign(ctx context.Context, np *nodePass, ready []Unit, rr *releaseResult) []Transition {
	byIfc := map[string][]Unit{}
	for _, u := range ready {
		byIfc[u.Interface] = append(byIfc[u.Interface], u)
	}
	ifcs := make([]string, 0, len(byIfc))
	for id := range byIfc {
		ifcs = append(ifcs, id)
	}
	sort.Strings(ifcs)
	var ts []Transition
	for _, id := range ifcs {
		req := cloud.ReleaseRequest{Node: np.s.Ref, Interface: id}
		var all []netip.Addr
		for _, u := range byIfc[id] {
			if u.Prefix.IsValid() {
				req.Prefixes = append(req.Prefixes, u.Prefix)
			} else {
				req.Addresses = append(req.Addresses, u.Addrs...)
			}
			all = append(all, u.Addrs...)
		}
		if err := e.backend.Release(ctx, req); err != nil {
			rr.errors++
			np.n.status.LastError = "release: " + err.Error()
			e.opts.Metrics.countError("release", err)
			e.log.Warn("eni: release failed", "node", np.q.name, "interface", id, "err", err)
			continue
		}
		removeAddresses(np.inv, id, req.Addresses)
		removePrefixes(np.inv, id, req.Prefixes)
		for _, a := range all {
			ts = append(ts, Transition{a, StateReady, StateReleased})
		}
		rr.released += len(all)
		rr.inFlight -= len(all)
	}
	return ts
}

// Settled is Settle's decision on the existing handshake entries.
type Settled struct {
	// Transitions: answers finished and marks aborted.
	Transitions []Transition
	// Ready are the units whose every address the agent let go: to unassign now.
	Ready []Unit
	// Keep is what is left of the allowed budget for new marks.
	Keep int
	// Refused are the addresses the agent refused (do-not-release), cleared now and not
	// proposed again for a release delay.
	Refused []netip.Addr
}

// Settle decides on the node's handshake entries. A unit stays in the handshake only whole:
// all its addresses marked or ready, none in use, and within the allowed budget (ready
// units counted before marked ones); otherwise its entries are aborted. A ready entry whose
// address the node no longer holds is finished (released), a marked one aborted.
func Settle(states map[netip.Addr]ReleaseState, units []Unit, inUse map[netip.Addr]bool, allowed int) Settled {
	var out Settled
	unitOf := map[netip.Addr]int{}
	for i, u := range units {
		for _, a := range u.Addrs {
			unitOf[a] = i
		}
	}
	keep, done := allowed, map[int]bool{}
	for _, want := range []ReleaseState{StateReady, StateMarked} {
		for _, a := range sortedAddrs(states) {
			if states[a] != want {
				continue
			}
			i, onNode := unitOf[a]
			switch {
			case !onNode && want == StateReady:
				// Already gone from the cloud (e.g. unassigned before a restart): finish.
				out.Transitions = append(out.Transitions, Transition{a, StateReady, StateReleased})
			case !onNode:
				out.Transitions = append(out.Transitions, Transition{a, StateMarked, StateNone})
			case !done[i]:
				done[i] = true
				u := units[i]
				whole, ready := unitState(u, states, inUse)
				if !whole || keep < len(u.Addrs) {
					out.Transitions = append(out.Transitions, abortUnit(u, states)...)
					continue
				}
				keep -= len(u.Addrs)
				if ready {
					out.Ready = append(out.Ready, u)
				}
			}
		}
	}
	for _, a := range sortedAddrs(states) {
		if states[a] == StateDoNotRelease {
			out.Transitions = append(out.Transitions, Transition{a, StateDoNotRelease, StateNone})
			out.Refused = append(out.Refused, a)
		}
	}
	out.Keep = keep
	return out
}

// unitState: whole = every address of u is marked or ready and none is in use; ready =
// every one is ready.
func unitState(u Unit, states map[netip.Addr]ReleaseState, inUse map[netip.Addr]bool) (whole, ready bool) {
	whole, ready = true, true
	for _, a := range u.Addrs {
		switch {
		case inUse[a]:
			whole = false
		case states[a] == StateReady:
		case states[a] == StateMarked:
			ready = false
		default:
			whole = false
		}
	}
	return whole, ready && whole
}

func abortUnit(u Unit, states map[netip.Addr]ReleaseState) []Transition {
	var out []Transition
	for _, a := range u.Addrs {
		if st := states[a]; st == StateMarked || st == StateReady {
			out = append(out, Transition{a, st, StateNone})
		}
	}
	return out
}

// MarkDue marks the candidate units that have been excess for delay (since records when
// each was first seen, by its first address, and forgets the ones no longer candidates). It
// returns the marks, how many addresses they cover and when the next candidate is due.
func MarkDue(cands []Unit, since map[netip.Addr]time.Time, now time.Time, delay time.Duration) (ts []Transition, marked int, next time.Time) {
	due := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	seen := map[netip.Addr]bool{}
	for _, u := range cands {
		k := u.Addrs[0]
		seen[k] = true
		t, ok := since[k]
		switch {
		case !ok:
			since[k] = now
			due(now.Add(delay))
		case now.Sub(t) >= delay:
			for _, a := range u.Addrs {
				ts = append(ts, Transition{a, StateNone, StateMarked})
			}
			delete(since, k)
			marked += len(u.Addrs)
		default:
			due(t.Add(delay))
		}
	}
	for a := range since {
		if !seen[a] {
			delete(since, a)
		}
	}
	return ts, marked, next
}

func removePrefixes(inv *cloud.NodeInventory, id string, ps []netip.Prefix) {
	for i := range inv.Interfaces {
		ifc := &inv.Interfaces[i]
		if ifc.ID != id || len(ps) == 0 {
			continue
		}
		before := prefixes4(*ifc)
		ifc.Prefixes = slices.DeleteFunc(slices.Clone(ifc.Prefixes), func(p netip.Prefix) bool { return slices.Contains(ps, p) })
		for j := range inv.Subnets {
			if inv.Subnets[j].ID == ifc.Subnet {
				inv.Subnets[j].Free += uint64(PrefixSize4 * (before - prefixes4(*ifc)))
			}
		}
	}
}
