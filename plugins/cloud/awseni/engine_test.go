package awseni_test

import (
	"context"
	"math/rand"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/allot-ipam/allot/core/eni"
	awseni "github.com/allot-ipam/allot/plugins/cloud/awseni"
	"github.com/allot-ipam/allot/test/ec2fake"
)

// capacity is how many pod addresses a type can carry with first-interface-index 0.
func capacity(typ string) int {
	l := ec2fake.DefaultTypeLimits[typ]
	return l.ENIs * (l.IPv4PerENI - 1)
}

func TestTwentyNodesScaleUpAndDown(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: 20 nodes against the EC2 fake")
	}
	h := newHarness(t, setup{
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/20")},
		types:   []string{"m5.large", "m5.xlarge", "c5.4xlarge", "t3.medium", "m5.2xlarge"},
		nodes:   20,
	})
	rnd := rand.New(rand.NewSource(1))
	// Scale up: each node runs up to its capacity minus pre-allocate.
	for _, n := range h.nodes {
		n.want = 1 + rnd.Intn(capacity(n.ref.InstanceType)-8)
	}
	h.converge(30, time.Second, false)
	for _, n := range h.nodes {
		st, _ := h.engine.Status(n.ref.Name)
		if st.Available < n.want+8 && st.Blocked == "" {
			t.Errorf("%s: available %d < used %d + pre-allocate 8", n.ref.Name, st.Available, n.want)
		}
	}
	up := h.mutatingCalls()

	// Scale down to a few pods: after the release delay the excess goes back to EC2 through
	// the handshake, and every node settles at used + pre-allocate.
	for _, n := range h.nodes {
		n.want = rnd.Intn(3)
	}
	rounds := h.converge(40, 61*time.Second, true)
	for _, n := range h.nodes {
		st, _ := h.engine.Status(n.ref.Name)
		if st.Available != len(n.pods)+8 {
			t.Errorf("%s: available %d after scale-down, want %d", n.ref.Name, st.Available, len(n.pods)+8)
		}
	}
	if st := h.fake.Stats()["UnassignPrivateIpAddresses"]; st.OK == 0 {
		t.Fatal("nothing was released")
	}
	// ENIs are never removed.
	if st := h.fake.Stats()["DeleteNetworkInterface"]; st.Calls != 0 {
		t.Fatalf("ENIs deleted: %+v", st)
	}
	t.Logf("scale-up: %d mutating calls; scale-down converged in %d rounds, %d mutating calls in all", up, rounds, h.mutatingCalls())

	// Scale up again: the addresses come back.
	for _, n := range h.nodes {
		n.want = 1 + rnd.Intn(capacity(n.ref.InstanceType)-8)
	}
	h.converge(30, time.Second, false)
}

func TestFullSubnetSendsNewENIsElsewhere(t *testing.T) {
	// eth0's subnet is a /26 (59 usable, 4 taken by primaries); nodes need far more.
	h := newHarness(t, setup{
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/26"), netip.MustParsePrefix("10.2.0.0/22")},
		types:   []string{"m5.xlarge"},
		nodes:   4,
	})
	for _, n := range h.nodes {
		n.want = 30
	}
	h.converge(30, time.Second, false)
	// 4 nodes x (30 used + 8 pre-allocated) cannot fit the first subnet's 55 free addresses.
	spilled := 0
	for _, e := range h.fake.ENIs() {
		if e.Attachment != nil && e.Attachment.DeviceIndex > 0 {
			if e.Subnet == h.subnets[1] {
				spilled++
			}
			if !e.Attachment.DeleteOnTermination || e.Tags["allot.io/node"] == "" || e.Description == "" {
				t.Errorf("%s: delete-on-termination %v, tags %v, description %q", e.ID, e.Attachment.DeleteOnTermination, e.Tags, e.Description)
			}
			if len(e.SecurityGroups) != 1 {
				t.Errorf("%s: security groups %v, want eth0's", e.ID, e.SecurityGroups)
			}
		}
	}
	if spilled == 0 {
		t.Fatal("no ENI was created in the second subnet")
	}
}

