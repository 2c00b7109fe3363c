package ec2fake

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
)

// Prefix delegation (docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-prefix-eni.html): an
// interface of a Nitro instance can carry IPv4 /28 and IPv6 /80 prefixes, each in one of its
// address slots. A /28 is an aligned block of 16 addresses of the subnet, all free and
// outside the subnet's reserved addresses; its addresses count as used in the subnet.
// AssignPrivateIpAddresses with Ipv4PrefixCount fails with InsufficientCidrBlocks when the
// subnet has no such block left (fragmented by single addresses), as EC2 does.

const (
	prefixBits4 = 28
	prefixBits6 = 80
)

// Nitro is the hypervisor of every instance type that supports prefix delegation.
const Nitro = "nitro"

func (l TypeLimits) nitro() bool { return l.Hypervisor == "" || l.Hypervisor == Nitro }

// takeBlock4 delegates the subnet's lowest free aligned /28 to eni.
func (s *Subnet) takeBlock4(eni string) (netip.Prefix, bool) {
	total := prefixSize(s.CIDR)
	for off := uint64(0); off+16 <= total; off += 16 {
		if off < 4 || off+16 > total-1 { // holds a reserved address
			continue
		}
		p := netip.PrefixFrom(addrAt(s.CIDR, off), prefixBits4)
		if s.blockFree(p) {
			for a := p.Addr(); p.Contains(a); a = a.Next() {
				s.used[a] = eni
			}
			return p, true
		}
	}
	return netip.Prefix{}, false
}

func (s *Subnet) blockFree(p netip.Prefix) bool {
	for a := p.Addr(); p.Contains(a); a = a.Next() {
		if _, ok := s.used[a]; ok {
			return false
		}
	}
	return true
}

// freeBlock4 gives a /28 back to the subnet.
func (s *Subnet) freeBlock4(p netip.Prefix) {
	for a := p.Addr(); p.Contains(a); a = a.Next() {
		delete(s.used, a)
	}
}

// takeBlock6 delegates the next free /80 of the subnet's IPv6 CIDR to eni.
func (s *Subnet) takeBlock6(eni string) (netip.Prefix, bool) {
	if !s.IPv6CIDR.IsValid() || s.IPv6CIDR.Bits() > prefixBits6 {
		return netip.Prefix{}, false
	}
	if s.used6 == nil {
		s.used6 = map[netip.Prefix]string{}
	}
	n := uint64(1) << min(prefixBits6-s.IPv6CIDR.Bits(), 20)
	for i := uint64(0); i < n; i++ {
		off := (s.cursor6 + i) % n
		p := netip.PrefixFrom(addrAt(s.IPv6CIDR, off<<(128-prefixBits6)), prefixBits6)
		if _, taken := s.used6[p]; !taken {
			s.used6[p] = eni
			s.cursor6 = off + 1
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// slotsUsed is how many IPv4 slots of the interface are taken: its primary and secondary
// addresses and its /28 prefixes.
func (e *ENI) slotsUsed() int { return 1 + len(e.Secondary) + len(e.Prefixes4) }

func (s *Server) typeOf(e *ENI) (TypeLimits, bool) {
	if e.Attachment == nil {
		return TypeLimits{}, false
	}
	return s.types[s.instances[e.Attachment.InstanceID].Type], true
}

func prefixList(f url.Values, name string, bits int) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range list(f, name) {
		p, err := netip.ParsePrefix(v)
		if err != nil || p.Bits() != bits || p != p.Masked() {
			return nil, apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("Invalid prefix: %s", v)}
		}
		out = append(out, p)
	}
	return out, nil
}

func errNotNitro(e *ENI) error {
	return apiError{status: 400, code: "InvalidParameterValue",
		msg: fmt.Sprintf("Prefix delegation is only supported on instances built on the Nitro System (%s).", e.ID)}
}

// assignIPv4Prefixes is AssignPrivateIpAddresses with Ipv4PrefixCount or Ipv4Prefix.N.
func (s *Server) assignIPv4Prefixes(e *ENI, count int, explicit []netip.Prefix) ([]field, error) {
	n := count + len(explicit)
	limit := 50
	if lim, ok := s.typeOf(e); ok {
		if !lim.nitro() {
			return nil, errNotNitro(e)
		}
		limit = lim.IPv4PerENI
	}
	if e.slotsUsed()+n > limit {
		return nil, apiError{status: 400, code: "PrivateIpAddressLimitExceeded",
			msg: fmt.Sprintf("Number of private addresses will exceed limit of %d for %s.", limit, e.ID)}
	}
	sn := s.subnets[e.Subnet]
	var got []netip.Prefix
	undo := func() {
		for _, p := range got {
			sn.freeBlock4(p)
		}
	}
	for _, p := range explicit {
		if !sn.CIDR.Contains(p.Addr()) || !sn.blockFree(p) {
			undo()
			return nil, apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("Prefix %s is not free in subnet %s.", p, sn.ID)}
		}
		for a := p.Addr(); p.Contains(a); a = a.Next() {
			sn.used[a] = e.ID
		}
		got = append(got, p)
	}
	for i := 0; i < count; i++ {
		p, ok := sn.takeBlock4(e.ID)
		if !ok {
			undo()
			return nil, apiError{status: 400, code: "InsufficientCidrBlocks",
				msg: fmt.Sprintf("The specified subnet %s does not have enough free cidr blocks to satisfy the request.", sn.ID)}
		}
		got = append(got, p)
	}
	e.Prefixes4 = append(e.Prefixes4, got...)
	var out items[xmlIPv4Prefix]
	for _, p := range got {
		out.Item = append(out.Item, xmlIPv4Prefix{p.String()})
	}
	return []field{{"networkInterfaceId", e.ID}, {"assignedIpv4PrefixSet", out}}, nil
}

