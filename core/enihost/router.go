package enihost

import (
	"cmp"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ipv6Router is the VPC router's link-local address on an ENI's link, as the kernel learned
// it (RFC 4861 router discovery): the next hop of an IPv6 default route the kernel installed
// from a router advertisement on that link (main table, proto ra), else a neighbour of that
// link flagged as a router (from its router advertisements, or a neighbour advertisement
// with the router flag). A node forwards, so unless accept_ra is 2 the kernel takes no route
// from an advertisement, yet still records its sender as a router neighbour: that suffices,
// and accept_ra stays as found. At 2 the kernel would put each secondary ENI's default route
// and subnet in the main table beside the primary's, so the node's own traffic could leave
// through them; the AWS VPC CNI sets it on the primary ENI only (its v1.16.0 change "No need
// to set accept_ra or accept_redirects for non-primary interfaces"). Once learnt it
// stays while neither is known (a neighbour entry expires; a restarted agent finds it in the
// ENI's table, table); IPv6Router until then. The Controller's periodic resync picks up an
// advertisement that arrives, or changes, later.
func (h *Host) ipv6Router(link, table int) netip.Addr {
	a, how := h.learnRouter(link)
	old, known := h.routers6[link]
	if how == "" {
		switch {
		case known:
			a, how = old, "learnt before"
		default:
			a, how = h.tableRouter(table)
		}
	}
	if h.routers6 == nil {
		h.routers6 = map[int]netip.Addr{}
	}
	if (!known || old != a) && h.Log != nil {
		h.Log.Info("ENI IPv6 router", "ifindex", link, "router", a, "from", how, "was", old)
	}
	h.routers6[link] = a
	return a
}

// learnRouter is what the kernel knows now of the router on link ("" for how: nothing).
func (h *Host) learnRouter(link int) (netip.Addr, string) {
	if a, ok := h.raRouter(link); ok {
		return a, "router advertisement"
	}
	if a, ok := h.neighRouter(link); ok {
		return a, "router neighbour"
	}
	return netip.Addr{}, ""
}

// tableRouter is the next hop of allot's IPv6 default route in table (set by an earlier
// run), else IPv6Router.
func (h *Host) tableRouter(table int) (netip.Addr, string) {
	rs, err := h.nl().RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: table, Protocol: Protocol},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		h.logDebug("list table routes", err)
	}
	for _, r := range rs {
		if gw, ok := linkLocal(r.Gw); ok && (r.Dst == nil || isDefault(r.Dst)) {
			return gw, "the ENI's table"
		}
	}
	return IPv6Router, "default"
}

// raRouter is the next hop on link of the main table's RA-learnt IPv6 default routes, the
// preferred one (lowest metric, then lowest address) when there are several routers.
func (h *Host) raRouter(link int) (netip.Addr, bool) {
	rs, err := h.nl().RouteListFiltered(netlink.FAMILY_V6,
		&netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_RA},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		h.logDebug("list RA routes", err)
		return netip.Addr{}, false
	}
	type cand struct {
		metric int
		gw     netip.Addr
	}
	var cs []cand
	for _, r := range rs {
		if r.Dst != nil && !isDefault(r.Dst) {
			continue
		}
		if r.LinkIndex == link {
			if gw, ok := linkLocal(r.Gw); ok {
				cs = append(cs, cand{r.Priority, gw})
			}
		}
		// The kernel may merge the routes of several routers into one multipath route.
		for _, nh := range r.MultiPath {
			if gw, ok := linkLocal(nh.Gw); ok && nh.LinkIndex == link {
				cs = append(cs, cand{r.Priority, gw})
			}
		}
	}
	if len(cs) == 0 {
		return netip.Addr{}, false
	}
	c := slices.MinFunc(cs, func(a, b cand) int {
		return cmp.Or(cmp.Compare(a.metric, b.metric), a.gw.Compare(b.gw))
	})
	return c.gw, true
}

// neighRouter is the lowest link-local neighbour of link the kernel marked as a router (it
// sent a router advertisement, or a neighbour advertisement with the router flag) and has
// not found unreachable.
func (h *Host) neighRouter(link int) (netip.Addr, bool) {
	ns, err := h.nl().NeighList(link, netlink.FAMILY_V6)
	if err != nil {
		h.logDebug("list neighbours", err)
		return netip.Addr{}, false
	}
	var best netip.Addr
	for _, n := range ns {
		if n.Flags&netlink.NTF_ROUTER == 0 || n.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE) != 0 {
			continue
		}
		if gw, ok := linkLocal(n.IP); ok && (!best.IsValid() || gw.Less(best)) {
			best = gw
		}
	}
	return best, best.IsValid()
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

// linkLocal converts ip, accepting only an IPv6 link-local unicast address (a router's
// address on its link; an RA-learnt route never has another).
func linkLocal(ip net.IP) (netip.Addr, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok || !a.Is6() || a.Is4In6() || !a.IsLinkLocalUnicast() {
		return netip.Addr{}, false
	}
	return a, true
}

func (h *Host) logDebug(what string, err error) {
	if h.Log != nil {
		h.Log.Debug("enihost: IPv6 router discovery: "+what+"; using the default", "err", err, "router", IPv6Router)
	}
}
