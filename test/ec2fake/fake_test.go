package ec2fake_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/allot-ipam/allot/test/ec2fake"
)

type world struct {
	fake             *ec2fake.Server
	c                *ec2.Client
	vpc, sub1, sub2  string
	sg, inst, small  string
	fullSubnetPrefix netip.Prefix
}

// noRetry makes every call a single attempt, so tests see the fake's answer as it is.
func noRetry(o *ec2.Options) { o.Retryer = aws.NopRetryer{} }

func newWorld(t *testing.T, opts ec2fake.Options, optFns ...func(*ec2.Options)) *world {
	t.Helper()
	f := ec2fake.New(opts)
	w := &world{fake: f}
	w.vpc = f.AddVPC(ec2fake.VPC{CIDR: netip.MustParsePrefix("10.0.0.0/16"), Tags: map[string]string{"Name": "test"}})
	var err error
	w.sub1, err = f.AddSubnet(ec2fake.Subnet{VPC: w.vpc, AZ: "us-east-1a", CIDR: netip.MustParsePrefix("10.0.0.0/24"), Tags: map[string]string{"role": "pods"}})
	if err != nil {
		t.Fatal(err)
	}
	w.fullSubnetPrefix = netip.MustParsePrefix("10.0.1.0/28")
	w.sub2, err = f.AddSubnet(ec2fake.Subnet{VPC: w.vpc, AZ: "us-east-1a", CIDR: w.fullSubnetPrefix})
	if err != nil {
		t.Fatal(err)
	}
	w.sg = f.AddSecurityGroup(ec2fake.SecurityGroup{VPC: w.vpc, Name: "nodes", Tags: map[string]string{"kubernetes.io/cluster/c1": "owned"}})
	w.inst, err = f.AddInstance(ec2fake.Instance{Type: "m5.large", Subnet: w.sub1, SecurityGroups: []string{w.sg}, Tags: map[string]string{"Name": "node-1"}})
	if err != nil {
		t.Fatal(err)
	}
	w.small, err = f.AddInstance(ec2fake.Instance{Type: "t3.medium", Subnet: w.sub1, SecurityGroups: []string{w.sg}})
	if err != nil {
		t.Fatal(err)
	}
	w.c = ec2fake.NewClient(ec2fake.Start(t, f), optFns...)
	return w
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func TestDescribeInstancesAndENIs(t *testing.T) {
	w := newWorld(t, ec2fake.Options{}, noRetry)
	ctx := context.Background()
	out, err := w.c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{w.inst}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
		t.Fatalf("reservations = %+v", out.Reservations)
	}
	inst := out.Reservations[0].Instances[0]
	if aws.ToString(inst.InstanceId) != w.inst || inst.InstanceType != types.InstanceTypeM5Large ||
		aws.ToString(inst.Placement.AvailabilityZone) != "us-east-1a" || aws.ToString(inst.VpcId) != w.vpc {
		t.Fatalf("instance = %+v", inst)
	}
	if len(inst.NetworkInterfaces) != 1 || aws.ToInt32(inst.NetworkInterfaces[0].Attachment.DeviceIndex) != 0 {
		t.Fatalf("eth0 = %+v", inst.NetworkInterfaces)
	}

	dni, err := w.c.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{w.inst}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dni.NetworkInterfaces) != 1 {
		t.Fatalf("got %d ENIs", len(dni.NetworkInterfaces))
	}
	eth0 := dni.NetworkInterfaces[0]
	if len(eth0.Groups) != 1 || aws.ToString(eth0.Groups[0].GroupId) != w.sg || len(eth0.PrivateIpAddresses) != 1 ||
		!aws.ToBool(eth0.PrivateIpAddresses[0].Primary) || !aws.ToBool(eth0.Attachment.DeleteOnTermination) {
		t.Fatalf("eth0 = %+v", eth0)
	}

	// Wrong filter name: EC2 refuses it, so must the fake.
	_, err = w.c.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: aws.String("no-such-filter"), Values: []string{"x"}}},
	})
	if apiCode(err) != "InvalidParameterValue" {
		t.Fatalf("bad filter: err = %v", err)
	}
	_, err = w.c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{"i-nope"}})
	if apiCode(err) != "InvalidInstanceID.NotFound" {
		t.Fatalf("unknown instance: err = %v", err)
	}

	subs, err := w.c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []types.Filter{
		{Name: aws.String("vpc-id"), Values: []string{w.vpc}}, {Name: aws.String("tag:role"), Values: []string{"pods"}}}})
	if err != nil {
		t.Fatal(err)
	}
	// 256 - 5 reserved - 2 primary addresses of the two instances.
	if len(subs.Subnets) != 1 || aws.ToInt32(subs.Subnets[0].AvailableIpAddressCount) != 249 || aws.ToString(subs.Subnets[0].CidrBlock) != "10.0.0.0/24" {
		t.Fatalf("subnets = %+v", subs.Subnets)
	}
	sgs, err := w.c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{
		{Name: aws.String("tag:kubernetes.io/cluster/c1"), Values: []string{"owned", "shared"}}}})
	if err != nil || len(sgs.SecurityGroups) != 1 || aws.ToString(sgs.SecurityGroups[0].GroupId) != w.sg {
		t.Fatalf("security groups = %+v, %v", sgs, err)
	}
	vpcs, err := w.c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{})
	if err != nil || len(vpcs.Vpcs) != 1 || aws.ToString(vpcs.Vpcs[0].CidrBlock) != "10.0.0.0/16" {
		t.Fatalf("vpcs = %+v, %v", vpcs, err)
	}
	it, err := w.c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"m5.xlarge"}})
	if err != nil || len(it.InstanceTypes) != 1 {
		t.Fatalf("instance types = %+v, %v", it, err)
	}
	ni := it.InstanceTypes[0].NetworkInfo
	if aws.ToInt32(ni.MaximumNetworkInterfaces) != 4 || aws.ToInt32(ni.Ipv4AddressesPerInterface) != 15 ||
		len(ni.NetworkCards) != 1 || aws.ToInt32(ni.NetworkCards[0].MaximumNetworkInterfaces) != 4 {
		t.Fatalf("network info = %+v", ni)
	}
}

