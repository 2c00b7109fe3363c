package awseni_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/allot-ipam/allot/core/eni"
	awseni "github.com/allot-ipam/allot/plugins/cloud/awseni"
	"github.com/allot-ipam/allot/test/ec2fake"
)

// TestGarbageCollectsLeakedENIs: through the real SDK against EC2, the garbage collection
// deletes only detached ENIs carrying the cluster's tag, and only once they stayed detached
// for a whole interval (one run marks, the next deletes): an ENI attached in between, one of
// another cluster, an untagged one and an attached one with the tag all stay. ENIs the
// engine creates carry the tag.
func TestGarbageCollectsLeakedENIs(t *testing.T) {
	h := newHarness(t, setup{
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/20")},
		types:   []string{"m5.large"},
		nodes:   1,
		ecfg:    func(c *eni.Config) { c.ClusterName = "blue"; c.FirstInterfaceIndex = 1 },
	})
	ctx := context.Background()
	api := ec2fake.NewClient(h.url)
	create := func(tags map[string]string) string {
		t.Helper()
		var ts []types.Tag
		for k, v := range tags {
			ts = append(ts, types.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
		in := &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(h.subnets[0])}
		if len(ts) > 0 {
			in.TagSpecifications = []types.TagSpecification{{ResourceType: types.ResourceTypeNetworkInterface, Tags: ts}}
		}
		out, err := api.CreateNetworkInterface(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.NetworkInterface.NetworkInterfaceId)
	}
	blue := map[string]string{eni.ClusterTag: "blue"}
	leaked := create(blue)
	attachedLater := create(blue)
	other := create(map[string]string{eni.ClusterTag: "green"})
	untagged := create(nil)
	// The engine's own ENI (attached, tagged).
	h.converge(10, 0, false)
	inst, _ := awseni.InstanceID(h.nodes[0].ref)
	var engineENI string
	for _, e := range h.fake.InstanceENIs(inst) {
		if e.Attachment.DeviceIndex > 0 {
			engineENI = e.ID
			if e.Tags[eni.ClusterTag] != "blue" {
				t.Fatalf("engine's ENI without the cluster tag: %v", e.Tags)
			}
		}
	}
	if engineENI == "" {
		t.Fatal("the engine created no ENI")
	}

	gc := &eni.GC{Collector: h.backend, Tags: blue}
	res, err := gc.RunOnce(ctx)
	if err != nil || len(res.Deleted) != 0 || !slices.Equal(res.Marked, sortedStrings(leaked, attachedLater)) {
		t.Fatalf("first run: %+v %v", res, err)
	}
	if _, err := api.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{NetworkInterfaceId: aws.String(attachedLater),
		InstanceId: aws.String(inst), DeviceIndex: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	res, err = gc.RunOnce(ctx)
	if err != nil || !slices.Equal(res.Deleted, []string{leaked}) || len(res.Marked) != 0 {
		t.Fatalf("second run: %+v %v", res, err)
	}
	left := map[string]bool{}
	for _, e := range h.fake.ENIs() {
		left[e.ID] = true
	}
	if left[leaked] || !left[attachedLater] || !left[other] || !left[untagged] || !left[engineENI] {
		t.Fatalf("ENIs left: %v", left)
	}
	if st := h.fake.Stats()["DeleteNetworkInterface"]; st.OK != 1 {
		t.Fatalf("DeleteNetworkInterface calls: %+v", st)
	}
	if _, err := (&eni.GC{Collector: h.backend}).RunOnce(ctx); err == nil {
		t.Fatal("a run without tags must refuse: it would collect every detached ENI of the account")
	}
}