// unassignIPv4Prefixes is UnassignPrivateIpAddresses with Ipv4Prefix.N.
func (s *Server) unassignIPv4Prefixes(e *ENI, drop []netip.Prefix) ([]field, error) {
	for _, p := range drop {
		if !slices.Contains(e.Prefixes4, p) {
			return nil, apiError{status: 400, code: "InvalidParameterValue",
				msg: fmt.Sprintf("Some of the specified prefixes are not assigned to interface %s", e.ID)}
		}
	}
	sn := s.subnets[e.Subnet]
	e.Prefixes4 = slices.DeleteFunc(e.Prefixes4, func(p netip.Prefix) bool {
		if slices.Contains(drop, p) {
			sn.freeBlock4(p)
			return true
		}
		return false
	})
	return []field{{"return", true}}, nil
}

// assignIPv6Addresses implements AssignIpv6Addresses for prefixes (Ipv6PrefixCount): the
// fake hands out no single IPv6 addresses.
func (s *Server) assignIPv6Addresses(f url.Values) ([]field, error) {
	e, err := s.eniParam(f)
	if err != nil {
		return nil, err
	}
	count, err := intParam(f, "Ipv6PrefixCount", 0)
	if err != nil {
		return nil, err
	}
	if count < 1 {
		return nil, apiError{status: 400, code: "InvalidParameterCombination", msg: "ec2fake: AssignIpv6Addresses needs Ipv6PrefixCount."}
	}
	if lim, ok := s.typeOf(e); ok {
		if !lim.nitro() {
			return nil, errNotNitro(e)
		}
		if len(e.Prefixes6)+count > lim.IPv6PerENI {
			return nil, apiError{status: 400, code: "PrivateIpAddressLimitExceeded",
				msg: fmt.Sprintf("Number of IPv6 addresses will exceed limit of %d for %s.", lim.IPv6PerENI, e.ID)}
		}
	}
	sn := s.subnets[e.Subnet]
	var out items[string]
	for i := 0; i < count; i++ {
		p, ok := sn.takeBlock6(e.ID)
		if !ok {
			return nil, apiError{status: 400, code: "InsufficientCidrBlocks",
				msg: fmt.Sprintf("The specified subnet %s does not have enough free IPv6 cidr blocks to satisfy the request.", sn.ID)}
		}
		e.Prefixes6 = append(e.Prefixes6, p)
		out.Item = append(out.Item, p.String())
	}
	return []field{{"networkInterfaceId", e.ID}, {"assignedIpv6PrefixSet", out}}, nil
}

// unassignIPv6Addresses implements UnassignIpv6Addresses for prefixes (Ipv6Prefix.N).
func (s *Server) unassignIPv6Addresses(f url.Values) ([]field, error) {
	e, err := s.eniParam(f)
	if err != nil {
		return nil, err
	}
	drop, err := prefixList(f, "Ipv6Prefix", prefixBits6)
	if err != nil {
		return nil, err
	}
	if len(drop) == 0 {
		return nil, missing("Ipv6Prefix")
	}
	var out items[string]
	sn := s.subnets[e.Subnet]
	for _, p := range drop {
		if !slices.Contains(e.Prefixes6, p) {
			return nil, apiError{status: 400, code: "InvalidParameterValue",
				msg: fmt.Sprintf("Some of the specified prefixes are not assigned to interface %s", e.ID)}
		}
	}
	e.Prefixes6 = slices.DeleteFunc(e.Prefixes6, func(p netip.Prefix) bool { return slices.Contains(drop, p) })
	for _, p := range drop {
		delete(sn.used6, p)
		out.Item = append(out.Item, p.String())
	}
	return []field{{"networkInterfaceId", e.ID}, {"unassignedIpv6PrefixSet", out}}, nil
}

// prefixAddrs lists every address of ps.
func prefixAddrs(ps []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range ps {
		for a := p.Addr(); p.Contains(a); a = a.Next() {
			out = append(out, a)
		}
	}
	return out
}
