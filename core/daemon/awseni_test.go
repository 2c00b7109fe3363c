package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/test/ec2fake"
)

// TestStandaloneOnBuiltinAWSENI swaps the cloud backend by configuration: a standalone
// allotd whose pool is filled by the built-in aws-eni backend, through the real AWS SDK,
// from an EC2 fake served over HTTP.
func TestStandaloneOnBuiltinAWSENI(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	fake := ec2fake.New(ec2fake.Options{})
	vpc := fake.AddVPC(ec2fake.VPC{CIDR: netip.MustParsePrefix("10.0.0.0/16")})
	subnet, err := fake.AddSubnet(ec2fake.Subnet{VPC: vpc, AZ: "us-east-1a", CIDR: netip.MustParsePrefix("10.0.1.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	sg := fake.AddSecurityGroup(ec2fake.SecurityGroup{VPC: vpc, Name: "nodes"})
	id, err := fake.AddInstance(ec2fake.Instance{Type: "m5.large", Subnet: subnet, SecurityGroups: []string{sg}})
	if err != nil {
		t.Fatal(err)
	}
	url := ec2fake.Start(t, fake)

	cfg := testConfig(t, "10.9.0.0/24", true)
	cfg.Cloud = config.Cloud{
		Node:     config.CloudNode{Name: "node-a", ProviderID: "aws:///us-east-1a/" + id, InstanceType: "m5.large", Zone: "us-east-1a"},
		Backends: map[string]map[string]any{"aws-eni": {"region": "us-east-1", "endpoint": url}},
		Pools:    []config.CloudPool{{Name: "eni-v4", Backend: "aws-eni", Family: "ipv4", Addresses: 5, Gateway: "10.0.1.1"}},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	_, c, _ := start(t, cfg)
	ctx := context.Background()
	subnetPrefix := netip.MustParsePrefix("10.0.1.0/24")
	seen := map[netip.Addr]bool{}
	for i := range 5 {
		a, err := c.Allocate(ctx, &api.AllocateRequest{Owner: api.Owner{ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}, Network: "n", Pools: []string{"eni-v4"}})
		if err != nil {
			t.Fatal(err)
		}
		p := netip.MustParsePrefix(a.IPs[0].Address)
		if p.Bits() != 24 || !subnetPrefix.Contains(p.Addr()) || seen[p.Addr()] || a.IPs[0].Gateway != "10.0.1.1" {
			t.Fatalf("got %+v", a.IPs[0])
		}
		seen[p.Addr()] = true
	}
	_, err = c.Allocate(ctx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "c9", IfName: "eth0"}, Network: "n", Pools: []string{"eni-v4"}})
	if api.CodeOf(err) != api.CodeExhausted {
		t.Fatalf("sixth address: %v", err)
	}
	if err := fake.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
