package operator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// poolEntry is the operator's reading of one IPPool.
type poolEntry struct {
	name        string
	terminating bool
	disabled    bool
	fam         [2]*famEntry // ipv4, ipv6
	// claimed are the prefixes the pool owns for overlap checks: spec CIDRs and the in-use
	// CIDRs of its status (a CIDR removed while in use stays the pool's).
	claimed []netip.Prefix
}

type famEntry struct {
	mask   int
	usable []netip.Prefix // spec CIDRs blocks may be carved from, in spec order
	// overlaps explains each spec CIDR left out because an older pool claims it.
	overlaps []string
	invalid  []string
}

func famIndex(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 0
	}
	return 1
}

func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%s has host bits set", s)
	}
	return p, nil
}

// buildPoolTable reads every pool. Pools must not overlap (a pod address must be unique in the
// cluster; Cilium's multi-pool IPAM does not support overlapping pools either): a CIDR that
// overlaps a CIDR claimed by an older pool (creation time, then name) is not used, and the
// pool's CIDROverlap condition says so.
func buildPoolTable(pools []allotv1.IPPool) map[string]*poolEntry {
	idx := make([]int, len(pools))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		pa, pb := &pools[a], &pools[b]
		if c := pa.CreationTimestamp.Compare(pb.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(pa.Name, pb.Name)
	})
	type claim struct {
		p    netip.Prefix
		pool string
	}
	var claims []claim
	out := make(map[string]*poolEntry, len(pools))
	for _, i := range idx {
		p := &pools[i]
		e := &poolEntry{name: p.Name, terminating: p.DeletionTimestamp != nil, disabled: p.Spec.Disable}
		for fi, f := range []*allotv1.PoolFamily{p.Spec.IPv4, p.Spec.IPv6} {
			if f == nil {
				continue
			}
			fe := &famEntry{mask: int(f.MaskSize)}
			for _, s := range f.CIDRs {
				c, err := parsePrefix(s)
				if err != nil || famIndex(c) != fi || fe.mask < c.Bits() || fe.mask > c.Addr().BitLen() {
					fe.invalid = append(fe.invalid, s)
					continue
				}
				e.claimed = append(e.claimed, c)
				var clash string
				for _, cl := range claims {
					if cl.p.Overlaps(c) {
						clash = fmt.Sprintf("%s overlaps %s of pool %q", c, cl.p, cl.pool)
						break
					}
				}
				if clash != "" {
					fe.overlaps = append(fe.overlaps, clash)
					continue
				}
				fe.usable = append(fe.usable, c)
			}
			e.fam[fi] = fe
		}
		for _, s := range p.Status.InUseCIDRs {
			if c, err := parsePrefix(s); err == nil && !slices.Contains(e.claimed, c) {
				e.claimed = append(e.claimed, c)
			}
		}
		for _, c := range e.claimed {
			claims = append(claims, claim{c, p.Name})
		}
		out[p.Name] = e
	}
	return out
}
