package ec2fake

import (
	"fmt"
	"math/big"
	"net/netip"
	"sort"
)

// TypeLimits are one instance type's network limits, as DescribeInstanceTypes reports them.
type TypeLimits struct {
	// ENIs is the number of interfaces the type may have attached (default network card).
	ENIs int
	// IPv4PerENI counts the interface's primary address, as AWS does.
	IPv4PerENI int
	IPv6PerENI int
	// Hypervisor is DescribeInstanceTypes' hypervisor; "" means Nitro. Only Nitro
	// instances take prefixes.
	Hypervisor string
}

// DefaultTypeLimits is a small table of real instance types (values from the EC2
// documentation) that tests and benchmarks use; Options.Types replaces it.
var DefaultTypeLimits = map[string]TypeLimits{
	"t3.medium":   {ENIs: 3, IPv4PerENI: 6, IPv6PerENI: 6},
	"m5.large":    {ENIs: 3, IPv4PerENI: 10, IPv6PerENI: 10},
	"m5.xlarge":   {ENIs: 4, IPv4PerENI: 15, IPv6PerENI: 15},
	"m5.2xlarge":  {ENIs: 4, IPv4PerENI: 15, IPv6PerENI: 15},
	"m5.4xlarge":  {ENIs: 8, IPv4PerENI: 30, IPv6PerENI: 30},
	"c5.large":    {ENIs: 3, IPv4PerENI: 10, IPv6PerENI: 10},
	"c5.xlarge":   {ENIs: 4, IPv4PerENI: 15, IPv6PerENI: 15},
	"c5.4xlarge":  {ENIs: 8, IPv4PerENI: 30, IPv6PerENI: 30},
	"c5.9xlarge":  {ENIs: 8, IPv4PerENI: 30, IPv6PerENI: 30},
	"r5.2xlarge":  {ENIs: 4, IPv4PerENI: 15, IPv6PerENI: 15},
	"m5.12xlarge": {ENIs: 8, IPv4PerENI: 30, IPv6PerENI: 30},
}

// VPC is a fake VPC.
type VPC struct {
	ID   string
	CIDR netip.Prefix
	Tags map[string]string
}

// Subnet is a fake subnet. AWS reserves the first four addresses and the last one of every
// subnet; the fake does the same, so a /28 has 11 usable addresses.
type Subnet struct {
	ID   string
	VPC  string
	AZ   string
	CIDR netip.Prefix
	Tags map[string]string
	// IPv6CIDR (optional) is the subnet's IPv6 block, the source of delegated /80s.
	IPv6CIDR netip.Prefix

	used    map[netip.Addr]string // address -> ENI ID
	cursor  uint64                // next-fit offset
	used6   map[netip.Prefix]string
	cursor6 uint64
}

// SecurityGroup is a fake security group.
type SecurityGroup struct {
	ID   string
	VPC  string
	Name string
	Tags map[string]string
}

// Instance is a fake EC2 instance. AddInstance creates its primary ENI (eth0).
type Instance struct {
	ID             string
	Type           string
	AZ             string
	VPC            string
	Subnet         string
	SecurityGroups []string
	Tags           map[string]string
	// PrimaryENI is set by AddInstance.
	PrimaryENI string
}

// Attachment is an ENI's attachment to an instance.
type Attachment struct {
	ID                  string
	InstanceID          string
	DeviceIndex         int
	DeleteOnTermination bool
}

// ENI is a fake elastic network interface.
type ENI struct {
	ID          string
	Subnet      string
	VPC         string
	AZ          string
	Description string
	MAC         string
	PrimaryIP   netip.Addr
	Secondary   []netip.Addr
	// Prefixes4 and Prefixes6 are the delegated /28s and /80s.
	Prefixes4      []netip.Prefix
	Prefixes6      []netip.Prefix
	SecurityGroups []string
	Tags           map[string]string
	Attachment     *Attachment // nil while available
	clientToken    string
}

func (e *ENI) clone() ENI {
	c := *e
	c.Secondary = append([]netip.Addr(nil), e.Secondary...)
	c.Prefixes4 = append([]netip.Prefix(nil), e.Prefixes4...)
	c.Prefixes6 = append([]netip.Prefix(nil), e.Prefixes6...)
	c.SecurityGroups = append([]string(nil), e.SecurityGroups...)
	c.Tags = cloneTags(e.Tags)
	if e.Attachment != nil {
		a := *e.Attachment
		c.Attachment = &a
	}
	return c
}

func cloneTags(t map[string]string) map[string]string {
	if t == nil {
		return nil
	}
	c := make(map[string]string, len(t))
	for k, v := range t {
		c[k] = v
	}
	return c
}

// size returns the number of addresses in the subnet's CIDR (capped at 2^32 for IPv4).
func prefixSize(p netip.Prefix) uint64 {
	bits := p.Addr().BitLen() - p.Bits()
	if bits >= 63 {
		return 1 << 63
	}
	return 1 << uint(bits)
}

// usable is the number of addresses AWS lets you assign in the subnet.
func (s *Subnet) usable() uint64 {
	n := prefixSize(s.CIDR)
	if n <= 5 {
		return 0
	}
	return n - 5
}

// free is the subnet's AvailableIpAddressCount.
func (s *Subnet) free() uint64 { return s.usable() - uint64(len(s.used)) }

func addrAt(p netip.Prefix, off uint64) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	n := new(big.Int).SetBytes(b)
	n.Add(n, new(big.Int).SetUint64(off))
	out := n.FillBytes(make([]byte, len(b)))
	a, _ := netip.AddrFromSlice(out)
	return a
}

// take assigns the next free address of the subnet to eni (next fit from a cursor).
func (s *Subnet) take(eni string) (netip.Addr, bool) {
	if s.free() == 0 {
		return netip.Addr{}, false
	}
	total := prefixSize(s.CIDR)
	for i := uint64(0); i < total; i++ {
		off := 4 + (s.cursor+i)%(total-5)
		a := addrAt(s.CIDR, off)
		if _, ok := s.used[a]; !ok {
			s.used[a] = eni
			s.cursor = (s.cursor + i + 1) % (total - 5)
			return a, true
		}
	}
	return netip.Addr{}, false
}

// takeExact assigns a specific address; it fails if the address is outside the usable range
// or taken.
func (s *Subnet) takeExact(a netip.Addr, eni string) error {
	if !s.CIDR.Contains(a) {
		return fmt.Errorf("address %s is not in subnet %s (%s)", a, s.ID, s.CIDR)
	}
	first, last := addrAt(s.CIDR, 4), addrAt(s.CIDR, prefixSize(s.CIDR)-2)
	if a.Less(first) || last.Less(a) {
		return fmt.Errorf("address %s is reserved in subnet %s", a, s.ID)
	}
	if _, ok := s.used[a]; ok {
		return fmt.Errorf("address %s is already in use", a)
	}
	s.used[a] = eni
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