func TestCreateAttachAssignUnassign(t *testing.T) {
	w := newWorld(t, ec2fake.Options{}, noRetry)
	ctx := context.Background()
	cr, err := w.c.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{
		SubnetId: aws.String(w.sub1), Groups: []string{w.sg}, Description: aws.String("allot test"),
		SecondaryPrivateIpAddressCount: aws.Int32(3),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeNetworkInterface,
			Tags: []types.Tag{{Key: aws.String("allot.io/managed"), Value: aws.String("true")}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	eni := cr.NetworkInterface
	if len(eni.PrivateIpAddresses) != 4 || aws.ToString(eni.Description) != "allot test" || len(eni.TagSet) != 1 || eni.Attachment != nil {
		t.Fatalf("created = %+v", eni)
	}
	id := aws.ToString(eni.NetworkInterfaceId)

	// Device index 0 is eth0's.
	_, err = w.c.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{NetworkInterfaceId: &id, InstanceId: &w.inst, DeviceIndex: aws.Int32(0)})
	if apiCode(err) != "InvalidParameterValue" {
		t.Fatalf("attach at taken index: err = %v", err)
	}
	at, err := w.c.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{NetworkInterfaceId: &id, InstanceId: &w.inst, DeviceIndex: aws.Int32(1)})
	if err != nil || aws.ToString(at.AttachmentId) == "" {
		t.Fatalf("attach: %+v %v", at, err)
	}
	_, err = w.c.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{NetworkInterfaceId: &id,
		Attachment: &types.NetworkInterfaceAttachmentChanges{AttachmentId: at.AttachmentId, DeleteOnTermination: aws.Bool(true)}})
	if err != nil {
		t.Fatal(err)
	}

	// m5.large: 10 addresses per ENI, primary + 3 held: 6 more fit, 7 do not.
	_, err = w.c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: &id, SecondaryPrivateIpAddressCount: aws.Int32(7)})
	if apiCode(err) != "PrivateIpAddressLimitExceeded" {
		t.Fatalf("over limit: err = %v", err)
	}
	as, err := w.c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: &id, SecondaryPrivateIpAddressCount: aws.Int32(5)})
	if err != nil || len(as.AssignedPrivateIpAddresses) != 5 {
		t.Fatalf("assign: %+v %v", as, err)
	}
	_, err = w.c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: &id, PrivateIpAddresses: []string{"10.0.0.200"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String("eni-nope"), SecondaryPrivateIpAddressCount: aws.Int32(1)})
	if apiCode(err) != "InvalidNetworkInterfaceID.NotFound" {
		t.Fatalf("unknown ENI: err = %v", err)
	}
	gone := aws.ToString(as.AssignedPrivateIpAddresses[0].PrivateIpAddress)
	if _, err := w.c.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{NetworkInterfaceId: &id, PrivateIpAddresses: []string{gone, "10.0.0.200"}}); err != nil {
		t.Fatal(err)
	}
	_, err = w.c.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{NetworkInterfaceId: &id, PrivateIpAddresses: []string{gone}})
	if apiCode(err) != "InvalidParameterValue" {
		t.Fatalf("unassign twice: err = %v", err)
	}
	if _, err := w.c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}); err != nil {
		t.Fatal(err)
	}

	enis := w.fake.InstanceENIs(w.inst)
	if len(enis) != 2 || enis[1].ID != id || len(enis[1].Secondary) != 7 || !enis[1].Attachment.DeleteOnTermination || enis[1].Tags["k"] != "v" {
		t.Fatalf("fake state = %+v", enis)
	}
	if err := w.fake.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestLimitsAndFullSubnet(t *testing.T) {
	w := newWorld(t, ec2fake.Options{}, noRetry)
	ctx := context.Background()
	// t3.medium takes 3 ENIs: eth0 + 2.
	for i := 1; i <= 3; i++ {
		cr, err := w.c.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{SubnetId: &w.sub1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = w.c.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{NetworkInterfaceId: cr.NetworkInterface.NetworkInterfaceId, InstanceId: &w.small, DeviceIndex: aws.Int32(int32(i))})
		if i < 3 && err != nil {
			t.Fatal(err)
		}
		if i == 3 && apiCode(err) != "AttachmentLimitExceeded" {
			t.Fatalf("third attach: err = %v", err)
		}
	}
	// The /28 has 11 usable addresses: an ENI (1) with 10 secondaries fills it.
	_, err := w.c.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{SubnetId: &w.sub2, SecondaryPrivateIpAddressCount: aws.Int32(11)})
	if apiCode(err) != "InsufficientFreeAddressesInSubnet" {
		t.Fatalf("create in small subnet: err = %v", err)
	}
	cr, err := w.c.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{SubnetId: &w.sub2, SecondaryPrivateIpAddressCount: aws.Int32(10)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range cr.NetworkInterface.PrivateIpAddresses {
		a := netip.MustParseAddr(aws.ToString(p.PrivateIpAddress))
		if !w.fullSubnetPrefix.Contains(a) || a == netip.MustParseAddr("10.0.1.0") || a == netip.MustParseAddr("10.0.1.15") {
			t.Fatalf("address %s outside usable range of %s", a, w.fullSubnetPrefix)
		}
	}
	if w.fake.SubnetFree(w.sub2) != 0 {
		t.Fatalf("free = %d", w.fake.SubnetFree(w.sub2))
	}
	_, err = w.c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: cr.NetworkInterface.NetworkInterfaceId, SecondaryPrivateIpAddressCount: aws.Int32(1)})
	if apiCode(err) != "InsufficientFreeAddressesInSubnet" {
		t.Fatalf("assign in full subnet: err = %v", err)
	}
	if err := w.fake.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestPagination(t *testing.T) {
	w := newWorld(t, ec2fake.Options{}, noRetry)
	ctx := context.Background()
	for i := 0; i < 12; i++ {
		if _, err := w.c.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{SubnetId: &w.sub1}); err != nil {
			t.Fatal(err)
		}
	}
	p := ec2.NewDescribeNetworkInterfacesPaginator(w.c, &ec2.DescribeNetworkInterfacesInput{MaxResults: aws.Int32(5)})
	seen, pages := map[string]bool{}, 0
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, e := range out.NetworkInterfaces {
			seen[aws.ToString(e.NetworkInterfaceId)] = true
		}
	}
	if len(seen) != 14 || pages != 3 {
		t.Fatalf("seen %d ENIs in %d pages, want 14 in 3", len(seen), pages)
	}
	_, err := w.c.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{MaxResults: aws.Int32(2)})
	if apiCode(err) != "InvalidParameterValue" {
		t.Fatalf("MaxResults 2: err = %v", err)
	}
	_, err = w.c.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NextToken: aws.String("garbage")})
	if apiCode(err) != "InvalidPaginationToken" {
		t.Fatalf("bad token: err = %v", err)
	}
}

