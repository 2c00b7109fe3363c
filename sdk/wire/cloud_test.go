package wire_test

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/cloud"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"github.com/allot-ipam/allot/sdk/wire"
)

func TestCloudRoundTrip(t *testing.T) {
	node := cloud.NodeRef{Name: "n1", ProviderID: "aws:///us-east-1a/i-0abc", InstanceType: "m5.large", Zone: "us-east-1a"}
	inv := cloud.NodeInventory{
		Interfaces: []cloud.Interface{{
			ID: "eni-1", Index: 1, Subnet: "subnet-1", MAC: "02:00:00:00:00:01",
			Addresses:      []netip.Addr{netip.MustParseAddr("10.0.1.5"), netip.MustParseAddr("10.0.1.6")},
			SecurityGroups: []string{"sg-1"}, Tags: map[string]string{"owner": "allot"},
			Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.1.16/28"), netip.MustParsePrefix("2600:1f18::/80")},
		}},
		Subnets: []cloud.Subnet{{ID: "subnet-1", CIDR: netip.MustParsePrefix("10.0.1.0/24"), Free: 200, VPC: "vpc-1", Zone: "us-east-1a", Tags: map[string]string{"k": "v"}}},
		Limits:  cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 10, IPv6AddressesPerInterface: 10, PrefixDelegation: true},
	}
	got, err := wire.NodeInventoryFromProto(roundTrip(t, wire.NodeInventoryToProto(inv), &pb.NodeInventory{}))
	if err != nil || !reflect.DeepEqual(got, inv) {
		t.Fatalf("inventory: %+v, %v", got, err)
	}
	areq := cloud.AllocateRequest{Node: node, Interface: "eni-1", Family: cloud.IPv6, Count: 4, Prefixes: true}
	gotA, err := wire.AllocateRequestFromProto(roundTrip(t, wire.AllocateRequestToProto(areq), &pb.AllocateRequest{}))
	if err != nil || !reflect.DeepEqual(gotA, areq) {
		t.Fatalf("allocate request: %+v, %v", gotA, err)
	}
	ares := cloud.AllocateResult{Interface: "eni-1", Prefixes: []netip.Prefix{netip.MustParsePrefix("2600:1f18::/80"), netip.MustParsePrefix("2600:1f18:0:0:1::/80")}}
	gotAR, err := wire.AllocateResultFromProto(areq, roundTrip(t, wire.AllocateResultToProto(ares), &pb.AllocateResult{}))
	if err != nil || !reflect.DeepEqual(gotAR, ares) {
		t.Fatalf("allocate result: %+v, %v", gotAR, err)
	}
	creq := cloud.CreateInterfaceRequest{Node: node, Index: 2, Subnet: "subnet-1", SecurityGroups: []string{"sg-1"}, SecurityGroupTags: map[string]string{"tier": "pods"},
		Description: "allot", Tags: map[string]string{"a": "b"}, DeleteOnTermination: true, Family: cloud.IPv4, Count: 5}
	gotC, err := wire.CreateInterfaceRequestFromProto(roundTrip(t, wire.CreateInterfaceRequestToProto(creq), &pb.CreateInterfaceRequest{}))
	if err != nil || !reflect.DeepEqual(gotC, creq) {
		t.Fatalf("create interface request: %+v, %v", gotC, err)
	}
	rreq := cloud.ReleaseRequest{Node: node, Interface: "eni-1", Addresses: []netip.Addr{netip.MustParseAddr("fd00::5")}, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.1.32/28")}}
	gotR, err := wire.ReleaseRequestFromProto(roundTrip(t, wire.ReleaseRequestToProto(rreq), &pb.ReleaseRequest{}))
	if err != nil || !reflect.DeepEqual(gotR, rreq) {
		t.Fatalf("release request: %+v, %v", gotR, err)
	}
}

