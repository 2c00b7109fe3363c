package enihost

import (
	"net/netip"

	"github.com/vishvananda/netlink"
)

// FromRule returns allot's from-pod rule of a, or nil (tests of package enihost_test).
func (h *Host) FromRule(a netip.Addr) *netlink.Rule {
	rs, _ := h.rules()
	for k, r := range rs {
		if k.pods == netip.PrefixFrom(a, a.BitLen()) && k.prio == FromPodPriority {
			return r
		}
	}
	return nil
}

// FromPrefixRule returns allot's from-pod rule of prefix p, or nil.
func (h *Host) FromPrefixRule(p netip.Prefix) *netlink.Rule {
	rs, _ := h.rules()
	for k, r := range rs {
		if k.pods == p && k.prio == FromPodPriority {
			return r
		}
	}
	return nil
}
