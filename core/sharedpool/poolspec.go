package sharedpool

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/allot-ipam/allot/core/addrset"
	"github.com/allot-ipam/allot/core/internal/addrmath"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Route is one route of a pool, parsed.
type Route struct {
	Dst netip.Prefix
	Gw  netip.Addr // zero: the pool's gateway
}

// ResolvedFamily is one family of a shared pool, resolved from its spec (v1alpha1.SharedPoolFamily
// parsed and checked).
type ResolvedFamily struct {
	Family policy.Family
	Subnet netip.Prefix
	// Configured = spec ips minus excludeIPs: the addresses the pool claims for itself (what
	// conflicts with other pools are judged on).
	Configured addrset.Set
	// Usable = Configured minus the reserved addresses, the gateway, and the subnet's network
	// and broadcast addresses (IPv4 subnets of /30 or shorter) or subnet-router anycast
	// address (IPv6 subnets of /126 or shorter): what may be handed to pods.
	Usable  addrset.Set
	Gateway netip.Addr // zero when the pool has none
	Routes  []Route
}

// Resolved is a shared pool with its families parsed.
type Resolved struct {
	Name string
	IPv4 *ResolvedFamily
	IPv6 *ResolvedFamily
}

// Get returns the family fam, or nil.
func (r *Resolved) Get(fam policy.Family) *ResolvedFamily {
	if fam == policy.IPv4 {
		return r.IPv4
	}
	return r.IPv6
}

// Reserved are the cluster-wide reserved addresses (every ReservedIP), per family.
type Reserved struct{ IPv4, IPv6 addrset.Set }

// Get returns the family fam.
func (r Reserved) Get(fam policy.Family) addrset.Set {
	if fam == policy.IPv4 {
		return r.IPv4
	}
	return r.IPv6
}

// ReservedFrom merges ReservedIP objects. An object that does not parse is left out and
// reported (by name and field) in errs, so one bad object does not stop the others from
// protecting their addresses.
func ReservedFrom(objs []v1alpha1.ReservedIP) (r Reserved, errs []error) {
	r = Reserved{IPv4: addrset.FromRanges(policy.IPv4, nil), IPv6: addrset.FromRanges(policy.IPv6, nil)}
	sorted := append([]v1alpha1.ReservedIP(nil), objs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, o := range sorted {
		v4, v6, err := addrset.ParseMixed("spec.ips", o.Spec.IPs)
		if err != nil {
			errs = append(errs, fmt.Errorf("ReservedIP %q: %w", o.Name, err))
			continue
		}
		r.IPv4 = r.IPv4.Union(v4)
		r.IPv6 = r.IPv6.Union(v6)
	}
	return r, errs
}

// Resolve parses a pool's spec and works out its usable addresses given the reserved ones.
// Errors name the field (spec.ipv4.ips[2]: ...). The CRD's CEL rules catch most of these at
// admission; Resolve is what every reader trusts, so it checks everything again.
func Resolve(p *v1alpha1.SharedIPPool, reserved Reserved) (*Resolved, error) {
	r := &Resolved{Name: p.Name}
	var err error
	if p.Spec.IPv4 != nil {
		if r.IPv4, err = resolveFamily("spec.ipv4", policy.IPv4, p.Spec.IPv4, reserved.IPv4); err != nil {
			return nil, fmt.Errorf("SharedIPPool %q: %w", p.Name, err)
		}
	}
	if p.Spec.IPv6 != nil {
		if r.IPv6, err = resolveFamily("spec.ipv6", policy.IPv6, p.Spec.IPv6, reserved.IPv6); err != nil {
			return nil, fmt.Errorf("SharedIPPool %q: %w", p.Name, err)
		}
	}
	if r.IPv4 == nil && r.IPv6 == nil {
		return nil, fmt.Errorf("SharedIPPool %q: spec: neither ipv4 nor ipv6 is set", p.Name)
	}
	return r, nil
}

func resolveFamily(field string, fam policy.Family, s *v1alpha1.SharedPoolFamily, reserved addrset.Set) (*ResolvedFamily, error) {
	subnet, err := parseSubnet(field, fam, s.Subnet)
	if err != nil {
		return nil, err
	}
	ips, err := addrset.Parse(field+".ips", fam, s.IPs)
	if err != nil {
		return nil, err
	}
	if ips.Empty() {
		return nil, fmt.Errorf("%s.ips: empty; list the addresses the pool hands out", field)
	}
	if err := inside(field+".ips", s.IPs, fam, subnet); err != nil {
		return nil, err
	}
	excl, err := addrset.Parse(field+".excludeIPs", fam, s.ExcludeIPs)
	if err != nil {
		return nil, err
	}
	f := &ResolvedFamily{Family: fam, Subnet: subnet, Configured: ips.Subtract(excl)}
	drop := reserved
	if drop.Family() == "" {
		drop = addrset.FromRanges(fam, nil)
	}
	if s.Gateway != "" {
		if f.Gateway, err = parseGateway(field, fam, s.Gateway, subnet); err != nil {
			return nil, err
		}
		drop = drop.Union(single(f.Gateway))
	}
	bits := subnet.Addr().BitLen() - subnet.Bits()
	if fam == policy.IPv4 && bits >= 2 {
		drop = drop.Union(single(subnet.Addr())).Union(single(addrmath.LastOf(subnet)))
	}
	if fam == policy.IPv6 && bits >= 2 {
		drop = drop.Union(single(subnet.Addr()))
	}
	f.Usable = f.Configured.Subtract(drop)
	if f.Routes, err = parseRoutes(field, fam, s.Routes, f.Gateway); err != nil {
		return nil, err
	}
	return f, nil
}

// parseSubnet parses field.subnet: a masked CIDR of family fam.
func parseSubnet(field string, fam policy.Family, s string) (netip.Prefix, error) {
	subnet, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s.subnet: %q is not a CIDR", field, s)
	}
	if (fam == policy.IPv4) != subnet.Addr().Is4() || subnet.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%s.subnet: %q is not an %s subnet", field, s, fam.Label())
	}
	if subnet.Masked() != subnet {
		return netip.Prefix{}, fmt.Errorf("%s.subnet: %q has host bits set; write %s", field, s, subnet.Masked())
	}
	return subnet, nil
}