func TestThrottlingAndFaultsStillConverge(t *testing.T) {
	h := newHarness(t, setup{
		fake:    ec2fake.Options{Throttle: true, Seed: 3},
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/20")},
		types:   []string{"m5.xlarge", "c5.4xlarge", "m5.large"},
		nodes:   6,
	})
	// 20% throttling plus 5% 5xx, on top of the AWS-sized token buckets.
	h.fake.SetRandomFault("", 0.20, "RequestLimitExceeded")
	h.fake.SetRandomFault("", 0.03, "InternalError")
	h.fake.SetRandomFault("", 0.02, "Unavailable")
	for _, n := range h.nodes {
		n.want = capacity(n.ref.InstanceType) - 8
	}
	h.converge(60, time.Second, false)
	errs := 0
	for _, st := range h.fake.Stats() {
		for _, c := range st.Errors {
			errs += c
		}
	}
	if errs == 0 {
		t.Fatal("no fault was injected")
	}
	counts := h.metrics.Counts()
	if counts["AssignPrivateIpAddresses"]["RequestLimitExceeded"]+counts["CreateNetworkInterface"]["RequestLimitExceeded"]+
		counts["AttachNetworkInterface"]["RequestLimitExceeded"]+counts["DescribeInstances"]["RequestLimitExceeded"] == 0 {
		t.Logf("metrics: %v", counts)
	}
	t.Logf("faults injected: %d; calls: %v", errs, counts)
}

func TestRestartResumesFromEC2(t *testing.T) {
	h := newHarness(t, setup{
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/20")},
		types:   []string{"m5.xlarge", "t3.medium"},
		nodes:   4,
	})
	for _, n := range h.nodes {
		n.want = capacity(n.ref.InstanceType) - 8
	}
	h.converge(20, time.Second, false)
	before := h.fake.ENIs()
	calls := h.mutatingCalls()

	h.restart()
	h.converge(5, time.Second, false)
	if got := h.mutatingCalls(); got != calls {
		t.Fatalf("restart made %d mutating calls", got-calls)
	}
	after := h.fake.ENIs()
	if len(after) != len(before) {
		t.Fatalf("ENIs %d -> %d", len(before), len(after))
	}
	for i := range before {
		if len(before[i].Secondary) != len(after[i].Secondary) {
			t.Fatalf("%s: %d -> %d addresses", before[i].ID, len(before[i].Secondary), len(after[i].Secondary))
		}
	}
}

// TestRestartDuringHandshake: the operator restarts with addresses marked and answered; the
// new one picks the entries up from the handshake and finishes the release.
func TestRestartDuringHandshake(t *testing.T) {
	h := newHarness(t, setup{
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/20")},
		types:   []string{"m5.xlarge"},
		nodes:   2,
	})
	for _, n := range h.nodes {
		n.want = 30
	}
	h.converge(20, time.Second, false)
	for _, n := range h.nodes {
		n.want = 1
	}
	// Run until something is marked, then restart.
	marked := false
	for i := 0; i < 10 && !marked; i++ {
		h.agents()
		res := h.engine.Pass(h.ctx)
		marked = res.Marked > 0
		h.clock.Advance(61 * time.Second)
	}
	if !marked {
		t.Fatal("nothing marked")
	}
	h.restart()
	h.converge(20, 61*time.Second, true)
}

