package awseni_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	awseni "github.com/allot-ipam/allot/plugins/cloud/awseni"
	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/test/ec2fake"
)

func TestBuiltinLimits(t *testing.T) {
	if n := awseni.BuiltinTypes(); n < 1400 {
		t.Fatalf("built-in table has %d types", n)
	}
	tests := []struct {
		typ  string
		want cloud.Limits
	}{
		{"m5.large", cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 10, IPv6AddressesPerInterface: 10, PrefixDelegation: true}},
		{"t3.medium", cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 6, IPv6AddressesPerInterface: 6, PrefixDelegation: true}},
		// Multi-card: 64 interfaces in all, the default card (0) takes 2.
		{"p5.48xlarge", cloud.Limits{MaxInterfaces: 2, AddressesPerInterface: 50, IPv6AddressesPerInterface: 50, PrefixDelegation: true}},
		// Xen: no prefix delegation.
		{"m4.large", cloud.Limits{MaxInterfaces: 2, AddressesPerInterface: 10, IPv6AddressesPerInterface: 10}},
	}
	for _, tt := range tests {
		got, ok := awseni.BuiltinLimits(tt.typ)
		if !ok || got != tt.want {
			t.Errorf("%s: %+v %v, want %+v", tt.typ, got, ok, tt.want)
		}
	}
	if _, ok := awseni.BuiltinLimits("nope.large"); ok {
		t.Error("unknown type found")
	}
}

func TestParseLimitMapping(t *testing.T) {
	m, err := awseni.ParseLimitMapping("m5.large=4,20,20; c9.tiny=2,4,0")
	if err != nil || len(m) != 2 || m["m5.large"] != (cloud.Limits{MaxInterfaces: 4, AddressesPerInterface: 20, IPv6AddressesPerInterface: 20}) {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"m5.large", "m5.large=1,2", "m5.large=a,2,3", "=1,2,3", "x=0,10,0"} {
		if _, err := awseni.ParseLimitMapping(bad); err == nil || !strings.Contains(err.Error(), "instance-limit-mapping") {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
}

func TestParseConfig(t *testing.T) {
	cfg, err := awseni.ParseConfig(map[string]any{"qps": 10, "burst": 50, "max-backoff": "5s", "instance-limit-mapping": map[string]any{"m5.large": "4,20,20"}})
	if err != nil || cfg.QPS != 10 || cfg.Burst != 50 || cfg.MaxBackoff.Seconds() != 5 || cfg.MaxAttempts != 10 {
		t.Fatalf("%+v %v", cfg, err)
	}
	for _, tc := range []struct {
		in    map[string]any
		field string
	}{
		{map[string]any{"qps": -1}, "qps"},
		{map[string]any{"nope": 1}, "nope"},
		{map[string]any{"instance-limit-mapping": map[string]any{"m5.large": "x"}}, "instance-limit-mapping.m5.large"},
		{map[string]any{"resync-interval": "0s"}, "resync-interval"},
	} {
		if _, err := awseni.ParseConfig(tc.in); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%v: err = %v, want it to name %s", tc.in, err, tc.field)
		}
	}
}

func TestInstanceID(t *testing.T) {
	for _, tc := range []struct {
		ref  cloud.NodeRef
		want string
	}{
		{cloud.NodeRef{Name: "n", ProviderID: "aws:///us-east-1a/i-0abc"}, "i-0abc"},
		{cloud.NodeRef{Name: "i-0def"}, "i-0def"},
		{cloud.NodeRef{Name: "n", ProviderID: "gce://p/z/n"}, ""},
		{cloud.NodeRef{Name: "n"}, ""},
	} {
		got, err := awseni.InstanceID(tc.ref)
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("%+v: %q %v", tc.ref, got, err)
		}
	}
}

