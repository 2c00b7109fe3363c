// Package enihost is the host side of ENI mode, as the AWS VPC CNI sets it up
// (amazon-vpc-cni-k8s, docs/cni-proposal.md "Pod to external communications"): a pod's
// address is a secondary address of one ENI, and the VPC drops a packet whose source address
// leaves through another interface. So each secondary ENI gets its own routing table (a
// default route via its subnet's router, out of that ENI), and each pod
//
//	a route in the main table:  <pod> dev <pod's host-side veth, or its bridge> scope link
//	512:  to <pod> lookup main          (traffic to the pod stays on the node's main table)
//	1536: from <pod> lookup <eni table> (traffic from the pod leaves through its ENI)
//
// Pods on the primary ENI (device index 0) need no 1536 rule: the main table's default route
// already leaves through it. An IPv6 prefix delegated to an ENI (the node's /80, as the AWS
// VPC CNI's IPv6 prefix delegation gives it) gets the two rules for the whole prefix
// instead of one pair per pod, and the ENI's table a default route via the VPC router's
// link-local address out of that ENI (learnt from the kernel's router discovery on that
// link, IPv6Router until known; accept_ra is left as found, see ipv6Router). Tables are numbered device index + TableBase; rules and table
// routes carry allot's protocol number (Protocol), pod routes their own (PodRouteProtocol),
// so a restarted agent finds its own and removes the stale ones without touching anything
// else, node routes included.
//
// The pod's host-side veth is found from the kernel (HostVeths): the veth whose peer, in a
// pod's network namespace, holds the pod's address. allot is the IPAM plugin, called before
// the interface plugin creates the veth, so the Controller keeps retrying until it appears.
package enihost

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Rule priorities, the AWS VPC CNI's.
const (
	ToPodPriority   = 512
	FromPodPriority = 1536
)

// TableBase is added to an ENI's device index to make its routing table number (the AWS
// VPC CNI uses the device index itself; the base keeps allot's tables apart from a VPC CNI
// left on the node during a migration).
const TableBase = 1000

// Protocol marks allot's rules and ENI table routes (the same number as its node routes,
// which live in the main table with a gateway, never in an ENI table).
const Protocol = 0xa7

// PodRouteProtocol marks the per-pod routes in the main table: a number of their own, so
// that removing stale pod routes can never touch a node route (core/noderoutes, Protocol).
const PodRouteProtocol = 0xa8

// ENI is one interface of the instance.
type ENI struct {
	// Index is the device index (0 = primary).
	Index int
	// MAC finds the interface on the host.
	MAC string
	// Subnet is the ENI's subnet; its router is the subnet's first host address, as in a VPC.
	Subnet netip.Prefix
	// IPv6Prefixes are the IPv6 prefixes delegated to the ENI: its pods' addresses come from
	// them, and the rules name the prefixes rather than each pod.
	IPv6Prefixes []netip.Prefix
}

// IPv6Router is the next hop of an ENI table's IPv6 default route until the kernel has
// learnt the VPC router's link-local address on that ENI from a router advertisement
// (ipv6Router): fe80:ec2::1, the link-local address the VPC reserves for its router beside
// the EUI-64 one it advertises (Amazon VPC user guide, "Subnet CIDR blocks"), which the AWS
// VPC CNI (networkutils.GetIPv6Gateway) and Cilium's ENI IPAM use for every ENI. Not fe80::1:
// that is the pods' own next hop, which their host-side veth answers, not the VPC.
var IPv6Router = netip.MustParseAddr("fe80:ec2::1")

// Pod is one pod address, the ENI device index that holds it and the pod's host-side veth.
type Pod struct {
	Addr     netip.Addr
	ENIIndex int
	// HostLink is the ifindex of the pod's host-side veth (or of the bridge it is a port
	// of); 0 when not found (yet): a route
	// set earlier for the address is then kept (an agent restart, a pod whose namespace is
	// not visible), none is added.
	HostLink int
}

// Host applies ENI host routing in one network namespace.
type Host struct {
	// Handle is the netlink handle; nil means the caller's namespace.
	Handle *netlink.Handle
	Log    *slog.Logger
	// MTU, if set, is given to every secondary ENI's link as it is brought up (the AWS VPC
	// CNI sets AWS_VPC_ENI_MTU on them): the pods' veths carry it, and a link the OS left at
	// 1500 would not.
	MTU int

	// routers6 is the IPv6 router last used per ENI link, to log a change once.
	routers6 map[int]netip.Addr
}

