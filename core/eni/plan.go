package eni

import (
	"math"
	"net/netip"
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
		n += len(ifc.Addresses)
	}
	return n
}

// FreeOnInterface is how many more addresses the interface can carry: the per-interface
// limit counts the interface's own primary address, which Addresses excludes.
func FreeOnInterface(ifc cloud.Interface, l cloud.Limits) int {
	if l.AddressesPerInterface <= 0 {
		return unlimited
	}
	return max(l.AddressesPerInterface-1-len(ifc.Addresses), 0)
}

// Capacity is how many pod addresses the node can hold at most, from its instance type's
// limits: every interface it may have at or above sel.First, less the excluded ones it has,
// times the addresses each can carry besides its own primary address. This is Cilium's
// instance limit used as max-allocate when none is set (pkg/ipam/node.go getMaxAllocate,
// pkg/aws/eni/node.go GetMaximumAllocatableIPv4: (adapters - first-interface-index) x
// (IPv4 per adapter - 1); docs.cilium.io .../ipam/eni/, "Instance type limits"). 0 means
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
	return max(slots, 0) * max(l.AddressesPerInterface-1, 0)
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

// PickRelease chooses what to release: on the eligible interface with the most free
// addresses (not in use, not refused by the agent), up to excess of them, highest addresses
// first. Ties go to the higher index (keep the low interfaces full).
func PickRelease(inv cloud.NodeInventory, sel Selector, inUse func(netip.Addr) bool, excess int) (string, []netip.Addr) {
	if excess <= 0 {
		return "", nil
	}
	var best string
	var bestFree []netip.Addr
	for _, ifc := range Eligible(inv, sel) {
		var free []netip.Addr
		for _, a := range ifc.Addresses {
			if !inUse(a) {
				free = append(free, a)
			}
		}
		if len(free) > 0 && len(free) >= len(bestFree) {
			best, bestFree = ifc.ID, free
		}
	}
	sort.Slice(bestFree, func(i, j int) bool { return bestFree[j].Less(bestFree[i]) })
	if len(bestFree) > excess {
		bestFree = bestFree[:excess]
	}
	return best, bestFree
}
