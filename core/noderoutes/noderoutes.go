// Package noderoutes routes every other node's pod blocks via that node's address, so pods
// on different nodes reach each other without an overlay. It is Cilium's
// autoDirectNodeRoutes: it works when nodes share an L2 segment (the next hop is on-link),
// and is opt-in for the same reason.
//
// Routes are marked with allot's own route protocol number (Protocol), so the node's other
// routes are never touched, a restarted agent finds the routes its predecessor installed and
// removes the stale ones, and `ip route show proto 0xa7` lists exactly allot's.
package noderoutes

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Protocol is the route protocol number (rtm_protocol) of allot's node routes. Numbers up
// to 4 are the kernel's own and several above are used by routing daemons (bird 12, zebra
// 11, ...; /etc/iproute2/rt_protos); 0xa7 is used by none of them.
const Protocol netlink.RouteProtocol = 0xa7

// Peer is another node: its addresses and the pod blocks it holds.
type Peer struct {
	Name       string
	IPv4, IPv6 netip.Addr
	Blocks     []netip.Prefix
}

// Route is one desired route: Dst via Via, for node Node.
type Route struct {
	Dst  netip.Prefix
	Via  netip.Addr
	Node string
}

// Conflict is a block two peers claim; the route goes to the first by name until the
// operator's view settles (a block is never on two nodes, so this is transient).
type Conflict struct {
	Dst   netip.Prefix
	Nodes []string
}

// Plan computes the routes for this node (self) from the peers: one per block of every
// other node, via that node's address of the block's family. Blocks of a family the peer
// has no address of are left out. The result is sorted by destination, so the same inputs
// always give the same routes.
func Plan(self string, peers []Peer) ([]Route, []Conflict) {
	byDst := map[netip.Prefix][]Route{}
	for _, p := range peers {
		if p.Name == self {
			continue
		}
		for _, b := range p.Blocks {
			b = b.Masked()
			via := p.IPv4
			if b.Addr().Is6() {
				via = p.IPv6
			}
			if !b.IsValid() || !via.IsValid() {
				continue
			}
			byDst[b] = append(byDst[b], Route{Dst: b, Via: via, Node: p.Name})
		}
	}
	var out []Route
	var conflicts []Conflict
	for dst, rs := range byDst {
		slices.SortFunc(rs, func(a, b Route) int { return cmp.Compare(a.Node, b.Node) })
		out = append(out, rs[0])
		if len(rs) > 1 {
			c := Conflict{Dst: dst}
			for _, r := range rs {
				c.Nodes = append(c.Nodes, r.Node)
			}
			conflicts = append(conflicts, c)
		}
	}
	slices.SortFunc(out, func(a, b Route) int { return comparePrefix(a.Dst, b.Dst) })
	slices.SortFunc(conflicts, func(a, b Conflict) int { return comparePrefix(a.Dst, b.Dst) })
	return out, conflicts
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}

// Reconciler makes the routes of Protocol in one routing table equal a plan.
type Reconciler struct {
	// Handle is the netlink handle to use; nil means the caller's network namespace.
	Handle *netlink.Handle
	// Table is the routing table; 0 means main.
	Table int
	Log   *slog.Logger
}

// Result is what one Sync did.
type Result struct {
	Added, Replaced, Removed int
	// Errors are routes that could not be installed (e.g. a next hop that is not on-link:
	// the nodes do not share an L2 segment) or a foreign route on the same destination.
	Errors []error
}

func (r *Reconciler) table() int {
	if r.Table == 0 {
		return unix.RT_TABLE_MAIN
	}
	return r.Table
}