// Result is what Sync changed and what it could not do.
type Result struct {
	RulesAdded, RulesRemoved, RoutesSet int
	// TableRoutesRemoved counts ENI table routes removed because their ENI, or its IPv6
	// prefix, is gone.
	TableRoutesRemoved int
	// PodRoutesSet and PodRoutesRemoved count main-table routes to pods' veths.
	PodRoutesSet, PodRoutesRemoved int
	Errors                         []error
}

func (h *Host) nl() *netlink.Handle { return nl(h.Handle) }

// Sync makes the host's ENI tables and pod rules match enis and pods: every secondary ENI's
// table has its routes; every pod on a secondary ENI has its two rules; allot's rules for
// pods that are gone are removed. An ENI not found on the host (not attached yet) is an error
// in the Result for its pods; the rest is applied.
func (h *Host) Sync(enis []ENI, pods []Pod) (Result, error) {
	var res Result
	ready, err := h.syncTables(enis, &res)
	if err != nil {
		return res, err
	}
	// Pod routes first: a rule sending the pod's traffic to the main table is only useful
	// once the main table knows the pod.
	if err := h.podRoutes(pods, &res); err != nil {
		return res, err
	}
	want, errs := wantedRules(enis, pods, ready)
	res.Errors = append(res.Errors, errs...)
	if err := h.syncRules(want, &res); err != nil {
		return res, err
	}
	if res.RulesAdded+res.RulesRemoved+res.PodRoutesSet+res.PodRoutesRemoved+res.TableRoutesRemoved > 0 && h.Log != nil {
		h.Log.Info("ENI pod rules and routes synced", "rules_added", res.RulesAdded, "rules_removed", res.RulesRemoved,
			"routes_set", res.PodRoutesSet, "routes_removed", res.PodRoutesRemoved, "table_routes_removed", res.TableRoutesRemoved, "pods", len(pods))
	}
	return res, nil
}

// syncTables sets the route table of every secondary ENI found on the host and returns the
// device indexes that are ready (the primary, 0, always is).
func (h *Host) syncTables(enis []ENI, res *Result) (map[int]bool, error) {
	links, err := h.linksByMAC()
	if err != nil {
		return nil, err
	}
	ready := map[int]bool{}
	for _, e := range enis {
		if e.Index == 0 {
			ready[0] = true
			continue
		}
		l, ok := links[strings.ToLower(e.MAC)]
		if !ok {
			res.Errors = append(res.Errors, fmt.Errorf("enihost: ENI device %d (%s): no interface with that MAC on the host yet", e.Index, e.MAC))
			continue
		}
		if err := h.tableRoutes(e, l); err != nil {
			res.Errors = append(res.Errors, err)
			continue
		}
		res.RoutesSet++
		ready[e.Index] = true
	}
	if err := h.pruneTables(enis, res); err != nil {
		return nil, err
	}
	return ready, nil
}

// pruneTables removes the ENI table routes of allot's that no listed ENI needs any more: the
// tables of ENIs gone, and the IPv6 default route of an ENI whose prefix is gone (its rules
// go with the prefix; the route would otherwise stay behind, unused).
func (h *Host) pruneTables(enis []ENI, res *Result) error {
	keep := map[[2]int]bool{} // {table, family}
	for _, e := range enis {
		if e.Subnet.IsValid() {
			keep[[2]int{TableBase + e.Index, family(e.Subnet.Addr())}] = true
		}
		if len(e.IPv6Prefixes) > 0 {
			keep[[2]int{TableBase + e.Index, netlink.FAMILY_V6}] = true
		}
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := h.tableRouteList(fam)
		if err != nil {
			return err
		}
		for i := range rs {
			if keep[[2]int{rs[i].Table, fam}] {
				continue
			}
			if err := h.nl().RouteDel(&rs[i]); err != nil && !errors.Is(err, unix.ESRCH) {
				res.Errors = append(res.Errors, fmt.Errorf("enihost: remove table %d route %s: %w", rs[i].Table, rs[i].Dst, err))
				continue
			}
			res.TableRoutesRemoved++
		}
	}
	return nil
}

