package main

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// maxAddresses bounds the list so that a typo like "fd00::-fd00::ffff:ffff" cannot eat the
// node's memory.
const maxAddresses = 1 << 20

// ParseAddresses reads a comma- or space-separated list of addresses and inclusive ranges
// ("10.0.0.10-10.0.0.20"), IPv4 and IPv6 mixed. The result is sorted and has no duplicates.
func ParseAddresses(s string) ([]netip.Addr, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
	var out []netip.Addr
	for i, f := range fields {
		lo, hi, isRange := strings.Cut(f, "-")
		first, err := parseAddr(lo)
		if err != nil {
			return nil, fmt.Errorf("addresses[%d] %q: %w", i, f, err)
		}
		last := first
		if isRange {
			if last, err = parseAddr(hi); err != nil {
				return nil, fmt.Errorf("addresses[%d] %q: %w", i, f, err)
			}
			if first.Is4() != last.Is4() {
				return nil, fmt.Errorf("addresses[%d] %q: range mixes IPv4 and IPv6", i, f)
			}
			if last.Less(first) {
				return nil, fmt.Errorf("addresses[%d] %q: range ends before it starts", i, f)
			}
		}
		for a := first; ; a = a.Next() {
			if len(out) >= maxAddresses {
				return nil, fmt.Errorf("addresses: more than %d addresses", maxAddresses)
			}
			out = append(out, a)
			if a == last {
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("addresses: empty list")
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, err
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("zones are not allowed")
	}
	return a.Unmap(), nil
}

// covering returns the smallest prefix containing every address of addrs (one family).
func covering(addrs []netip.Addr) netip.Prefix {
	lo, hi := addrs[0], addrs[len(addrs)-1]
	for bits := lo.BitLen(); bits >= 0; bits-- {
		p, _ := lo.Prefix(bits)
		if p.Contains(hi) {
			return p
		}
	}
	return netip.Prefix{}
}