func (r *Reconciler) list() ([]netlink.Route, error) {
	filter := &netlink.Route{Protocol: Protocol, Table: r.table()}
	mask := uint64(netlink.RT_FILTER_PROTOCOL | netlink.RT_FILTER_TABLE)
	var out []netlink.Route
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		var rs []netlink.Route
		var err error
		if r.Handle != nil {
			rs, err = r.Handle.RouteListFiltered(fam, filter, mask)
		} else {
			rs, err = netlink.RouteListFiltered(fam, filter, mask)
		}
		if err != nil {
			return nil, fmt.Errorf("noderoutes: list routes: %w", err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// Sync installs the routes of want that are missing or point elsewhere and removes routes of
// Protocol not in want. A route that cannot be installed is reported in Result.Errors and
// the others still go in; the error return is for failures to read the table.
func (r *Reconciler) Sync(want []Route) (Result, error) {
	var res Result
	have, err := r.list()
	if err != nil {
		return res, err
	}
	wanted := map[netip.Prefix]Route{}
	for _, w := range want {
		wanted[w.Dst] = w
	}
	current := map[netip.Prefix]netip.Addr{}
	for _, h := range have {
		dst, ok := prefixOf(h.Dst)
		if !ok {
			continue
		}
		gw, _ := netip.AddrFromSlice(h.Gw)
		gw = gw.Unmap()
		if w, keep := wanted[dst]; keep && w.Via == gw {
			current[dst] = gw
			continue
		}
		if _, keep := wanted[dst]; keep {
			continue // replaced below
		}
		if err := r.del(&h); err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("noderoutes: remove %s via %s: %w", dst, gw, err))
			continue
		}
		res.Removed++
		r.logger().Info("node route removed", "dst", dst, "via", gw)
	}
	for _, w := range want {
		if gw, ok := current[w.Dst]; ok && gw == w.Via {
			continue
		}
		replaced, err := r.install(w, have)
		switch {
		case err != nil:
			res.Errors = append(res.Errors, err)
		case replaced:
			res.Replaced++
			r.logger().Info("node route replaced", "dst", w.Dst, "via", w.Via, "node", w.Node)
		default:
			res.Added++
			r.logger().Info("node route added", "dst", w.Dst, "via", w.Via, "node", w.Node)
		}
	}
	return res, nil
}

// RemoveAll removes every route of Protocol in the table (uninstall).
func (r *Reconciler) RemoveAll() (Result, error) { return r.Sync(nil) }

// install adds w, replacing allot's own route to the same destination. A route to the same
// destination that another program owns is left alone and reported: overriding it could cut
// the node off from something it needs.
func (r *Reconciler) install(w Route, ours []netlink.Route) (replaced bool, err error) {
	for _, h := range ours {
		if dst, ok := prefixOf(h.Dst); ok && dst == w.Dst {
			replaced = true
		}
	}
	if !replaced {
		if owner, found, err := r.foreign(w.Dst); err != nil {
			return false, err
		} else if found {
			return false, fmt.Errorf("noderoutes: %s (node %s): a route to it already exists (protocol %s); not overriding it", w.Dst, w.Node, owner)
		}
	}
	nr := &netlink.Route{
		Dst:      &net.IPNet{IP: w.Dst.Addr().AsSlice(), Mask: net.CIDRMask(w.Dst.Bits(), w.Dst.Addr().BitLen())},
		Gw:       w.Via.AsSlice(),
		Protocol: Protocol,
		Table:    r.table(),
	}
	if r.Handle != nil {
		err = r.Handle.RouteReplace(nr)
	} else {
		err = netlink.RouteReplace(nr)
	}
	if err != nil {
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EINVAL) {
			err = fmt.Errorf("%w (is %s on a directly connected network? node routes need nodes on one L2 segment)", err, w.Via)
		}
		return false, fmt.Errorf("noderoutes: %s via %s (node %s): %w", w.Dst, w.Via, w.Node, err)
	}
	return replaced, nil
}

// foreign reports whether a route to exactly dst exists in the table that is not allot's.
func (r *Reconciler) foreign(dst netip.Prefix) (netlink.RouteProtocol, bool, error) {
	filter := &netlink.Route{
		Dst:   &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())},
		Table: r.table(),
	}
	mask := uint64(netlink.RT_FILTER_DST | netlink.RT_FILTER_TABLE)
	fam := netlink.FAMILY_V4
	if dst.Addr().Is6() {
		fam = netlink.FAMILY_V6
	}
	var rs []netlink.Route
	var err error
	if r.Handle != nil {
		rs, err = r.Handle.RouteListFiltered(fam, filter, mask)
	} else {
		rs, err = netlink.RouteListFiltered(fam, filter, mask)
	}
	if err != nil {
		return 0, false, fmt.Errorf("noderoutes: list routes to %s: %w", dst, err)
	}
	for _, h := range rs {
		if h.Protocol != Protocol {
			return h.Protocol, true, nil
		}
	}
	return 0, false, nil
}

func (r *Reconciler) del(h *netlink.Route) error {
	if r.Handle != nil {
		return r.Handle.RouteDel(h)
	}
	return netlink.RouteDel(h)
}

func (r *Reconciler) logger() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}
