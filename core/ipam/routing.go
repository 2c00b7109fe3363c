package ipam

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/sdk/policy"
)

// PoolRouting is what a cluster pool's object says about its pods' gateway and routes
// (IPPool spec.ipv4/ipv6 gateway and routes, after Spiderpool's pool `gateway` and
// `routes`). The zero value keeps the per-block default: the block's gateway and a default
// route via it.
type PoolRouting struct {
	// Gateway, when valid, replaces the block's gateway: the block holding it reserves it
	// instead of its own first usable address (so the count of a block's addresses does not
	// change), and every address is presented with the prefix length of the Subnet holding
	// its block, so that the gateway is on-link.
	Gateway netip.Addr
	// Subnets are the pool's CIDRs of this family.
	Subnets []netip.Prefix
	// Routes are added to the default route; a route without GW goes via the address's
	// gateway. A route to the default destination replaces the default route.
	Routes []RouteSpec
}

// RouteSpec is one parsed route of a PoolRouting.
type RouteSpec struct {
	Dst netip.Prefix
	GW  netip.Addr // zero: the address's gateway
}

func (r PoolRouting) equal(o PoolRouting) bool {
	return r.Gateway == o.Gateway && slices.Equal(r.Subnets, o.Subnets) && slices.Equal(r.Routes, o.Routes)
}

// SetPoolRouting sets the routing of dynamic pool name, family fam (the zero PoolRouting
// clears it). It applies to blocks added afterwards and to the routes of every answer; a
// block already added keeps the address it reserved, which is why an IPPool's gateway is
// immutable once set (the agent reads the pool before it asks for its blocks).
func (m *Manager) SetPoolRouting(name string, fam policy.Family, r PoolRouting) error {
	if m.opts.Dynamic == nil {
		return ErrNotDynamic
	}
	if !fam.Valid() {
		return fmt.Errorf("ipam: pool %q: invalid family %q", name, fam)
	}
	is4 := fam == policy.IPv4
	if r.Gateway.IsValid() && r.Gateway.Is4() != is4 {
		return fmt.Errorf("ipam: pool %q: gateway %s is not %s", name, r.Gateway, fam.Label())
	}
	for _, s := range r.Subnets {
		if s.Addr().Is4() != is4 {
			return fmt.Errorf("ipam: pool %q: subnet %s is not %s", name, s, fam.Label())
		}
	}
	for _, rt := range r.Routes {
		if rt.Dst.Addr().Is4() != is4 || (rt.GW.IsValid() && rt.GW.Is4() != is4) {
			return fmt.Errorf("ipam: pool %q: route %s via %s is not %s", name, rt.Dst, rt.GW, fam.Label())
		}
	}
	k := poolKey{name, fam}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.routing == nil {
		m.routing = map[poolKey]PoolRouting{}
	}
	if old, ok := m.routing[k]; ok && old.equal(r) {
		return nil
	}
	if r.Gateway.IsValid() || len(r.Routes) > 0 {
		m.routing[k] = r
	} else {
		delete(m.routing, k)
	}
	m.log.Info("pool routing set", "pool", name, "family", fam, "gateway", r.Gateway, "routes", len(r.Routes))
	return nil
}

// blockAddressingLocked is how block c of pool k is presented when its pool has a
// gateway: the address it reserves (the pool's gateway if c holds it, else c's own
// gateway), and the addressing of its addresses. ok is false without a pool gateway.
func (m *Manager) blockAddressingLocked(k poolKey, c netip.Prefix) (reserve netip.Addr, ad *Addressing, ok bool) {
	r, has := m.routing[k]
	if !has || !r.Gateway.IsValid() {
		return netip.Addr{}, nil, false
	}
	reserve = BlockGateway(c)
	if c.Contains(r.Gateway) {
		reserve = r.Gateway
	}
	bits := c.Bits()
	for _, s := range r.Subnets {
		if s.Contains(c.Addr()) && s.Bits() <= c.Bits() {
			bits = s.Bits()
			break
		}
	}
	return reserve, &Addressing{Bits: bits, Gateway: r.Gateway}, true
}

// routesLocked are the routes of an address of pool k with gateway gw: the pool's routes
// (a route without gw via gw) and, unless they hold a default route, the default route via
// gw when the address has one.
func (m *Manager) routesLocked(k poolKey, gw netip.Addr) []api.Route {
	r := m.routing[k]
	var out []api.Route
	hasDefault := false
	for _, rt := range r.Routes {
		via := rt.GW
		if !via.IsValid() {
			via = gw
		}
		if rt.Dst.Bits() == 0 {
			hasDefault = true
		}
		ar := api.Route{Dst: rt.Dst.String()}
		if via.IsValid() {
			ar.GW = via.String()
		}
		out = append(out, ar)
	}
	if !hasDefault && m.opts.Dynamic != nil && gw.IsValid() {
		// A block's gateway is the node (the bridge), the pool's router, or the router its
		// addressing names (ENI mode: the subnet's router, fe80::1 for an IPv6 /80): the
		// pod's default route goes there, so the plain bridge or ptp plugin gives pods a
		// working network with nothing else configured.
		dst := "0.0.0.0/0"
		if gw.Is6() {
			dst = "::/0"
		}
		out = append([]api.Route{{Dst: dst, GW: gw.String()}}, out...)
	}
	return out
}
