package allocator

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/allot-ipam/allot/core/addrset"
	"github.com/allot-ipam/allot/core/internal/addrmath"
)

// validateRange checks an exclusion built by hand (ParseRange always returns valid ones).
func validateRange(r addrset.Range) error {
	switch {
	case !r.From.IsValid() || !r.To.IsValid():
		return fmt.Errorf("range: from and to must both be set (got %q-%q)", r.From, r.To)
	case r.From.Zone() != "" || r.To.Zone() != "":
		return fmt.Errorf("%s: zoned addresses are not allowed", r)
	case r.From.Is4() != r.To.Is4():
		return fmt.Errorf("%s: From and To are of different families", r)
	case r.From.Compare(r.To) > 0:
		return fmt.Errorf("%s: From is after To", r)
	}
	return nil
}

// ParseRange parses an exclusion as allotd's configuration writes it: "10.0.0.5"
// (single address), "10.0.0.10-10.0.0.20" (inclusive range) or "10.0.0.0/28" (a
// masked CIDR, which becomes its whole range, network and broadcast included).
// Surrounding spaces are ignored. Errors name the input.
func ParseRange(s string) (addrset.Range, error) {
	in := strings.TrimSpace(s)
	fail := func(format string, args ...any) (addrset.Range, error) {
		return addrset.Range{}, fmt.Errorf("allocator: parse range %q: %s", s, fmt.Sprintf(format, args...))
	}
	if in == "" {
		return fail("empty")
	}
	if strings.Contains(in, "/") {
		p, err := netip.ParsePrefix(in)
		if err != nil {
			return fail("%v", err)
		}
		if p != p.Masked() {
			return fail("CIDR has host bits set (did you mean %s?)", p.Masked())
		}
		return addrset.Range{From: p.Addr(), To: addrmath.LastOf(p)}, nil
	}
	from, to, isRange := strings.Cut(in, "-")
	a, err := parseAddr(from)
	if err != nil {
		return fail("%v", err)
	}
	r := addrset.Range{From: a, To: a}
	if isRange {
		if r.To, err = parseAddr(to); err != nil {
			return fail("%v", err)
		}
	}
	if err := validateRange(r); err != nil {
		return fail("%v", err)
	}
	return r, nil
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, err
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%s: zoned addresses are not allowed", a)
	}
	return a, nil
}
