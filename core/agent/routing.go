package agent

import (
	"fmt"
	"net/netip"

	"github.com/allot-ipam/allot/core/internal/addrmath"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolRouting parses the gateway and routes of an IPPool's family (spec.ipv4 or spec.ipv6,
// Spiderpool's pool `gateway` and `routes`). Errors name the field: the CRD's CEL rules
// catch most of them at admission, but the broadcast address and route families are only
// checked here, and this is what every reader trusts. A nil family is the zero routing.
func PoolRouting(fam policy.Family, f *v1alpha1.PoolFamily) (ipam.PoolRouting, error) {
	var r ipam.PoolRouting
	if f == nil {
		return r, nil
	}
	field := "spec." + string(fam)
	is4 := fam == policy.IPv4
	for i, s := range f.CIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Is4() != is4 {
			return ipam.PoolRouting{}, fmt.Errorf("%s.cidrs[%d]: %q is not an %s CIDR", field, i, s, fam.Label())
		}
		r.Subnets = append(r.Subnets, p.Masked())
	}
	if f.Gateway != "" {
		gw, err := netip.ParseAddr(f.Gateway)
		if err != nil || gw.Is4() != is4 || gw.Is4In6() {
			return ipam.PoolRouting{}, fmt.Errorf("%s.gateway: %q is not an %s address", field, f.Gateway, fam.Label())
		}
		var in netip.Prefix
		for _, s := range r.Subnets {
			if s.Contains(gw) {
				in = s
			}
		}
		if !in.IsValid() {
			return ipam.PoolRouting{}, fmt.Errorf("%s.gateway: %s lies in none of %s.cidrs %v", field, gw, field, f.CIDRs)
		}
		if in.Addr().BitLen()-in.Bits() >= 2 {
			if gw == in.Addr() {
				return ipam.PoolRouting{}, fmt.Errorf("%s.gateway: %s is the network address of %s", field, gw, in)
			}
			if is4 && gw == addrmath.LastOf(in) {
				return ipam.PoolRouting{}, fmt.Errorf("%s.gateway: %s is the broadcast address of %s", field, gw, in)
			}
		}
		r.Gateway = gw
	}
	for i, rt := range f.Routes {
		dst, err := netip.ParsePrefix(rt.Dst)
		if err != nil || dst.Addr().Is4() != is4 {
			return ipam.PoolRouting{}, fmt.Errorf("%s.routes[%d].dst: %q is not an %s CIDR", field, i, rt.Dst, fam.Label())
		}
		spec := ipam.RouteSpec{Dst: dst.Masked()}
		if rt.Gw != "" {
			gw, err := netip.ParseAddr(rt.Gw)
			if err != nil || gw.Is4() != is4 || gw.Is4In6() {
				return ipam.PoolRouting{}, fmt.Errorf("%s.routes[%d].gw: %q is not an %s address", field, i, rt.Gw, fam.Label())
			}
			spec.GW = gw
		}
		r.Routes = append(r.Routes, spec)
	}
	return r, nil
}

// poolSelection is what the pool policy sees of an IPPool's selection fields.
func poolSelection(p *v1alpha1.IPPool) ipam.PoolSelection {
	s := p.Spec.PoolSelection
	out := ipam.PoolSelection{Default: s.Default, Terminating: p.DeletionTimestamp != nil,
		NodeName: s.NodeName, NamespaceName: s.NamespaceName, MultusName: s.MultusName}
	sel := func(ls *metav1.LabelSelector) *policy.LabelSelector {
		if ls == nil {
			return nil
		}
		v := k8s.LabelSelector(ls)
		return &v
	}
	out.NodeAffinity, out.NamespaceAffinity, out.PodAffinity = sel(s.NodeAffinity), sel(s.NamespaceAffinity), sel(s.PodAffinity)
	return out
}
