// Package cloudpool turns the addresses a cloud backend assigns to this node into a pool, for
// standalone mode: at start it reads the node's inventory, asks the backend for the
// addresses it still lacks, and describes the result as an allocator pool.
//
// The pool's CIDRs are the subnets the node's addresses live in, and every address of those
// subnets the node does not hold is excluded. So pods get their subnet's prefix length and
// the subnet's gateway can be configured, while only addresses the cloud really assigned to
// this node are ever handed out.
//
// Backend answers are untrusted: an inventory or allocation that contradicts itself (an
// address of the wrong family, one held twice, more addresses than asked for, an address
// outside its subnet) is refused with an error naming the field, and nothing is built from it.
package cloudpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/allot-ipam/allot/core/addrset"
	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/sdk/cloud"
)

// Request says what to build.
type Request struct {
	Name   string
	Node   cloud.NodeRef
	Family cloud.Family
	// Want is how many addresses the node should hold.
	Want int
	// Interface is where new addresses go; empty means the node's first interface.
	Interface string
	Gateway   netip.Addr
}

// Result is the pool and what it took to build it.
type Result struct {
	Allocator allocator.Config
	// Held is every address of the family the node holds, sorted.
	Held []netip.Addr
	// Added is how many the backend assigned now.
	Added int
}

// Fill reads the node's inventory, tops it up to req.Want addresses of req.Family and
// returns the pool. If the backend runs out (limit or subnet full) the pool is built from
// what the node has, with a warning; with no address at all it is an error.
func Fill(ctx context.Context, b cloud.CloudBackend, req Request, log *slog.Logger) (Result, error) {
	inv, err := b.Inventory(ctx, req.Node)
	if err != nil {
		return Result{}, fmt.Errorf("cloud pool %q: inventory of node %q: %w", req.Name, req.Node.Name, err)
	}
	held, subnets, err := check(inv, req.Family)
	if err != nil {
		return Result{}, fmt.Errorf("cloud pool %q: backend inventory: %w", req.Name, err)
	}
	added := 0
	if missing := req.Want - len(held); missing > 0 {
		iface, err := target(inv, req.Interface)
		if err != nil {
			return Result{}, fmt.Errorf("cloud pool %q: %w", req.Name, err)
		}
		res, err := b.Allocate(ctx, cloud.AllocateRequest{Node: req.Node, Interface: iface.ID, Family: req.Family, Count: missing})
		switch {
		case errors.Is(err, cloud.ErrLimitReached), errors.Is(err, cloud.ErrSubnetFull):
			log.Warn("cloud backend could not assign more addresses; using what the node holds", "pool", req.Name, "held", len(held), "want", req.Want, "err", err)
		case err != nil:
			return Result{}, fmt.Errorf("cloud pool %q: allocate %d %s addresses on %s: %w", req.Name, missing, req.Family, iface.ID, err)
		default:
			fresh, err := checkAllocation(res, iface.ID, req.Family, missing, held)
			if err != nil {
				return Result{}, fmt.Errorf("cloud pool %q: backend allocation: %w", req.Name, err)
			}
			held = append(held, fresh...)
			slices.SortFunc(held, netip.Addr.Compare)
			added = len(fresh)
			if s, ok := subnets[iface.Subnet]; ok {
				for i, a := range fresh {
					if !s.Contains(a) {
						return Result{}, fmt.Errorf("cloud pool %q: backend allocation: addresses[%d]: %s is outside subnet %s (%s) of interface %s", req.Name, i, a, iface.Subnet, s, iface.ID)
					}
				}
			}
		}
	}
	if len(held) == 0 {
		return Result{}, fmt.Errorf("cloud pool %q: node %q holds no %s address and the backend assigned none", req.Name, req.Node.Name, req.Family)
	}
	cfg, err := poolConfig(req, held, subnets)
	if err != nil {
		return Result{}, err
	}
	log.Info("cloud pool ready", "pool", req.Name, "addresses", len(held), "added", added, "cidrs", cfg.CIDRs)
	return Result{Allocator: cfg, Held: held, Added: added}, nil
}

// check validates the inventory and returns the node's addresses of the family, sorted, and
// the subnets by ID.
func check(inv cloud.NodeInventory, fam cloud.Family) ([]netip.Addr, map[string]netip.Prefix, error) {
	subnets := map[string]netip.Prefix{}
	for i, s := range inv.Subnets {
		f := fmt.Sprintf("subnets[%d]", i)
		if s.ID == "" {
			return nil, nil, fmt.Errorf("%s.id: empty", f)
		}
		if !s.CIDR.IsValid() || s.CIDR.Masked() != s.CIDR {
			return nil, nil, fmt.Errorf("%s.cidr: %q is not a valid subnet", f, s.CIDR)
		}
		subnets[s.ID] = s.CIDR
	}
	seen := map[netip.Addr]string{}
	var held []netip.Addr
	for i, in := range inv.Interfaces {
		for j, a := range in.Addresses {
			f := fmt.Sprintf("interfaces[%d].addresses[%d]", i, j)
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				return nil, nil, fmt.Errorf("%s: %q is not a plain IP address", f, a)
			}
			if prev, dup := seen[a]; dup {
				return nil, nil, fmt.Errorf("%s: %s is also listed at %s", f, a, prev)
			}
			seen[a] = f
			if familyOf(a) != fam {
				continue
			}
			if s, ok := subnets[in.Subnet]; ok && !s.Contains(a) {
				return nil, nil, fmt.Errorf("%s: %s is outside subnet %s (%s) of interface %s", f, a, in.Subnet, s, in.ID)
			}
			held = append(held, a)
		}
	}
	slices.SortFunc(held, netip.Addr.Compare)
	return held, subnets, nil
}