func TestThrottling(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	w := newWorld(t, ec2fake.Options{Throttle: true, Now: clock, Mutating: ec2fake.Bucket{Size: 3, Refill: 1}}, noRetry)
	ctx := context.Background()
	in := &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(w.fake.InstanceENIs(w.inst)[0].ID), SecondaryPrivateIpAddressCount: aws.Int32(1)}
	for i := 0; i < 3; i++ {
		if _, err := w.c.AssignPrivateIpAddresses(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	_, err := w.c.AssignPrivateIpAddresses(ctx, in)
	var re interface{ HTTPStatusCode() int }
	if apiCode(err) != "RequestLimitExceeded" || !errors.As(err, &re) || re.HTTPStatusCode() != 503 {
		t.Fatalf("4th call: err = %v", err)
	}
	// Describe has its own bucket.
	if _, err := w.c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second) // two tokens back
	for i := 0; i < 2; i++ {
		if _, err := w.c.AssignPrivateIpAddresses(ctx, in); err != nil {
			t.Fatalf("after refill, call %d: %v", i, err)
		}
	}
	st := w.fake.Stats()["AssignPrivateIpAddresses"]
	if st.Calls != 6 || st.OK != 5 || st.Throttled != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

// TestSDKRetriesThrottling checks the retry behaviour the backend relies on: the standard
// retryer retries RequestLimitExceeded (503), and with ratelimit.None its retry quota does not
// make calls fail fast under sustained throttling.
func TestSDKRetriesThrottling(t *testing.T) {
	retryer := func(o *ec2.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 5
			so.RateLimiter = ratelimit.None
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
	}
	w := newWorld(t, ec2fake.Options{}, retryer)
	ctx := context.Background()
	eth0 := w.fake.InstanceENIs(w.inst)[0].ID
	for i := 0; i < 30; i++ {
		w.fake.FailNext("AssignPrivateIpAddresses", 3, "RequestLimitExceeded")
		if _, err := w.c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: &eth0, SecondaryPrivateIpAddressCount: aws.Int32(1)}); err != nil {
			if i < 9 {
				t.Fatalf("call %d: %v", i, err)
			}
			if apiCode(err) != "PrivateIpAddressLimitExceeded" {
				t.Fatalf("call %d: %v", i, err)
			}
			break
		}
	}
	w.fake.FailNext("", 1, "InternalError")
	if _, err := w.c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{}); err != nil {
		t.Fatalf("500 not retried: %v", err)
	}
	w.fake.FailNext("DescribeVpcs", 5, "Unavailable")
	if _, err := w.c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{}); err == nil {
		t.Fatal("5 failures with 5 attempts succeeded")
	}
}

