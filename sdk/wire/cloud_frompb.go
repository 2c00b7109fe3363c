package wire

import (
	"net/netip"
	"slices"

	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
)

const (
	msgInventory       = "node inventory"
	msgAllocateRequest = "allocate request"
	msgAllocateResult  = "allocate result"
	msgCreateInterface = "create interface request"
	msgInterface       = "interface"
	msgReleaseRequest  = "release request"
	msgNodeRef         = "node ref"
)

// The two contracts spell families the same way; sharing the enum keeps one mapping.
func policyFamily(f cloud.Family) policy.Family { return policy.Family(f) }

func cloudFamilyFromProto(msg, field string, f pb.Family) (cloud.Family, error) {
	pf, err := FamilyFromProto(f)
	if err != nil {
		return "", invalid(msg, field, "%v", err)
	}
	return cloud.Family(pf), nil
}

// NodeRefFromProto decodes a node reference; the node name is required.
func NodeRefFromProto(m *pb.NodeRef) (cloud.NodeRef, error) {
	return nodeRefFromProto(msgNodeRef, "", m)
}

func nodeRefFromProto(msg, field string, m *pb.NodeRef) (cloud.NodeRef, error) {
	if m == nil {
		return cloud.NodeRef{}, invalid(msg, field, "missing message")
	}
	if m.Name == "" {
		if field != "" {
			field += "."
		}
		return cloud.NodeRef{}, invalid(msg, field+"name", "empty node name")
	}
	return cloud.NodeRef{Name: m.Name, ProviderID: m.ProviderId, InstanceType: m.InstanceType, Zone: m.Zone}, nil
}

// NodeInventoryFromProto decodes and validates a backend's inventory (host side).
func NodeInventoryFromProto(m *pb.NodeInventory) (cloud.NodeInventory, error) {
	if m == nil {
		return cloud.NodeInventory{}, invalid(msgInventory, "", "missing message")
	}
	var out cloud.NodeInventory
	if l := m.Limits; l != nil {
		if l.MaxInterfaces < 0 || l.AddressesPerInterface < 0 || l.Ipv6AddressesPerInterface < 0 {
			return cloud.NodeInventory{}, invalid(msgInventory, "limits", "negative limit %v", l)
		}
		out.Limits = cloud.Limits{
			MaxInterfaces:             int(l.MaxInterfaces),
			AddressesPerInterface:     int(l.AddressesPerInterface),
			IPv6AddressesPerInterface: int(l.Ipv6AddressesPerInterface),
			PrefixDelegation:          l.PrefixDelegation,
		}
	}
	for i, ifc := range m.Interfaces {
		v, err := interfaceFromProto(msgInventory, idx("interfaces", i), ifc)
		if err != nil {
			return cloud.NodeInventory{}, err
		}
		out.Interfaces = append(out.Interfaces, v)
	}
	for i, s := range m.Subnets {
		f := idx("subnets", i)
		if s == nil {
			return cloud.NodeInventory{}, invalid(msgInventory, f, "missing message")
		}
		if s.Id == "" {
			return cloud.NodeInventory{}, invalid(msgInventory, f+".id", "empty subnet id")
		}
		p, err := netip.ParsePrefix(s.Cidr)
		if err != nil {
			return cloud.NodeInventory{}, invalid(msgInventory, f+".cidr", "bad CIDR %q", s.Cidr)
		}
		out.Subnets = append(out.Subnets, cloud.Subnet{ID: s.Id, CIDR: p, Free: s.Free, VPC: s.Vpc, Zone: s.Zone, Tags: mapFromProto(s.Tags)})
	}
	return out, nil
}

// InterfaceFromProto decodes and validates one interface (host side).
func InterfaceFromProto(m *pb.Interface) (cloud.Interface, error) {
	return interfaceFromProto(msgInterface, "", m)
}

