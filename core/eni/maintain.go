package eni

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// maintainResult is what maintain did for one node (Worked > 0 if anything at all).
type maintainResult struct {
	PassResult
	Worked int
}

// nodePass is one node's pass: its queue entry, inventory, selector and watermarks.
type nodePass struct {
	q       *queued
	n       *node
	inv     *cloud.NodeInventory
	s       NodeState
	sel     Selector
	p       Params
	r       *maintainResult
	skip    map[string]bool
	steps   int
	blocked string
	changed bool
}

// maintain handles one node: allocation while it needs addresses, else the release
// handshake, then its status and pool.
func (e *Engine) maintain(ctx context.Context, q *queued) maintainResult {
	var r maintainResult
	np := &nodePass{q: q, n: q.n, inv: q.n.inv, s: q.state, r: &r, skip: map[string]bool{}}
	np.n.status = NodeStatus{Name: q.name, Used: len(np.s.Used), Pending: np.s.Pending}
	np.refresh(e)
	e.allocate(ctx, np)
	if np.blocked != "" {
		e.log.Warn("eni: node cannot get more addresses", "node", q.name, "reason", np.blocked)
	}
	if np.n.inv != nil {
		e.ensureIPv6Prefix(ctx, np)
	}
	if r.Errors > 0 {
		r.Unfinished = true
	}
	// A failed call dropped the inventory (fail: re-read the truth next pass): no release
	// decisions on a picture known to be stale.
	if e.opts.Handshake != nil && np.n.inv != nil {
		avail := Available(*np.inv, np.sel)
		rel := e.release(ctx, np, NeededIPs(avail, len(np.s.Used), np.p), ExcessIPs(avail, len(np.s.Used), np.p))
		r.Released += rel.released
		r.Marked += rel.marked
		r.NextRelease = rel.next
		r.Errors += rel.errors
		r.Worked += rel.worked
		np.n.status.Releasing = rel.inFlight
		np.changed = np.changed || rel.released > 0
	}
	e.finish(ctx, np)
	return r
}

// refresh recomputes the selector and watermarks (the prefix mode may have changed).
func (np *nodePass) refresh(e *Engine) {
	np.sel = e.selectorFor(np.n, np.s, *np.inv)
	np.p = e.effectiveParams(np.s, *np.inv, np.sel)
}

// allocate runs allocation steps while the node needs addresses.
func (e *Engine) allocate(ctx context.Context, np *nodePass) {
	n, used := np.n, len(np.s.Used)
	for {
		avail := Available(*np.inv, np.sel)
		needed := NeededIPs(avail, used, np.p)
		if needed == 0 {
			if !n.neededSince.IsZero() {
				e.opts.Metrics.observeTimeToAddress(e.opts.Now().Sub(n.neededSince))
				n.neededSince = time.Time{}
			}
			return
		}
		if n.neededSince.IsZero() {
			n.neededSince = e.opts.Now()
		}
		if np.steps >= e.cfg.MaxStepsPerNode {
			np.r.Unfinished = true
			return
		}
		np.r.Worked++
		want := AllocationTarget(avail, needed, np.s.Pending, np.p)
		var again bool
		if ifc, onIfc, onSub, ok := PickInterface(*np.inv, np.sel, np.skip); ok {
			again = e.allocateOn(ctx, np, ifc, onIfc, onSub, want)
		} else {
			again = e.createOne(ctx, np, want)
		}
		if !again {
			return
		}
	}
}

// allocateOn asks for want addresses (whole prefixes in prefix mode) on ifc; it reports
// whether the allocation loop goes on.
func (e *Engine) allocateOn(ctx context.Context, np *nodePass, ifc cloud.Interface, onIfc, onSub, want int) bool {
	np.steps++
	req := cloud.AllocateRequest{Node: np.s.Ref, Interface: ifc.ID, Family: cloud.IPv4, Count: AllocationAmount(onSub, onIfc, want)}
	if np.sel.Prefixes {
		req.Count, req.Prefixes = PrefixAmount(onSub, onIfc, want), true
	}
	got, err := e.backend.Allocate(ctx, req)
	switch {
	case err == nil:
		addAddresses(np.inv, ifc.ID, got.Addresses)
		addPrefixes(np.inv, ifc.ID, got.Prefixes)
		n := len(got.Addresses) + PrefixSize4*len(got.Prefixes)
		takeFromSubnet(np.inv, ifc.Subnet, uint64(n))
		np.r.Allocated += n
		np.changed = true
		return true
	case errors.Is(err, cloud.ErrNoFreePrefix):
		// Cilium's fallback: the subnet may be out of /28 blocks while single addresses are
		// free, so the node allocates secondary addresses from now on.
		e.log.Warn("eni: subnet has no free prefix; the node falls back to secondary addresses", "node", np.q.name, "subnet", ifc.Subnet, "err", err)
		np.n.noPrefixes = true
		np.refresh(e)
		return true
	case errors.Is(err, cloud.ErrSubnetFull):
		setSubnetFree(np.inv, ifc.Subnet, 0)
		np.skip[ifc.ID] = true
		return true
	case errors.Is(err, cloud.ErrLimitReached):
		np.skip[ifc.ID] = true
		return true
	}
	e.fail(np, "allocate", err)
	return false
}