func TestClientTokenIdempotency(t *testing.T) {
	retryer := func(o *ec2.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.RateLimiter = ratelimit.None
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
	}
	w := newWorld(t, ec2fake.Options{}, retryer)
	before := len(w.fake.ENIs())
	// The first attempt creates the ENI but its answer is lost; the SDK retries with the
	// same auto-filled ClientToken and gets the same ENI back.
	w.fake.FailNextAfterApply("CreateNetworkInterface", 1, "InternalError")
	out, err := w.c.CreateNetworkInterface(context.Background(), &ec2.CreateNetworkInterfaceInput{SubnetId: &w.sub1, SecondaryPrivateIpAddressCount: aws.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(w.fake.ENIs()); got != before+1 {
		t.Fatalf("ENIs: %d -> %d, want one more", before, got)
	}
	if st := w.fake.Stats()["CreateNetworkInterface"]; st.Calls != 2 || len(out.NetworkInterface.PrivateIpAddresses) != 3 {
		t.Fatalf("stats = %+v, answer = %+v", st, out.NetworkInterface)
	}
}

func TestRandomFaultsAndLatency(t *testing.T) {
	w := newWorld(t, ec2fake.Options{Seed: 7, Latency: time.Millisecond}, noRetry)
	w.fake.SetRandomFault("DescribeVpcs", 0.5, "ServiceUnavailable")
	fails := 0
	for i := 0; i < 200; i++ {
		if _, err := w.c.DescribeVpcs(context.Background(), &ec2.DescribeVpcsInput{}); err != nil {
			if apiCode(err) != "ServiceUnavailable" {
				t.Fatal(err)
			}
			fails++
		}
	}
	if fails < 60 || fails > 140 {
		t.Fatalf("%d of 200 failed at p=0.5", fails)
	}
	w.fake.ClearFaults()
	if _, err := w.c.DescribeVpcs(context.Background(), &ec2.DescribeVpcsInput{}); err != nil {
		t.Fatal(err)
	}
	if len(ec2fake.Actions()) < 12 {
		t.Fatalf("actions = %v", ec2fake.Actions())
	}
}