// backendWorld is one m5.large node plus a tagged security group, with the backend on it.
func backendWorld(t *testing.T, mod func(*awseni.Config)) (*ec2fake.Server, *awseni.Backend, cloud.NodeRef, string) {
	t.Helper()
	f := ec2fake.New(ec2fake.Options{})
	vpc := f.AddVPC(ec2fake.VPC{CIDR: netip.MustParsePrefix("10.0.0.0/16")})
	sub, _ := f.AddSubnet(ec2fake.Subnet{VPC: vpc, AZ: "us-east-1a", CIDR: netip.MustParsePrefix("10.0.0.0/24")})
	sg := f.AddSecurityGroup(ec2fake.SecurityGroup{VPC: vpc, Name: "eth0"})
	podSG := f.AddSecurityGroup(ec2fake.SecurityGroup{VPC: vpc, Name: "pods", Tags: map[string]string{"allot.io/pods": "yes"}})
	id, err := f.AddInstance(ec2fake.Instance{Type: "m5.large", Subnet: sub, SecurityGroups: []string{sg}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := awseni.DefaultConfig()
	cfg.QPS = 0
	if mod != nil {
		mod(&cfg)
	}
	b, err := awseni.NewWithAPI(ec2fake.NewClient(ec2fake.Start(t, f), awseni.ClientOptions(0, 0, 3, 0, nil)), cfg, awseni.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = podSG
	return f, b, cloud.NodeRef{Name: "n1", ProviderID: "aws:///us-east-1a/" + id}, sub
}

func TestBackendPrimitives(t *testing.T) {
	ctx := context.Background()
	f, b, node, sub := backendWorld(t, nil)
	inv, err := b.Inventory(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Interfaces) != 1 || !inv.Interfaces[0].Primary || inv.Limits.AddressesPerInterface != 10 || len(inv.Subnets) != 1 || inv.Subnets[0].Free != 250 {
		t.Fatalf("inventory %+v", inv)
	}
	eth0 := inv.Interfaces[0].ID
	// Asking for more than the ENI takes assigns what fits, in one call.
	res, err := b.Allocate(ctx, cloud.AllocateRequest{Node: node, Interface: eth0, Family: cloud.IPv4, Count: 50})
	if err != nil || len(res.Addresses) != 9 {
		t.Fatalf("allocate: %+v %v", res, err)
	}
	calls := f.Calls("AssignPrivateIpAddresses")
	// Full: no API call, ErrLimitReached.
	if _, err := b.Allocate(ctx, cloud.AllocateRequest{Node: node, Interface: eth0, Family: cloud.IPv4, Count: 1}); !errors.Is(err, cloud.ErrLimitReached) {
		t.Fatalf("full ENI: %v", err)
	}
	if f.Calls("AssignPrivateIpAddresses") != calls {
		t.Fatal("a call was made for a full ENI")
	}
	if _, err := b.Allocate(ctx, cloud.AllocateRequest{Node: node, Interface: eth0, Family: cloud.IPv6, Count: 1}); !errors.Is(err, cloud.ErrUnsupported) {
		t.Fatalf("IPv6: %v", err)
	}
	// New ENI: eth0's groups by default, tags, description, delete-on-termination.
	ifc, err := b.CreateInterface(ctx, cloud.CreateInterfaceRequest{Node: node, Index: 1, Subnet: sub, Description: "d", Tags: map[string]string{"k": "v"},
		DeleteOnTermination: true, Family: cloud.IPv4, Count: 20})
	if err != nil || ifc.Index != 1 || len(ifc.Addresses) != 9 {
		t.Fatalf("create: %+v %v", ifc, err)
	}
	enis := f.InstanceENIs(strings.TrimPrefix(node.ProviderID, "aws:///us-east-1a/"))
	e := enis[1]
	if e.Description != "d" || e.Tags["k"] != "v" || !e.Attachment.DeleteOnTermination || len(e.SecurityGroups) != 1 || e.SecurityGroups[0] != enis[0].SecurityGroups[0] {
		t.Fatalf("created ENI %+v", e)
	}
	// Index taken.
	if _, err := b.CreateInterface(ctx, cloud.CreateInterfaceRequest{Node: node, Index: 1, Subnet: sub}); err == nil {
		t.Fatal("index 1 twice")
	}
	// Release is idempotent, and skips what the interface does not hold.
	drop := append(res.Addresses[:2:2], netip.MustParseAddr("10.9.9.9"))
	for i := 0; i < 2; i++ {
		if err := b.Release(ctx, cloud.ReleaseRequest{Node: node, Interface: eth0, Addresses: drop}); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if got := f.Calls("UnassignPrivateIpAddresses"); got != 1 {
		t.Fatalf("%d unassign calls", got)
	}
	inv, _ = b.Inventory(ctx, node)
	if len(inv.Interfaces[0].Addresses) != 7 || len(inv.Interfaces) != 2 {
		t.Fatalf("after release: %+v", inv.Interfaces)
	}
	if err := f.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	// A third ENI fits (m5.large: 3), a fourth does not.
	if _, err := b.CreateInterface(ctx, cloud.CreateInterfaceRequest{Node: node, Index: 2, Subnet: sub}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateInterface(ctx, cloud.CreateInterfaceRequest{Node: node, Index: 3, Subnet: sub}); !errors.Is(err, cloud.ErrLimitReached) {
		t.Fatalf("fourth ENI: %v", err)
	}
	// Unknown node.
	if _, err := b.Inventory(ctx, cloud.NodeRef{Name: "x", ProviderID: "aws:///us-east-1a/i-nope"}); !errors.Is(err, cloud.ErrNodeNotFound) {
		t.Fatalf("unknown instance: %v", err)
	}
}

func TestSecurityGroupsByTags(t *testing.T) {
	ctx := context.Background()
	f, b, node, sub := backendWorld(t, func(c *awseni.Config) { c.SecurityGroupTags = map[string]string{"allot.io/pods": "yes"} })
	if _, err := b.CreateInterface(ctx, cloud.CreateInterfaceRequest{Node: node, Index: 1, Subnet: sub}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateInterface(ctx, cloud.CreateInterfaceRequest{Node: node, Index: 2, Subnet: sub, SecurityGroups: nil}); err != nil {
		t.Fatal(err)
	}
	enis := f.InstanceENIs(strings.TrimPrefix(node.ProviderID, "aws:///us-east-1a/"))
	for _, e := range enis[1:] {
		if len(e.SecurityGroups) != 1 || e.SecurityGroups[0] == enis[0].SecurityGroups[0] {
			t.Fatalf("%s groups %v, want the tagged one", e.ID, e.SecurityGroups)
		}
	}
	if got := f.Calls("DescribeSecurityGroups"); got != 1 {
		t.Fatalf("%d DescribeSecurityGroups calls, want 1 (cached)", got)
	}
}

func TestLimitsOverrideAndAPI(t *testing.T) {
	ctx := context.Background()
	_, b, node, _ := backendWorld(t, func(c *awseni.Config) { c.InstanceLimits = map[string]string{"m5.large": "2,4,0"} })
	inv, err := b.Inventory(ctx, node)
	if err != nil || inv.Limits != (cloud.Limits{MaxInterfaces: 2, AddressesPerInterface: 4}) {
		t.Fatalf("mapping: %+v %v", inv.Limits, err)
	}
	// Via the API: the fake's table is the truth (same values as the built-in one here).
	f, b, node, _ := backendWorld(t, func(c *awseni.Config) { c.UpdateLimitsViaAPI = true })
	inv, err = b.Inventory(ctx, node)
	if err != nil || inv.Limits.MaxInterfaces != 3 || inv.Limits.AddressesPerInterface != 10 {
		t.Fatalf("via API: %+v %v", inv.Limits, err)
	}
	if f.Calls("DescribeInstanceTypes") == 0 {
		t.Fatal("DescribeInstanceTypes not called")
	}
}