// createOne creates one interface for the node, with want addresses already on it (none in
// prefix mode: the next step delegates prefixes to it); it reports whether the allocation
// loop goes on.
func (e *Engine) createOne(ctx context.Context, np *nodePass, want int) bool {
	idx, ok := PickIndex(*np.inv, np.sel.First)
	if !ok {
		np.blocked = "interface limit reached and every interface is full"
		return false
	}
	sub, ok := PickSubnet(*np.inv, np.s.Ref.Zone, e.subnetRules(np.s), 2)
	if !ok {
		np.blocked = "no subnet with free addresses"
		return false
	}
	np.steps++
	count := min(want, FreeOnInterface(cloud.Interface{}, np.inv.Limits), int(min(sub.Free-1, uint64(unlimited))))
	if np.sel.Prefixes {
		count = 0
	}
	sgIDs, sgTags := e.securityGroups(np.s)
	ifc, err := e.backend.CreateInterface(ctx, cloud.CreateInterfaceRequest{
		Node: np.s.Ref, Index: idx, Subnet: sub.ID, SecurityGroups: sgIDs, SecurityGroupTags: sgTags,
		Description: e.description(np.q.name), Tags: e.tags(np.q.name),
		DeleteOnTermination: e.cfg.DeleteOnTermination, Family: cloud.IPv4, Count: count,
	})
	switch {
	case err == nil:
		np.inv.Interfaces = append(np.inv.Interfaces, ifc)
		takeFromSubnet(np.inv, ifc.Subnet, uint64(1+len(ifc.Addresses)))
		np.r.Created++
		np.r.Allocated += len(ifc.Addresses)
		np.changed = true
		return true
	case errors.Is(err, cloud.ErrSubnetFull):
		setSubnetFree(np.inv, sub.ID, 0)
		return true
	case errors.Is(err, cloud.ErrLimitReached):
		np.blocked = "interface limit reached: " + err.Error()
	default:
		e.fail(np, "create interface", err)
	}
	return false
}

// ensureIPv6Prefix gives the node one IPv6 /80 on its first eligible interface when IPv6
// prefix delegation is on and it has none, as the AWS VPC CNI does in IPv6 mode: one /80
// holds more addresses than any node can use, so pods take theirs from it and it is never
// released.
func (e *Engine) ensureIPv6Prefix(ctx context.Context, np *nodePass) {
	if !e.ipv6Prefixes(np.s) || !np.inv.Limits.PrefixDelegation {
		return
	}
	el := Eligible(*np.inv, np.sel)
	if len(el) == 0 || HasIPv6Prefix(el) {
		return
	}
	np.r.Worked++
	got, err := e.backend.Allocate(ctx, cloud.AllocateRequest{Node: np.s.Ref, Interface: el[0].ID, Family: cloud.IPv6, Count: 1, Prefixes: true})
	if err != nil {
		e.fail(np, "allocate IPv6 prefix", err)
		return
	}
	addPrefixes(np.inv, el[0].ID, got.Prefixes)
	np.changed = true
}

// finish records the node's status and hands its pool to the Publisher: the eligible
// interfaces with their addresses and prefixes.
func (e *Engine) finish(ctx context.Context, np *nodePass) {
	n, inv, used := np.n, *np.inv, len(np.s.Used)
	avail := Available(inv, np.sel)
	n.status.Available = avail
	n.status.Needed = NeededIPs(avail, used, np.p)
	n.status.Excess = ExcessIPs(avail, used, np.p)
	n.status.Interfaces = len(inv.Interfaces)
	n.status.Capacity = Capacity(inv, np.sel)
	n.status.Blocked = np.blocked
	if e.opts.Publisher == nil {
		return
	}
	pool := inv
	pool.Interfaces = Eligible(inv, np.sel)
	// Publish on every change, and once for a node first seen (e.g. after a restart).
	sig := poolSignature(pool)
	if !np.changed && sig == n.published {
		return
	}
	if err := e.opts.Publisher.Publish(ctx, np.q.name, pool); err != nil {
		e.fail(np, "publish", err)
		return
	}
	n.published = sig
}

func addPrefixes(inv *cloud.NodeInventory, id string, ps []netip.Prefix) {
	if len(ps) == 0 {
		return
	}
	for i := range inv.Interfaces {
		if inv.Interfaces[i].ID == id {
			ifc := &inv.Interfaces[i]
			ifc.Prefixes = append(append([]netip.Prefix(nil), ifc.Prefixes...), ps...)
			slices.SortFunc(ifc.Prefixes, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		}
	}
}
