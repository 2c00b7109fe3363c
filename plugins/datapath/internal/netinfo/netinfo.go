// Package netinfo resolves a datapath Config against the links, addresses
// and routes of the network namespace of the calling OS thread, through
// netlink. It is shared by the built-in datapaths so that iptables and
// ebpf agree on what "the egress interfaces" and "the node's address" are.
package netinfo

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/allot-ipam/allot/sdk/datapath"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Egress is one egress interface and the source addresses masqueraded
// traffic gets on it (invalid Addr when the family has none).
type Egress struct {
	Name  string
	Index int
	V4    netip.Addr
	V6    netip.Addr
}

// ErrNoEgress is returned when configured egress patterns match nothing.
var ErrNoEgress = errors.New("no interface matches EgressInterfaces")

// Resolve lists the egress interfaces for cfg, sorted by name. With
// cfg.EgressInterfaces empty every link is an egress interface except
// loopback, links matching the pod-interface patterns and links enslaved
// to a bridge or bond (their traffic leaves through the master).
func Resolve(cfg datapath.Config) ([]Egress, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	pods := cfg.EffectivePodInterfaces()
	var out []Egress
	for _, l := range links {
		a := l.Attrs()
		if len(cfg.EgressInterfaces) > 0 {
			if !datapath.MatchInterface(cfg.EgressInterfaces, a.Name) {
				continue
			}
		} else if a.Flags&net.FlagLoopback != 0 || datapath.MatchInterface(pods, a.Name) || a.MasterIndex != 0 {
			continue
		}
		e := Egress{Name: a.Name, Index: a.Index}
		if e.V4, err = sourceAddr(l, netlink.FAMILY_V4, cfg.MasqueradeToRouteSource); err != nil {
			return nil, err
		}
		if e.V6, err = sourceAddr(l, netlink.FAMILY_V6, cfg.MasqueradeToRouteSource); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Egress) int { return strings.Compare(a.Name, b.Name) })
	if len(out) == 0 && len(cfg.EgressInterfaces) > 0 {
		return nil, fmt.Errorf("EgressInterfaces %v: %w", cfg.EgressInterfaces, ErrNoEgress)
	}
	return out, nil
}

// sourceAddr picks the address masqueraded traffic leaving l gets: with
// routeSource, the preferred source (RTA_PREFSRC) of l's default route, or
// else of any of l's routes; otherwise (or when no route names a source)
// the first primary global address, as MASQUERADE would for a single-
// address interface.
func sourceAddr(l netlink.Link, family int, routeSource bool) (netip.Addr, error) {
	if routeSource {
		routes, err := netlink.RouteList(l, family)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("list routes of %s: %w", l.Attrs().Name, err)
		}
		var best netip.Addr
		for _, r := range routes {
			src, ok := netip.AddrFromSlice(r.Src)
			if !ok || r.Src == nil {
				continue
			}
			src = src.Unmap()
			isDefault := r.Dst == nil || func() bool { ones, _ := r.Dst.Mask.Size(); return ones == 0 }()
			if isDefault {
				return src, nil
			}
			if !best.IsValid() {
				best = src
			}
		}
		if best.IsValid() {
			return best, nil
		}
	}
	addrs, err := netlink.AddrList(l, family)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("list addresses of %s: %w", l.Attrs().Name, err)
	}
	for _, a := range addrs {
		if a.Scope != unix.RT_SCOPE_UNIVERSE || a.Flags&(unix.IFA_F_SECONDARY|unix.IFA_F_DEPRECATED|unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		return ip.Unmap(), nil
	}
	return netip.Addr{}, nil
}