// tableRouteList lists allot's routes of the ENI tables in family fam.
func (h *Host) tableRouteList(fam int) ([]netlink.Route, error) {
	rs, err := h.nl().RouteListFiltered(fam, &netlink.Route{Protocol: Protocol, Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("enihost: list ENI table routes: %w", err)
	}
	out := rs[:0]
	for _, r := range rs {
		if r.Table > TableBase {
			out = append(out, r)
		}
	}
	return out, nil
}

func family(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// wantedRules are the policy rules the pods and the ENIs' IPv6 prefixes need, given the ENI
// devices that are ready; a pod of a device that is not is an error. A pod inside a prefix
// of its ENI needs no rules of its own.
func wantedRules(enis []ENI, pods []Pod, ready map[int]bool) (map[ruleKey]bool, []error) {
	want := map[ruleKey]bool{}
	prefixes := map[int][]netip.Prefix{}
	for _, e := range enis {
		if e.Index == 0 || ready[e.Index] {
			prefixes[e.Index] = e.IPv6Prefixes
			for _, p := range e.IPv6Prefixes {
				addRules(want, p.Masked(), e.Index)
			}
		}
	}
	var errs []error
	for _, p := range pods {
		if !p.Addr.IsValid() {
			continue
		}
		if p.ENIIndex != 0 && !ready[p.ENIIndex] {
			errs = append(errs, fmt.Errorf("enihost: pod %s: ENI device %d is not ready on the host", p.Addr, p.ENIIndex))
			continue
		}
		if !slices.ContainsFunc(prefixes[p.ENIIndex], func(q netip.Prefix) bool { return q.Contains(p.Addr) }) {
			addRules(want, netip.PrefixFrom(p.Addr, p.Addr.BitLen()), p.ENIIndex)
		}
	}
	return want, errs
}

// addRules adds the rules of the pod addresses p on ENI device eni: the to-pod rule for
// every ENI, the primary's included (without it the answer of a secondary-ENI pod to a
// primary-ENI pod would follow the former's from-rule out of its ENI instead of staying on
// the node), the from-pod rule for secondary ENIs.
func addRules(want map[ruleKey]bool, p netip.Prefix, eni int) {
	want[ruleKey{p, ToPodPriority, unix.RT_TABLE_MAIN}] = true
	if eni != 0 {
		want[ruleKey{p, FromPodPriority, TableBase + eni}] = true
	}
}

// syncRules removes the rules of allot's priorities not in want and adds those missing.
func (h *Host) syncRules(want map[ruleKey]bool, res *Result) error {
	have, err := h.rules()
	if err != nil {
		return err
	}
	for k, r := range have {
		if want[k] {
			continue
		}
		if err := h.nl().RuleDel(r); err != nil && !errors.Is(err, unix.ENOENT) {
			res.Errors = append(res.Errors, fmt.Errorf("enihost: remove rule %s: %w", k, err))
			continue
		}
		res.RulesRemoved++
	}
	for _, k := range missingRules(want, have) {
		if err := h.nl().RuleAdd(k.rule()); err != nil && !errors.Is(err, unix.EEXIST) {
			res.Errors = append(res.Errors, fmt.Errorf("enihost: add rule %s: %w", k, err))
			continue
		}
		res.RulesAdded++
	}
	return nil
}

// missingRules are the rules of want not in have, by address then priority.
func missingRules(want map[ruleKey]bool, have map[ruleKey]*netlink.Rule) []ruleKey {
	keys := make([]ruleKey, 0, len(want))
	for k := range want {
		if _, ok := have[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b ruleKey) int {
		if c := a.pods.Addr().Compare(b.pods.Addr()); c != 0 {
			return c
		}
		if c := cmp.Compare(a.pods.Bits(), b.pods.Bits()); c != 0 {
			return c
		}
		return cmp.Compare(a.prio, b.prio)
	})
	return keys
}

// podRoutes makes the main table's pod routes match pods: a route to each pod with a known
// host-side veth, kept for a pod whose veth is unknown, removed for addresses no pod holds.
func (h *Host) podRoutes(pods []Pod, res *Result) error {
	have, err := h.podRouteList()
	if err != nil {
		return err
	}
	listed := map[netip.Addr]int{}
	for _, p := range pods {
		if p.Addr.IsValid() {
			listed[p.Addr] = p.HostLink
		}
	}
	for a, r := range have {
		if _, ok := listed[a]; ok {
			continue
		}
		if err := h.nl().RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
			res.Errors = append(res.Errors, fmt.Errorf("enihost: remove route to pod %s: %w", a, err))
			continue
		}
		res.PodRoutesRemoved++
	}
	for _, a := range slices.SortedFunc(maps.Keys(listed), netip.Addr.Compare) {
		link := listed[a]
		if r, ok := have[a]; link == 0 || ok && r.LinkIndex == link {
			continue
		}
		if err := h.nl().RouteReplace(podRoute(a, link)); err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("enihost: route to pod %s via ifindex %d: %w", a, link, err))
			continue
		}
		res.PodRoutesSet++
	}
	return nil
}