func checkAllocation(res cloud.AllocateResult, iface string, fam cloud.Family, asked int, held []netip.Addr) ([]netip.Addr, error) {
	if res.Interface != "" && res.Interface != iface {
		return nil, fmt.Errorf("interface: asked for %s, got %s", iface, res.Interface)
	}
	if len(res.Addresses) > asked {
		return nil, fmt.Errorf("addresses: asked for %d, got %d", asked, len(res.Addresses))
	}
	seen := map[netip.Addr]bool{}
	for i, a := range res.Addresses {
		f := fmt.Sprintf("addresses[%d]", i)
		switch {
		case !a.IsValid() || a.Zone() != "" || a.Is4In6():
			return nil, fmt.Errorf("%s: %q is not a plain IP address", f, a)
		case familyOf(a) != fam:
			return nil, fmt.Errorf("%s: %s is not %s", f, a, fam)
		case seen[a]:
			return nil, fmt.Errorf("%s: %s is listed twice", f, a)
		}
		if _, found := slices.BinarySearchFunc(held, a, netip.Addr.Compare); found {
			return nil, fmt.Errorf("%s: %s is already held by the node", f, a)
		}
		seen[a] = true
	}
	return res.Addresses, nil
}

// target picks the interface new addresses go to.
func target(inv cloud.NodeInventory, id string) (cloud.Interface, error) {
	if len(inv.Interfaces) == 0 {
		return cloud.Interface{}, errors.New("the node has no interface to put addresses on")
	}
	if id == "" {
		first := inv.Interfaces[0]
		for _, in := range inv.Interfaces[1:] {
			if in.Index < first.Index {
				first = in
			}
		}
		return first, nil
	}
	for _, in := range inv.Interfaces {
		if in.ID == id {
			return in, nil
		}
	}
	return cloud.Interface{}, fmt.Errorf("interface %q is not one of the node's interfaces", id)
}

// poolConfig builds the allocator pool: the subnets holding the addresses, minus every
// address the node does not hold. An address whose subnet the backend did not describe
// becomes a single-address CIDR.
func poolConfig(req Request, held []netip.Addr, subnets map[string]netip.Prefix) (allocator.Config, error) {
	cfg := allocator.Config{Name: req.Name}
	var prefixes []netip.Prefix
	for _, s := range subnets {
		for _, a := range held {
			if s.Contains(a) && !slices.Contains(prefixes, s) {
				prefixes = append(prefixes, s)
			}
		}
	}
	slices.SortFunc(prefixes, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	for i := 1; i < len(prefixes); i++ {
		if prefixes[i-1].Overlaps(prefixes[i]) {
			return cfg, fmt.Errorf("cloud pool %q: backend subnets %s and %s overlap", req.Name, prefixes[i-1], prefixes[i])
		}
	}
	for _, p := range prefixes {
		cfg.CIDRs = append(cfg.CIDRs, p)
		cfg.Exclude = append(cfg.Exclude, complement(p, held)...)
	}
	for _, a := range held {
		if !slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) }) {
			cfg.CIDRs = append(cfg.CIDRs, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	if req.Gateway.IsValid() {
		if !slices.ContainsFunc(cfg.CIDRs, func(p netip.Prefix) bool { return p.Contains(req.Gateway) }) {
			return cfg, fmt.Errorf("cloud pool %q: gateway %s is not in the node's subnets %v", req.Name, req.Gateway, prefixes)
		}
		if _, held := slices.BinarySearchFunc(held, req.Gateway, netip.Addr.Compare); held {
			return cfg, fmt.Errorf("cloud pool %q: gateway %s is one of the node's assigned addresses", req.Name, req.Gateway)
		}
		cfg.Gateway = req.Gateway
	}
	return cfg, nil
}

// complement returns the ranges of p that are not in held (sorted).
func complement(p netip.Prefix, held []netip.Addr) []addrset.Range {
	var out []addrset.Range
	next := p.Addr()
	last := lastAddr(p)
	for _, a := range held {
		if !p.Contains(a) {
			continue
		}
		if a != next {
			out = append(out, addrset.Range{From: next, To: a.Prev()})
		}
		if a == last {
			return out
		}
		next = a.Next()
	}
	return append(out, addrset.Range{From: next, To: last})
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := range b {
		bit := i * 8
		switch {
		case bit >= p.Bits():
			b[i] = 0xff
		case bit+8 > p.Bits():
			b[i] |= 0xff >> (p.Bits() - bit)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func familyOf(a netip.Addr) cloud.Family {
	if a.Is4() {
		return cloud.IPv4
	}
	return cloud.IPv6
}
