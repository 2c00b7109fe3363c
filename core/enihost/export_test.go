package enihost

import (
	"net/netip"

	"github.com/vishvananda/netlink"
)

// FromRule returns allot's from-pod rule of a, or nil (tests of package enihost_test).
func (h *Host) FromRule(a netip.Addr) *netlink.Rule {
	rs, _ := h.rules()
	for k, r := range rs {
		if k.addr == a && k.prio == FromPodPriority {
			return r
		}
	}
	return nil
}