func TestCloudFromProtoRejects(t *testing.T) {
	req := cloud.AllocateRequest{Node: cloud.NodeRef{Name: "n"}, Interface: "eni-1", Family: cloud.IPv4, Count: 2}
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"inventory bad address", func() error {
			_, err := wire.NodeInventoryFromProto(&pb.NodeInventory{Interfaces: []*pb.Interface{{Id: "eni-1", Addresses: []string{"10.0.0.1", "nope"}}}})
			return err
		}, `node inventory: interfaces[0].addresses[1]: bad address "nope"`},
		{"inventory empty id", func() error {
			_, err := wire.NodeInventoryFromProto(&pb.NodeInventory{Interfaces: []*pb.Interface{{}}})
			return err
		}, "interfaces[0].id: empty interface id"},
		{"inventory bad subnet cidr", func() error {
			_, err := wire.NodeInventoryFromProto(&pb.NodeInventory{Subnets: []*pb.Subnet{{Id: "s", Cidr: "10.0.0.0/33"}}})
			return err
		}, `subnets[0].cidr: bad CIDR "10.0.0.0/33"`},
		{"negative limit", func() error {
			_, err := wire.NodeInventoryFromProto(&pb.NodeInventory{Limits: &pb.Limits{MaxInterfaces: -1}})
			return err
		}, "limits: negative limit"},
		{"allocate no family", func() error {
			_, err := wire.AllocateRequestFromProto(&pb.AllocateRequest{Node: &pb.NodeRef{Name: "n"}, Count: 1})
			return err
		}, "allocate request: family: family unspecified"},
		{"allocate zero count", func() error {
			_, err := wire.AllocateRequestFromProto(&pb.AllocateRequest{Node: &pb.NodeRef{Name: "n"}, Family: 1})
			return err
		}, "count: 0, want at least 1"},
		{"allocate no node", func() error {
			_, err := wire.AllocateRequestFromProto(&pb.AllocateRequest{Family: 1, Count: 1})
			return err
		}, "allocate request: node: missing message"},
		{"result empty", func() error {
			_, err := wire.AllocateResultFromProto(req, &pb.AllocateResult{Interface: "eni-1"})
			return err
		}, "no address assigned and no error"},
		{"result duplicate", func() error {
			_, err := wire.AllocateResultFromProto(req, &pb.AllocateResult{Interface: "eni-1", Addresses: []string{"10.0.0.1", "10.0.0.1"}})
			return err
		}, "addresses[1]: address 10.0.0.1 repeated"},
		{"result wrong family", func() error {
			_, err := wire.AllocateResultFromProto(req, &pb.AllocateResult{Interface: "eni-1", Addresses: []string{"fd00::1"}})
			return err
		}, "addresses[0]: address fd00::1 is not ipv4"},
		{"result prefixes not asked", func() error {
			_, err := wire.AllocateResultFromProto(req, &pb.AllocateResult{Interface: "eni-1", Prefixes: []string{"10.0.0.16/28"}})
			return err
		}, "prefixes: 1 prefixes, request asked for addresses"},
		{"result prefix wrong family", func() error {
			preq := req
			preq.Prefixes = true
			_, err := wire.AllocateResultFromProto(preq, &pb.AllocateResult{Interface: "eni-1", Prefixes: []string{"fd00::/80"}})
			return err
		}, "prefixes[0]: prefix fd00::/80 is not ipv4"},
		{"result too many prefixes", func() error {
			preq := req
			preq.Prefixes, preq.Count = true, 1
			_, err := wire.AllocateResultFromProto(preq, &pb.AllocateResult{Interface: "eni-1", Prefixes: []string{"10.0.0.16/28", "10.0.0.32/28"}})
			return err
		}, "2 addresses, request asked for at most 1"},
		{"inventory prefix host bits", func() error {
			_, err := wire.NodeInventoryFromProto(&pb.NodeInventory{Interfaces: []*pb.Interface{{Id: "eni-1", Prefixes: []string{"10.0.0.17/28"}}}})
			return err
		}, "interfaces[0].prefixes[0]: prefix 10.0.0.17/28 has host bits set"},
		{"release bad prefix", func() error {
			_, err := wire.ReleaseRequestFromProto(&pb.ReleaseRequest{Node: &pb.NodeRef{Name: "n"}, Prefixes: []string{"10.0.0.0/99"}})
			return err
		}, `prefixes[0]: bad CIDR "10.0.0.0/99"`},
		{"release bad address", func() error {
			_, err := wire.ReleaseRequestFromProto(&pb.ReleaseRequest{Node: &pb.NodeRef{Name: "n"}, Addresses: []string{"fe80::1%eth0"}})
			return err
		}, `addresses[0]: bad address "fe80::1%eth0"`},
		{"datapath bad cidr", func() error {
			_, err := wire.DatapathConfigFromProto(&pb.DatapathConfig{NonMasqueradeCidrs: []string{"10.0.0.0/8", "x"}})
			return err
		}, `datapath config: non_masquerade_cidrs[1]: bad CIDR "x"`},
		{"datapath bad port", func() error {
			_, err := wire.DatapathConfigFromProto(&pb.DatapathConfig{PortRange: &pb.PortRange{Min: 1, Max: 70000}})
			return err
		}, "port_range.max: 70000 is not a port"},
	}
	for _, tt := range tests {
		err := tt.run()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
}