func interfaceFromProto(msg, field string, m *pb.Interface) (cloud.Interface, error) {
	dot := field
	if dot != "" {
		dot += "."
	}
	if m == nil {
		return cloud.Interface{}, invalid(msg, field, "missing message")
	}
	if m.Id == "" {
		return cloud.Interface{}, invalid(msg, dot+"id", "empty interface id")
	}
	if m.Index < 0 {
		return cloud.Interface{}, invalid(msg, dot+"index", "negative index %d", m.Index)
	}
	addrs, err := parseAddrs(msg, dot+"addresses", m.Addresses)
	if err != nil {
		return cloud.Interface{}, err
	}
	prefixes, err := parseDelegated(msg, dot+"prefixes", m.Prefixes)
	if err != nil {
		return cloud.Interface{}, err
	}
	return cloud.Interface{
		ID: m.Id, Index: int(m.Index), Subnet: m.Subnet, MAC: m.Mac, Primary: m.Primary,
		Addresses: addrs, SecurityGroups: m.SecurityGroups, Tags: mapFromProto(m.Tags), Prefixes: prefixes,
	}, nil
}

func parseAddrs(msg, field string, ss []string) ([]netip.Addr, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, invalid(msg, idx(field, i), "bad address %q", s)
		}
		out[i] = a
	}
	return out, nil
}

// parseDelegated parses delegated prefixes, which are canonical (no host bits set).
func parseDelegated(msg, field string, ss []string) ([]netip.Prefix, error) {
	out, err := parsePrefixes(msg, field, ss)
	for i, p := range out {
		if p != p.Masked() {
			return nil, invalid(msg, idx(field, i), "prefix %s has host bits set", p)
		}
	}
	return out, err
}

// AllocateRequestFromProto decodes and validates an allocate request (backend side).
func AllocateRequestFromProto(m *pb.AllocateRequest) (cloud.AllocateRequest, error) {
	if m == nil {
		return cloud.AllocateRequest{}, invalid(msgAllocateRequest, "", "missing message")
	}
	node, err := nodeRefFromProto(msgAllocateRequest, "node", m.Node)
	if err != nil {
		return cloud.AllocateRequest{}, err
	}
	fam, err := cloudFamilyFromProto(msgAllocateRequest, "family", m.Family)
	if err != nil {
		return cloud.AllocateRequest{}, err
	}
	if m.Count < 1 {
		return cloud.AllocateRequest{}, invalid(msgAllocateRequest, "count", "%d, want at least 1", m.Count)
	}
	return cloud.AllocateRequest{Node: node, Interface: m.Interface, Family: fam, Count: int(m.Count), Prefixes: m.Prefixes}, nil
}

// AllocateResultFromProto decodes and validates a backend's allocate result against the
// request it answers (host side): at least one and at most req.Count addresses and prefixes
// together (prefixes only when req.Prefixes asked for them), all of req.Family, none
// repeated.
func AllocateResultFromProto(req cloud.AllocateRequest, m *pb.AllocateResult) (cloud.AllocateResult, error) {
	if m == nil {
		return cloud.AllocateResult{}, invalid(msgAllocateResult, "", "missing message")
	}
	addrs, err := parseAddrs(msgAllocateResult, "addresses", m.Addresses)
	if err != nil {
		return cloud.AllocateResult{}, err
	}
	prefixes, err := parseDelegated(msgAllocateResult, "prefixes", m.Prefixes)
	if err != nil {
		return cloud.AllocateResult{}, err
	}
	if len(prefixes) > 0 && !req.Prefixes {
		return cloud.AllocateResult{}, invalid(msgAllocateResult, "prefixes", "%d prefixes, request asked for addresses", len(prefixes))
	}
	if n := len(addrs) + len(prefixes); n == 0 {
		return cloud.AllocateResult{}, invalid(msgAllocateResult, "addresses", "no address assigned and no error")
	} else if n > req.Count {
		return cloud.AllocateResult{}, invalid(msgAllocateResult, "addresses", "%d addresses, request asked for at most %d", n, req.Count)
	}
	if err := checkFamilyUnique(msgAllocateResult, "addresses", req.Family, addrs); err != nil {
		return cloud.AllocateResult{}, err
	}
	for i, p := range prefixes {
		if (req.Family == cloud.IPv4) != p.Addr().Is4() || slices.Contains(prefixes[:i], p) {
			return cloud.AllocateResult{}, invalid(msgAllocateResult, idx("prefixes", i), "prefix %s is not %s or repeated", p, req.Family)
		}
	}
	if m.Interface == "" {
		return cloud.AllocateResult{}, invalid(msgAllocateResult, "interface", "empty interface id")
	}
	return cloud.AllocateResult{Interface: m.Interface, Addresses: addrs, Prefixes: prefixes}, nil
}