func podRoute(a netip.Addr, link int) *netlink.Route {
	bits := a.BitLen()
	return &netlink.Route{LinkIndex: link, Dst: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)},
		Scope: netlink.SCOPE_LINK, Table: unix.RT_TABLE_MAIN, Protocol: PodRouteProtocol}
}

// podRouteList returns allot's pod routes of the main table by address.
func (h *Host) podRouteList() (map[netip.Addr]*netlink.Route, error) {
	out := map[netip.Addr]*netlink.Route{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := h.nl().RouteListFiltered(fam, &netlink.Route{Protocol: PodRouteProtocol, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("enihost: list pod routes: %w", err)
		}
		for i := range rs {
			r := &rs[i]
			if r.Dst == nil {
				continue
			}
			if ones, bits := r.Dst.Mask.Size(); ones != bits {
				continue
			}
			if a, ok := netip.AddrFromSlice(r.Dst.IP); ok {
				out[a.Unmap()] = r
			}
		}
	}
	return out, nil
}

// PodRoutes returns the main table's pod routes: address -> ifindex of the veth (tests,
// diagnostics).
func (h *Host) PodRoutes() (map[netip.Addr]int, error) {
	rs, err := h.podRouteList()
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]int, len(rs))
	for a, r := range rs {
		out[a] = r.LinkIndex
	}
	return out, nil
}

// RulePrefixes returns the pod addresses of each of allot's rules (a host prefix, or an
// ENI's IPv6 prefix), sorted, once per rule (tests, diagnostics).
func (h *Host) RulePrefixes() ([]netip.Prefix, error) {
	rs, err := h.rules()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(rs))
	for k := range rs {
		out = append(out, k.pods)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	return out, nil
}