func TestBackendCachesInventory(t *testing.T) {
	h := newHarness(t, setup{
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/20")},
		types:   []string{"m5.xlarge"},
		nodes:   50,
	})
	h.fake.ResetStats()
	for i := 0; i < 3; i++ {
		for _, n := range h.nodes {
			if _, err := h.backend.Inventory(h.ctx, n.ref); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One resync: DescribeInstances + DescribeNetworkInterfaces + DescribeSubnets (attempts
	// the client retried after a transport error are not the backend's doing).
	retried := 0
	for _, outcomes := range h.metrics.Counts() {
		retried += outcomes["error"]
	}
	if got := h.fake.Calls("") - retried; got != 3 {
		t.Fatalf("150 inventories cost %d calls, want 3: %v; client: %v", got, h.fake.Stats(), h.metrics.Counts())
	}
	_ = awseni.Name
	_ = eni.DefaultConfig
}

// TestCapacityAndExcludedENIOnEC2: a t3.medium (3 ENIs x 6 addresses) carries one ENI
// tagged for exclusion at device index 1. Its pods ask for more than the instance can hold;
// the engine stops at the capacity of the two usable ENIs ((3 - 1) x 5) without
// max-allocate, needs nothing more (no calls bound to fail), and never puts an address on
// or takes one from the excluded ENI.
func TestCapacityAndExcludedENIOnEC2(t *testing.T) {
	h := newHarness(t, setup{
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/20")},
		types:   []string{"t3.medium"},
		nodes:   1,
		ecfg:    func(c *eni.Config) { c.ExcludeInterfaceTags = map[string]string{"allot.io/exclude": "true"} },
	})
	ctx := context.Background()
	api := ec2fake.NewClient(h.url)
	inst, _ := awseni.InstanceID(h.nodes[0].ref)
	created, err := api.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(h.subnets[0]),
		SecondaryPrivateIpAddressCount: aws.Int32(2),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeNetworkInterface,
			Tags: []types.Tag{{Key: aws.String("allot.io/exclude"), Value: aws.String("true")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	excluded := aws.ToString(created.NetworkInterface.NetworkInterfaceId)
	if _, err := api.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{NetworkInterfaceId: aws.String(excluded),
		InstanceId: aws.String(inst), DeviceIndex: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	h.nodes[0].want = 10
	h.converge(20, time.Second, false)
	st, _ := h.engine.Status(h.nodes[0].ref.Name)
	if st.Capacity != 10 || st.Available != 10 || st.Needed != 0 || st.Blocked != "" {
		t.Fatalf("status %+v, want capacity = available = 10, nothing needed", st)
	}
	calls := h.mutatingCalls()
	for i := 0; i < 3; i++ {
		h.agents()
		h.engine.Pass(ctx)
	}
	if got := h.mutatingCalls(); got != calls {
		t.Fatalf("a node at capacity still changes EC2: %d calls, was %d", got, calls)
	}
	for _, e := range h.fake.InstanceENIs(inst) {
		if e.ID == excluded && len(e.Secondary) != 2 {
			t.Fatalf("excluded ENI's addresses changed: %v", e.Secondary)
		}
	}
	for _, a := range h.pools.addrs(h.nodes[0].ref.Name) {
		for _, e := range h.fake.InstanceENIs(inst) {
			if e.ID == excluded && slices.Contains(e.Secondary, a) {
				t.Fatalf("address %s of the excluded ENI is in the pool", a)
			}
		}
	}
}

// TestPerNodeSubnetsAndSecurityGroups: each node's new ENIs go to its own subnets (by ID or
// by tags) with its own security groups (by ID or by tags, Cilium's security-group-tags per
// node), through the real SDK against EC2; a node without settings gets eth0's subnet and
// groups; tags that match no group make creation fail instead of falling back to eth0's.
func TestPerNodeSubnetsAndSecurityGroups(t *testing.T) {
	h := newHarness(t, setup{
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/20"), netip.MustParsePrefix("10.2.0.0/20"), netip.MustParsePrefix("10.3.0.0/20")},
		types:   []string{"m5.large"},
		nodes:   4,
		ecfg:    func(c *eni.Config) { c.FirstInterfaceIndex = 1 },
	})
	sgA := h.fake.AddSecurityGroup(ec2fake.SecurityGroup{VPC: h.vpc, Name: "pods-a", Tags: map[string]string{"tier": "pods-a"}})
	sgA2 := h.fake.AddSecurityGroup(ec2fake.SecurityGroup{VPC: h.vpc, Name: "pods-a2", Tags: map[string]string{"tier": "pods-a"}})
	sgB := h.fake.AddSecurityGroup(ec2fake.SecurityGroup{VPC: h.vpc, Name: "pods-b"})
	h.nodes[0].mod = func(s *eni.NodeState) {
		s.SubnetIDs = []string{h.subnets[1]}
		s.SecurityGroupTags = map[string]string{"tier": "pods-a"}
	}
	h.nodes[1].mod = func(s *eni.NodeState) {
		s.SubnetTags = map[string]string{"index": "2"}
		s.SecurityGroups = []string{sgB}
	}
	h.nodes[3].mod = func(s *eni.NodeState) { s.SecurityGroupTags = map[string]string{"tier": "nobody"} }
	// No pods: pre-allocate 8, one new ENI each (eth0 is not used, first-interface-index 1).
	for i := 0; i < 10; i++ {
		h.agents()
		h.engine.Pass(h.ctx)
	}
	want := []struct {
		subnet string
		groups []string
	}{{h.subnets[1], sortedStrings(sgA, sgA2)}, {h.subnets[2], []string{sgB}}, {h.subnets[0], nil}}
	for i, w := range want {
		inst, _ := awseni.InstanceID(h.nodes[i].ref)
		enis := h.fake.InstanceENIs(inst)
		if len(enis) != 2 {
			t.Fatalf("%s: %d ENIs, want eth0 and one more", h.nodes[i].ref.Name, len(enis))
		}
		groups := w.groups
		if groups == nil {
			groups = enis[0].SecurityGroups // eth0's
		}
		if e := enis[1]; e.Subnet != w.subnet || !slices.Equal(e.SecurityGroups, groups) {
			t.Errorf("%s: new ENI in %s with groups %v, want %s with %v", h.nodes[i].ref.Name, e.Subnet, e.SecurityGroups, w.subnet, groups)
		}
	}
	inst, _ := awseni.InstanceID(h.nodes[3].ref)
	if enis := h.fake.InstanceENIs(inst); len(enis) != 1 {
		t.Fatalf("node with unmatched security-group tags got ENIs: %+v", enis)
	}
	if st, _ := h.engine.Status(h.nodes[3].ref.Name); !strings.Contains(st.LastError, "match no security group") {
		t.Fatalf("unmatched tags: status %+v", st)
	}
}

func sortedStrings(s ...string) []string { slices.Sort(s); return s }