func checkFamilyUnique(msg, field string, fam cloud.Family, addrs []netip.Addr) error {
	seen := make(map[netip.Addr]struct{}, len(addrs))
	for i, a := range addrs {
		if (fam == cloud.IPv4) != a.Is4() {
			return invalid(msg, idx(field, i), "address %s is not %s", a, fam)
		}
		if _, dup := seen[a]; dup {
			return invalid(msg, idx(field, i), "address %s repeated", a)
		}
		seen[a] = struct{}{}
	}
	return nil
}

// CreateInterfaceRequestFromProto decodes and validates a create-interface request
// (backend side).
func CreateInterfaceRequestFromProto(m *pb.CreateInterfaceRequest) (cloud.CreateInterfaceRequest, error) {
	if m == nil {
		return cloud.CreateInterfaceRequest{}, invalid(msgCreateInterface, "", "missing message")
	}
	node, err := nodeRefFromProto(msgCreateInterface, "node", m.Node)
	if err != nil {
		return cloud.CreateInterfaceRequest{}, err
	}
	if m.Index < 0 {
		return cloud.CreateInterfaceRequest{}, invalid(msgCreateInterface, "index", "negative index %d", m.Index)
	}
	if m.Count < 0 {
		return cloud.CreateInterfaceRequest{}, invalid(msgCreateInterface, "count", "negative count %d", m.Count)
	}
	var fam cloud.Family
	if m.Count > 0 || m.Family != pb.Family_FAMILY_UNSPECIFIED {
		if fam, err = cloudFamilyFromProto(msgCreateInterface, "family", m.Family); err != nil {
			return cloud.CreateInterfaceRequest{}, err
		}
	}
	return cloud.CreateInterfaceRequest{
		Node: node, Index: int(m.Index), Subnet: m.Subnet, SecurityGroups: m.SecurityGroups,
		Description: m.Description, Tags: mapFromProto(m.Tags), DeleteOnTermination: m.DeleteOnTermination,
		Family: fam, Count: int(m.Count), SecurityGroupTags: mapFromProto(m.SecurityGroupTags),
	}, nil
}

// ReleaseRequestFromProto decodes and validates a release request (backend side).
func ReleaseRequestFromProto(m *pb.ReleaseRequest) (cloud.ReleaseRequest, error) {
	if m == nil {
		return cloud.ReleaseRequest{}, invalid(msgReleaseRequest, "", "missing message")
	}
	node, err := nodeRefFromProto(msgReleaseRequest, "node", m.Node)
	if err != nil {
		return cloud.ReleaseRequest{}, err
	}
	addrs, err := parseAddrs(msgReleaseRequest, "addresses", m.Addresses)
	if err != nil {
		return cloud.ReleaseRequest{}, err
	}
	prefixes, err := parseDelegated(msgReleaseRequest, "prefixes", m.Prefixes)
	if err != nil {
		return cloud.ReleaseRequest{}, err
	}
	return cloud.ReleaseRequest{Node: node, Interface: m.Interface, Addresses: addrs, Prefixes: prefixes}, nil
}
