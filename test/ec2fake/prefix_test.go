package ec2fake_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/allot-ipam/allot/test/ec2fake"
)

// The real SDK assigns, describes and unassigns /28 prefixes; the subnet counts their
// addresses as used; a subnet fragmented by single addresses answers InsufficientCidrBlocks.
func TestIPv4Prefixes(t *testing.T) {
	w := newWorld(t, ec2fake.Options{}, noRetry)
	ctx := context.Background()
	eth0 := w.fake.InstanceENIs(w.inst)[0].ID
	before := w.fake.SubnetFree(w.sub1)
	out, err := w.c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(eth0), Ipv4PrefixCount: aws.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.AssignedIpv4Prefixes) != 2 {
		t.Fatalf("assigned = %+v", out.AssignedIpv4Prefixes)
	}
	p0 := netip.MustParsePrefix(aws.ToString(out.AssignedIpv4Prefixes[0].Ipv4Prefix))
	if p0.Bits() != 28 || p0 != p0.Masked() || !netip.MustParsePrefix("10.0.0.0/24").Contains(p0.Addr()) {
		t.Fatalf("prefix %s", p0)
	}
	if got := w.fake.SubnetFree(w.sub1); got != before-32 {
		t.Fatalf("subnet free %d, want %d", got, before-32)
	}
	d, err := w.c.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{eth0}})
	if err != nil || len(d.NetworkInterfaces[0].Ipv4Prefixes) != 2 {
		t.Fatalf("describe: %v %+v", err, d)
	}
	if _, err := w.c.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(eth0), Ipv4Prefixes: []string{p0.String()}}); err != nil {
		t.Fatal(err)
	}
	if got := w.fake.SubnetFree(w.sub1); got != before-16 {
		t.Fatalf("subnet free after unassign %d, want %d", got, before-16)
	}
	// m5.large: 10 slots; eth0's primary and one /28 take 2, 9 more do not fit.
	_, err = w.c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(eth0), Ipv4PrefixCount: aws.Int32(9)})
	if apiCode(err) != "PrivateIpAddressLimitExceeded" {
		t.Fatalf("over the slot limit: %v", err)
	}
	if err := w.fake.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestIPv4PrefixesFragmentedSubnet(t *testing.T) {
	w := newWorld(t, ec2fake.Options{}, noRetry)
	ctx := context.Background()
	// sub2 is a /28: its only block holds the reserved addresses, so no /28 is ever free.
	inst, err := w.fake.AddInstance(ec2fake.Instance{Type: "m5.large", Subnet: w.sub2})
	if err != nil {
		t.Fatal(err)
	}
	eth0 := w.fake.InstanceENIs(inst)[0].ID
	_, err = w.c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(eth0), Ipv4PrefixCount: aws.Int32(1)})
	if apiCode(err) != "InsufficientCidrBlocks" {
		t.Fatalf("want InsufficientCidrBlocks, got %v", err)
	}
	if _, err := w.c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(eth0), SecondaryPrivateIpAddressCount: aws.Int32(1)}); err != nil {
		t.Fatalf("single addresses are still free: %v", err)
	}
}

func TestIPv6PrefixesAndNitro(t *testing.T) {
	f := ec2fake.New(ec2fake.Options{Types: map[string]ec2fake.TypeLimits{
		"m5.large": {ENIs: 3, IPv4PerENI: 10, IPv6PerENI: 10},
		"m4.large": {ENIs: 2, IPv4PerENI: 10, IPv6PerENI: 10, Hypervisor: "xen"},
	}})
	vpc := f.AddVPC(ec2fake.VPC{CIDR: netip.MustParsePrefix("10.0.0.0/16")})
	sub, err := f.AddSubnet(ec2fake.Subnet{VPC: vpc, AZ: "us-east-1a", CIDR: netip.MustParsePrefix("10.0.0.0/24"), IPv6CIDR: netip.MustParsePrefix("2600:1f18:1:2::/64")})
	if err != nil {
		t.Fatal(err)
	}
	nitro, _ := f.AddInstance(ec2fake.Instance{Type: "m5.large", Subnet: sub})
	xen, _ := f.AddInstance(ec2fake.Instance{Type: "m4.large", Subnet: sub})
	c := ec2fake.NewClient(ec2fake.Start(t, f), noRetry)
	ctx := context.Background()
	eth0 := f.InstanceENIs(nitro)[0].ID
	out, err := c.AssignIpv6Addresses(ctx, &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: aws.String(eth0), Ipv6PrefixCount: aws.Int32(1)})
	if err != nil || len(out.AssignedIpv6Prefixes) != 1 {
		t.Fatalf("assign /80: %v %+v", err, out)
	}
	p := netip.MustParsePrefix(out.AssignedIpv6Prefixes[0])
	if p.Bits() != 80 || !netip.MustParsePrefix("2600:1f18:1:2::/64").Contains(p.Addr()) {
		t.Fatalf("prefix %s", p)
	}
	d, err := c.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{eth0}})
	if err != nil || len(d.NetworkInterfaces[0].Ipv6Prefixes) != 1 || aws.ToString(d.NetworkInterfaces[0].Ipv6Prefixes[0].Ipv6Prefix) != p.String() {
		t.Fatalf("describe: %v %+v", err, d)
	}
	if _, err := c.UnassignIpv6Addresses(ctx, &ec2.UnassignIpv6AddressesInput{NetworkInterfaceId: aws.String(eth0), Ipv6Prefixes: []string{p.String()}}); err != nil {
		t.Fatal(err)
	}
	if got := f.InstanceENIs(nitro)[0].Prefixes6; len(got) != 0 {
		t.Fatalf("after unassign: %v", got)
	}
	_, err = c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(f.InstanceENIs(xen)[0].ID), Ipv4PrefixCount: aws.Int32(1)})
	if apiCode(err) != "InvalidParameterValue" {
		t.Fatalf("prefix on a Xen instance: %v", err)
	}
}