// RemoveAll removes every rule, ENI table route and pod route of allot's (uninstall).
func (h *Host) RemoveAll() error {
	have, err := h.rules()
	if err != nil {
		return err
	}
	var errs []error
	routes, err := h.podRouteList()
	if err != nil {
		errs = append(errs, err)
	}
	for a, r := range routes {
		if err := h.nl().RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("enihost: remove route to pod %s: %w", a, err))
		}
	}
	for k, r := range have {
		if err := h.nl().RuleDel(r); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("enihost: remove rule %s: %w", k, err))
		}
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := h.tableRouteList(fam)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range rs {
			if err := h.nl().RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// tableRoutes sets ENI e's table: the subnet's router on-link through e and the default
// route via it, and with an IPv6 prefix the IPv6 default route via the VPC router's
// link-local address on e (ipv6Router) through e.
func (h *Host) tableRoutes(e ENI, l netlink.Link) error {
	var router6 netip.Addr
	if len(e.IPv6Prefixes) > 0 {
		router6 = h.ipv6Router(l.Attrs().Index, TableBase+e.Index)
	}
	routes, err := tableRoutes(e, l.Attrs().Index, router6)
	if err != nil {
		return err
	}
	table := TableBase + e.Index
	if h.MTU > 0 && l.Attrs().MTU != h.MTU {
		if err := h.nl().LinkSetMTU(l, h.MTU); err != nil {
			return fmt.Errorf("enihost: ENI device %d: set %s MTU %d: %w", e.Index, l.Attrs().Name, h.MTU, err)
		}
	}
	if err := h.nl().LinkSetUp(l); err != nil {
		return fmt.Errorf("enihost: ENI device %d: set %s up: %w", e.Index, l.Attrs().Name, err)
	}
	for _, r := range routes {
		if err := h.nl().RouteReplace(r); err != nil {
			return fmt.Errorf("enihost: ENI device %d: table %d route %s: %w", e.Index, table, r.Dst, err)
		}
	}
	return nil
}

// tableRoutes are the routes of ENI e's table, out of link; router6 is the IPv6 next hop.
// An ENI with an IPv6 prefix and no (valid) subnet still gets its IPv6 route: the subnet is
// only needed for the IPv4 router.
func tableRoutes(e ENI, link int, router6 netip.Addr) ([]*netlink.Route, error) {
	table := TableBase + e.Index
	var routes []*netlink.Route
	hasRouter := e.Subnet.IsValid() && e.Subnet.Addr().BitLen()-e.Subnet.Bits() >= 2
	if hasRouter {
		gw := e.Subnet.Masked().Addr().Next()
		bits := gw.BitLen()
		routes = append(routes,
			&netlink.Route{LinkIndex: link, Dst: &net.IPNet{IP: gw.AsSlice(), Mask: net.CIDRMask(bits, bits)}, Scope: netlink.SCOPE_LINK, Table: table, Protocol: Protocol},
			&netlink.Route{LinkIndex: link, Dst: &net.IPNet{IP: zero(gw), Mask: net.CIDRMask(0, bits)}, Gw: gw.AsSlice(), Table: table, Protocol: Protocol})
	}
	if len(e.IPv6Prefixes) > 0 && !(hasRouter && e.Subnet.Addr().Is6()) {
		routes = append(routes, &netlink.Route{LinkIndex: link, Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
			Gw: router6.AsSlice(), Table: table, Protocol: Protocol})
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("enihost: ENI device %d: subnet %s has no router address", e.Index, e.Subnet)
	}
	return routes, nil
}

func zero(a netip.Addr) net.IP {
	if a.Is4() {
		return net.IPv4zero.To4()
	}
	return net.IPv6zero
}

func (h *Host) linksByMAC() (map[string]netlink.Link, error) {
	ls, err := h.nl().LinkList()
	if err != nil {
		return nil, fmt.Errorf("enihost: list links: %w", err)
	}
	out := map[string]netlink.Link{}
	for _, l := range ls {
		if mac := l.Attrs().HardwareAddr; len(mac) > 0 {
			out[strings.ToLower(mac.String())] = l
		}
	}
	return out, nil
}

// ruleKey is one of allot's rules: pods is a pod's host prefix or an ENI's IPv6 prefix.
type ruleKey struct {
	pods  netip.Prefix
	prio  int
	table int
}

func (k ruleKey) String() string {
	if k.prio == ToPodPriority {
		return fmt.Sprintf("%d: to %s lookup %d", k.prio, k.pods, k.table)
	}
	return fmt.Sprintf("%d: from %s lookup %d", k.prio, k.pods, k.table)
}

func (k ruleKey) rule() *netlink.Rule {
	r := netlink.NewRule()
	a := k.pods.Addr()
	n := &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(k.pods.Bits(), a.BitLen())}
	if k.prio == ToPodPriority {
		r.Dst = n
	} else {
		r.Src = n
	}
	r.Priority, r.Table, r.Protocol = k.prio, k.table, Protocol
	r.Family = family(a)
	return r
}

// rules lists allot's rules (by protocol) keyed by what they do.
func (h *Host) rules() (map[ruleKey]*netlink.Rule, error) {
	out := map[ruleKey]*netlink.Rule{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := h.nl().RuleList(fam)
		if err != nil {
			return nil, fmt.Errorf("enihost: list rules: %w", err)
		}
		for i := range rs {
			r := &rs[i]
			if r.Protocol != Protocol {
				continue
			}
			var n *net.IPNet
			switch r.Priority {
			case ToPodPriority:
				n = r.Dst
			case FromPodPriority:
				n = r.Src
			default:
				continue
			}
			if n == nil {
				continue
			}
			a, ok := netip.AddrFromSlice(n.IP)
			ones, _ := n.Mask.Size()
			if !ok {
				continue
			}
			out[ruleKey{netip.PrefixFrom(a.Unmap(), ones), r.Priority, r.Table}] = r
		}
	}
	return out, nil
}
