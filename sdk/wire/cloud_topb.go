package wire

import (
	"net/netip"

	"github.com/allot-ipam/allot/sdk/cloud"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
)

// NodeRefToProto encodes a node reference.
func NodeRefToProto(n cloud.NodeRef) *pb.NodeRef {
	return &pb.NodeRef{Name: n.Name, ProviderId: n.ProviderID, InstanceType: n.InstanceType, Zone: n.Zone}
}

func cloudFamilyToProto(f cloud.Family) pb.Family {
	return FamilyToProto(policyFamily(f))
}

// NodeInventoryToProto encodes an inventory (backend side).
func NodeInventoryToProto(inv cloud.NodeInventory) *pb.NodeInventory {
	out := &pb.NodeInventory{Limits: &pb.Limits{
		MaxInterfaces:             int32(inv.Limits.MaxInterfaces),
		AddressesPerInterface:     int32(inv.Limits.AddressesPerInterface),
		Ipv6AddressesPerInterface: int32(inv.Limits.IPv6AddressesPerInterface),
		PrefixDelegation:          inv.Limits.PrefixDelegation,
	}}
	for _, ifc := range inv.Interfaces {
		out.Interfaces = append(out.Interfaces, InterfaceToProto(ifc))
	}
	for _, s := range inv.Subnets {
		out.Subnets = append(out.Subnets, &pb.Subnet{
			Id: s.ID, Cidr: s.CIDR.String(), Free: s.Free, Vpc: s.VPC, Zone: s.Zone, Tags: mapToProto(s.Tags),
		})
	}
	return out
}

// InterfaceToProto encodes one interface.
func InterfaceToProto(ifc cloud.Interface) *pb.Interface {
	return &pb.Interface{
		Id: ifc.ID, Index: int32(ifc.Index), Subnet: ifc.Subnet, Mac: ifc.MAC, Primary: ifc.Primary,
		Addresses: addrsToStrings(ifc.Addresses), SecurityGroups: ifc.SecurityGroups, Tags: mapToProto(ifc.Tags),
		Prefixes: prefixesToStrings(ifc.Prefixes),
	}
}

// AllocateRequestToProto encodes an allocate request (host side).
func AllocateRequestToProto(r cloud.AllocateRequest) *pb.AllocateRequest {
	return &pb.AllocateRequest{
		Node: NodeRefToProto(r.Node), Interface: r.Interface,
		Family: cloudFamilyToProto(r.Family), Count: int32(r.Count), Prefixes: r.Prefixes,
	}
}

// AllocateResultToProto encodes an allocate result (backend side).
func AllocateResultToProto(r cloud.AllocateResult) *pb.AllocateResult {
	return &pb.AllocateResult{Interface: r.Interface, Addresses: addrsToStrings(r.Addresses), Prefixes: prefixesToStrings(r.Prefixes)}
}

// CreateInterfaceRequestToProto encodes a create-interface request (host side).
func CreateInterfaceRequestToProto(r cloud.CreateInterfaceRequest) *pb.CreateInterfaceRequest {
	return &pb.CreateInterfaceRequest{
		Node: NodeRefToProto(r.Node), Index: int32(r.Index), Subnet: r.Subnet,
		SecurityGroups: r.SecurityGroups, Description: r.Description, Tags: mapToProto(r.Tags),
		DeleteOnTermination: r.DeleteOnTermination, Family: cloudFamilyToProto(r.Family), Count: int32(r.Count),
		SecurityGroupTags: mapToProto(r.SecurityGroupTags),
	}
}

// ReleaseRequestToProto encodes a release request (host side).
func ReleaseRequestToProto(r cloud.ReleaseRequest) *pb.ReleaseRequest {
	return &pb.ReleaseRequest{Node: NodeRefToProto(r.Node), Interface: r.Interface,
		Addresses: addrsToStrings(r.Addresses), Prefixes: prefixesToStrings(r.Prefixes)}
}

func addrsToStrings(as []netip.Addr) []string {
	if len(as) == 0 {
		return nil
	}
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}
