package eni

import (
	"math"
	"net/netip"
	"slices"
	"sort"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// The functions in this file are the engine's decisions as pure functions of a node's
// inventory, so each rule of Cilium's ENI allocator ("Operational Details" in
// docs.cilium.io/en/stable/network/concepts/ipam/eni/) is tested on its own.

// unlimited stands for a limit the backend reported as 0 (unknown / none).
const unlimited = math.MaxInt32

// Selector says which of a node's interfaces carry pod addresses.
type Selector struct {
	// First is the first interface index (spec.eni.first-interface-index).
	First int
	// ExcludeTags (Cilium's --exclude-interface-tags): an interface carrying every one of
	// these tags is never used for pods: no address of it is handed out, allocated on it or
	// released from it. It still takes a device index and counts against the node's
	// interface limit. Empty excludes nothing.
	ExcludeTags map[string]string
	// Prefixes: the node's free slots take IPv4 /28 prefixes (prefix delegation), so each
	// slot counts PrefixSize4 addresses.
	Prefixes bool
}

// PrefixSize4 is the number of addresses of a delegated IPv4 prefix (AWS: a /28).
const PrefixSize4 = 16

// PoolAddrs are the interface's pod addresses: its secondary addresses and every address
// of its IPv4 prefixes, sorted. Pods get them one by one, as Cilium hands out the addresses
// of a /28 (its operator writes all 16 into the node's pool).
func PoolAddrs(ifc cloud.Interface) []netip.Addr {
	out := append([]netip.Addr(nil), ifc.Addresses...)
	for _, p := range ifc.Prefixes {
		if p.Addr().Is4() {
			for a := p.Masked().Addr(); p.Contains(a); a = a.Next() {
				out = append(out, a)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// prefixes4 counts the interface's IPv4 prefixes (each takes one address slot).
func prefixes4(ifc cloud.Interface) int {
	n := 0
	for _, p := range ifc.Prefixes {
		if p.Addr().Is4() {
			n++
		}
	}
	return n
}

// Excluded reports whether ifc carries every one of the exclude tags.
func (s Selector) Excluded(ifc cloud.Interface) bool {
	if len(s.ExcludeTags) == 0 {
		return false
	}
	for k, v := range s.ExcludeTags {
		if got, ok := ifc.Tags[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Eligible returns the interfaces at or above sel.First that are not excluded, sorted by
// index: the ones whose addresses are handed to pods.
func Eligible(inv cloud.NodeInventory, sel Selector) []cloud.Interface {
	var out []cloud.Interface
	for _, ifc := range inv.Interfaces {
		if ifc.Index >= sel.First && !sel.Excluded(ifc) {
			out = append(out, ifc)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// Available counts the addresses of the eligible interfaces (the node's pool).
func Available(inv cloud.NodeInventory, sel Selector) int {
	n := 0
	for _, ifc := range Eligible(inv, sel) {
		n += len(ifc.Addresses) + PrefixSize4*prefixes4(ifc)
	}
	return n
}

// FreeOnInterface is how many more address slots the interface has, each for one address
// or one prefix: the per-interface limit counts the interface's own primary address, which
// Addresses excludes, and each IPv4 prefix takes a slot (AWS).
func FreeOnInterface(ifc cloud.Interface, l cloud.Limits) int {
	if l.AddressesPerInterface <= 0 {
		return unlimited
	}
	return max(l.AddressesPerInterface-1-len(ifc.Addresses)-prefixes4(ifc), 0)
}

// Capacity is how many pod addresses the node can hold at most, from its instance type's
// limits: every interface it may have at or above sel.First, less the excluded ones it has,
// times the addresses each can carry besides its own primary address. This is Cilium's
// instance limit used as max-allocate when none is set (pkg/ipam/node.go getMaxAllocate,
// pkg/aws/eni/node.go GetMaximumAllocatableIPv4: (adapters - first-interface-index) x
// (IPv4 per adapter - 1); docs.cilium.io .../ipam/eni/, "Instance type limits"), times
// PrefixSize4 with prefix delegation (Cilium multiplies by its ENIPDBlockSizeIPv4). 0 means
// unknown (a limit the backend did not report), i.e. no cap.
func Capacity(inv cloud.NodeInventory, sel Selector) int {
	l := inv.Limits
	if l.MaxInterfaces <= 0 || l.AddressesPerInterface <= 0 {
		return 0
	}
	slots := l.MaxInterfaces - sel.First
	for _, ifc := range inv.Interfaces {
		if ifc.Index >= sel.First && sel.Excluded(ifc) {
			slots--
		}
	}
	perSlot := 1
	if sel.Prefixes {
		perSlot = PrefixSize4
	}
	return max(slots, 0) * max(l.AddressesPerInterface-1, 0) * perSlot
}

// PrefixAmount is AllocationAmount in prefixes: want addresses rounded up to whole prefixes
// (Cilium's ip.PrefixCeil), no more than the interface's free slots, and at least one when
// the subnet's free count cannot tell (the cloud answers ErrNoFreePrefix if no block is left).
func PrefixAmount(onSubnet, onInterface, want int) int {
	if want <= 0 {
		return 0
	}
	return max(min(onInterface, (want+PrefixSize4-1)/PrefixSize4, max(onSubnet/PrefixSize4, 1)), 0)
}

// FreeOnSubnet is the subnet's free count as an int; a subnet the inventory does not list is
// taken as unconstrained (the cloud will say if it is full).
func FreeOnSubnet(inv cloud.NodeInventory, id string) int {
	for _, s := range inv.Subnets {
		if s.ID == id {
			return int(min(s.Free, uint64(unlimited)))
		}
	}
	return unlimited
}

// AllocationAmount is the amount of Cilium's ENI allocation: min(AvailableOnSubnet,
// min(AvailableOnENI, NeededAddresses + max-above-watermark + surgeAllocate)); want is the last
// term (AllocationTarget).
func AllocationAmount(onSubnet, onInterface, want int) int {
	return max(min(onSubnet, min(onInterface, want)), 0)
}

// PickInterface is the first eligible interface (lowest index) with free slots whose subnet
// has free addresses, skipping the IDs in skip (found full by the cloud this pass). It returns
// the interface and its free slots and subnet free count.
func PickInterface(inv cloud.NodeInventory, sel Selector, skip map[string]bool) (ifc cloud.Interface, onInterface, onSubnet int, ok bool) {
	for _, c := range Eligible(inv, sel) {
		if skip[c.ID] {
			continue
		}
		onIfc, onSub := FreeOnInterface(c, inv.Limits), FreeOnSubnet(inv, c.Subnet)
		if onIfc > 0 && onSub > 0 {
			return c, onIfc, onSub, true
		}
	}
	return cloud.Interface{}, 0, 0, false
}

// Primary returns the node's primary interface (marked Primary, else index 0).
func Primary(inv cloud.NodeInventory) (cloud.Interface, bool) {
	for _, ifc := range inv.Interfaces {
		if ifc.Primary {
			return ifc, true
		}
	}
	for _, ifc := range inv.Interfaces {
		if ifc.Index == 0 {
			return ifc, true
		}
	}
	return cloud.Interface{}, false
}

// SubnetRules are the subnet choices of the configuration.
type SubnetRules struct {
	IDs  []string
	Tags map[string]string
}

func (r SubnetRules) configured() bool { return len(r.IDs) > 0 || len(r.Tags) > 0 }

func (r SubnetRules) match(s cloud.Subnet) bool {
	if len(r.IDs) > 0 {
		found := false
		for _, id := range r.IDs {
			if id == s.ID {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	for k, v := range r.Tags {
		if got, ok := s.Tags[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// PickSubnet chooses the subnet of a new interface by Cilium's "ENI Creation" rules (without
// its route-table step): subnets of the node's VPC and zone; if subnet IDs or tags are
// configured, the matching one with the most free addresses; otherwise eth0's subnet if it has
// a free address, else the one with the most free addresses. need is the least number of free
// addresses the subnet must have (the interface's own address plus at least one for pods). Ties
// go to the lower subnet ID.
func PickSubnet(inv cloud.NodeInventory, zone string, rules SubnetRules, need uint64) (cloud.Subnet, bool) {
	eth0, hasEth0 := Primary(inv)
	var vpc string
	for _, s := range inv.Subnets {
		if hasEth0 && s.ID == eth0.Subnet {
			vpc = s.VPC
			if zone == "" {
				zone = s.Zone
			}
		}
	}
	var cands []cloud.Subnet
	for _, s := range inv.Subnets {
		if (vpc == "" || s.VPC == vpc) && (zone == "" || s.Zone == zone) && s.Free >= need {
			cands = append(cands, s)
		}
	}
	if rules.configured() {
		kept := cands[:0]
		for _, s := range cands {
			if rules.match(s) {
				kept = append(kept, s)
			}
		}
		cands = kept
	} else if hasEth0 {
		for _, s := range cands {
			if s.ID == eth0.Subnet {
				return s, true
			}
		}
	}
	if len(cands) == 0 {
		return cloud.Subnet{}, false
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].Free != cands[j].Free {
			return cands[i].Free > cands[j].Free
		}
		return cands[i].ID < cands[j].ID
	})
	return cands[0], true
}

// PickIndex is the first free device index at or above first (never 0: that is the
// primary interface's), or false when the node is at its interface limit.
func PickIndex(inv cloud.NodeInventory, first int) (int, bool) {
	if l := inv.Limits.MaxInterfaces; l > 0 && len(inv.Interfaces) >= l {
		return 0, false
	}
	taken := map[int]bool{}
	for _, ifc := range inv.Interfaces {
		taken[ifc.Index] = true
	}
	for i := max(first, 1); ; i++ {
		if !taken[i] {
			return i, true
		}
	}
}

// Unit is what goes back to the cloud in one piece: a secondary address, or a delegated
// IPv4 prefix with all its addresses (released only whole, once none is in use: Cilium's
// release of prefixes, and the AWS VPC CNI's, free only prefixes without a pod).
type Unit struct {
	Interface string
	// Prefix is the delegated prefix, invalid for a single address.
	Prefix netip.Prefix
	Addrs  []netip.Addr
}

// Units lists the release units of the eligible interfaces, in interface order, addresses
// before prefixes. IPv6 prefixes are no units: a node keeps its /80.
func Units(inv cloud.NodeInventory, sel Selector) []Unit {
	var out []Unit
	for _, ifc := range Eligible(inv, sel) {
		for _, a := range ifc.Addresses {
			out = append(out, Unit{Interface: ifc.ID, Addrs: []netip.Addr{a}})
		}
		for _, p := range ifc.Prefixes {
			if p.Addr().Is4() {
				out = append(out, Unit{Interface: ifc.ID, Prefix: p, Addrs: PoolAddrs(cloud.Interface{Prefixes: []netip.Prefix{p}})})
			}
		}
	}
	return out
}

// PickRelease chooses what to release: on the eligible interface with the most free
// addresses in free units (none of its addresses in use or refused by the agent), whole
// units worth at most excess addresses, highest first. Ties go to the higher index (keep the
// low interfaces full).
func PickRelease(inv cloud.NodeInventory, sel Selector, inUse func(netip.Addr) bool, excess int) (string, []Unit) {
	if excess <= 0 {
		return "", nil
	}
	free := map[string][]Unit{}
	count := map[string]int{}
	for _, u := range Units(inv, sel) {
		if !slices.ContainsFunc(u.Addrs, inUse) {
			free[u.Interface] = append(free[u.Interface], u)
			count[u.Interface] += len(u.Addrs)
		}
	}
	var best string
	for _, ifc := range Eligible(inv, sel) {
		if count[ifc.ID] > 0 && count[ifc.ID] >= count[best] {
			best = ifc.ID
		}
	}
	units := free[best]
	sort.Slice(units, func(i, j int) bool { return units[j].Addrs[0].Less(units[i].Addrs[0]) })
	var out []Unit
	for _, u := range units {
		if len(u.Addrs) <= excess {
			out = append(out, u)
			excess -= len(u.Addrs)
		}
	}
	if len(out) == 0 {
		return "", nil
	}
	return best, out
}

// HasIPv6Prefix reports whether one of the interfaces carries an IPv6 prefix.
func HasIPv6Prefix(ifcs []cloud.Interface) bool {
	for _, ifc := range ifcs {
		for _, p := range ifc.Prefixes {
			if p.Addr().Is6() {
				return true
			}
		}
	}
	return false
}