// parseGateway parses field.gateway: an address of subnet other than its network and
// (IPv4) broadcast addresses.
func parseGateway(field string, fam policy.Family, s string, subnet netip.Prefix) (netip.Addr, error) {
	gw, err := netip.ParseAddr(s)
	if err != nil || (fam == policy.IPv4) != gw.Is4() || !subnet.Contains(gw) {
		return netip.Addr{}, fmt.Errorf("%s.gateway: %q is not an address inside %s", field, s, subnet)
	}
	if subnet.Addr().BitLen()-subnet.Bits() >= 2 {
		if gw == subnet.Addr() {
			return netip.Addr{}, fmt.Errorf("%s.gateway: %s is the network address of %s", field, gw, subnet)
		}
		if fam == policy.IPv4 && gw == addrmath.LastOf(subnet) {
			return netip.Addr{}, fmt.Errorf("%s.gateway: %s is the broadcast address of %s", field, gw, subnet)
		}
	}
	return gw, nil
}

// parseRoutes parses field.routes; a route without gw goes through the pool's gateway.
func parseRoutes(field string, fam policy.Family, routes []v1alpha1.RouteSpec, poolGW netip.Addr) ([]Route, error) {
	var out []Route
	for i, rt := range routes {
		dst, err := netip.ParsePrefix(rt.Dst)
		if err != nil || (fam == policy.IPv4) != dst.Addr().Is4() {
			return nil, fmt.Errorf("%s.routes[%d].dst: %q is not an %s CIDR", field, i, rt.Dst, fam.Label())
		}
		r := Route{Dst: dst.Masked()}
		if rt.Gw != "" {
			gw, err := netip.ParseAddr(rt.Gw)
			if err != nil || (fam == policy.IPv4) != gw.Is4() {
				return nil, fmt.Errorf("%s.routes[%d].gw: %q is not an %s address", field, i, rt.Gw, fam.Label())
			}
			r.Gw = gw
		} else if !poolGW.IsValid() {
			return nil, fmt.Errorf("%s.routes[%d].gw: empty and the pool has no gateway to default to", field, i)
		}
		out = append(out, r)
	}
	return out, nil
}

// inside checks every entry lies in the subnet, naming the first that does not.
func inside(field string, items []string, fam policy.Family, subnet netip.Prefix) error {
	whole := addrset.FromPrefix(subnet)
	for i, it := range items {
		one, err := addrset.Parse(field, fam, []string{it})
		if err != nil {
			return fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		if !one.Subtract(whole).Empty() {
			return fmt.Errorf("%s[%d]: %q is not inside the subnet %s", field, i, it, subnet)
		}
	}
	return nil
}

func single(a netip.Addr) addrset.Set {
	return addrset.FromRanges(famOf(a), []addrset.Range{{From: a, To: a}})
}

func famOf(a netip.Addr) policy.Family {
	if a.Is4() {
		return policy.IPv4
	}
	return policy.IPv6
}

// Conflicts judges every pool against the others and returns, by pool name, why a pool must
// not hand out addresses: its spec does not resolve, or it overlaps a pool that wins over it
// (a different subnet overlapping its subnet, or the same subnet with an address in common).
// Pools are taken oldest first (creationTimestamp, then name); a pool loses to an earlier
// pool that itself did not lose. The verdict depends only on the pools, so every agent and
// the operator reach the same one without talking to each other.
func Conflicts(pools []v1alpha1.SharedIPPool) map[string]string {
	sorted := append([]v1alpha1.SharedIPPool(nil), pools...)
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i].CreationTimestamp, sorted[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return sorted[i].Name < sorted[j].Name
	})
	out := map[string]string{}
	var kept []*Resolved
	for i := range sorted {
		r, err := Resolve(&sorted[i], Reserved{})
		if err != nil {
			out[sorted[i].Name] = err.Error()
			continue
		}
		if msg := conflictWith(r, kept); msg != "" {
			out[r.Name] = msg
			continue
		}
		kept = append(kept, r)
	}
	return out
}

func conflictWith(r *Resolved, kept []*Resolved) string {
	for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
		f := r.Get(fam)
		if f == nil {
			continue
		}
		for _, k := range kept {
			g := k.Get(fam)
			if g == nil {
				continue
			}
			if f.Subnet != g.Subnet && f.Subnet.Overlaps(g.Subnet) {
				return fmt.Sprintf("spec.%s.subnet %s overlaps subnet %s of the older SharedIPPool %q", fam, f.Subnet, g.Subnet, k.Name)
			}
			if f.Subnet == g.Subnet && f.Configured.Overlaps(g.Configured) {
				common := f.Configured.Intersect(g.Configured)
				return fmt.Sprintf("spec.%s.ips shares %d address(es) (%s) with the older SharedIPPool %q in subnet %s",
					fam, common.Size(), firstFew(common), k.Name, f.Subnet)
			}
		}
	}
	return ""
}

func firstFew(s addrset.Set) string {
	parts := s.Strings()
	if len(parts) > 3 {
		return fmt.Sprintf("%s, %s, %s, ...", parts[0], parts[1], parts[2])
	}
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += ", "
		}
		out += p
	}
	return out
}
