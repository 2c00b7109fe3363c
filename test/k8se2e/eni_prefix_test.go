package k8se2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-ipam/allot/core/eni/eninode"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// ec2Prefixes is what EC2 says the node carries: its secondary addresses and /28s.
func (e *eniEnv) ec2Prefixes(name string) (secondary int, prefixes []netip.Prefix) {
	for _, en := range e.fake.InstanceENIs(e.inst[name]) {
		secondary += len(en.Secondary)
		prefixes = append(prefixes, en.Prefixes4...)
	}
	return secondary, prefixes
}

// prefixState: every node's pool is exactly the addresses of the /28s EC2 says it holds,
// there are wantPrefixes of them and no secondary address, and the handshake is empty.
func (e *eniEnv) prefixState(wantPrefixes int) (bool, string) {
	for _, n := range e.nodes {
		an := &allotv1.AllotNode{}
		if err := e.c.Get(context.Background(), types.NamespacedName{Name: n.name}, an); err != nil {
			return false, n.name + ": " + err.Error()
		}
		sec, pfx := e.ec2Prefixes(n.name)
		pool, _ := eninode.Pool(an)
		truth := e.ec2Addrs(n.name)
		if sec != 0 || len(pfx) != wantPrefixes || len(pool) != len(truth) || len(an.Status.IPAM.ReleaseIPs) > 0 {
			return false, fmt.Sprintf("%s: %d secondary, prefixes %v, pool %d, EC2 %d addresses, handshake %v, used %d, pending %d, status.eni %+v",
				n.name, sec, pfx, len(pool), len(truth), an.Status.IPAM.ReleaseIPs, len(an.Status.IPAM.Used), an.Status.IPAM.Pending, an.Status.ENI)
		}
		for a, ifc := range pool {
			if truth[a] != ifc {
				return false, fmt.Sprintf("%s: pool says %s on %s, EC2 on %q", n.name, a, ifc, truth[a])
			}
		}
	}
	return true, ""
}

// TestENIPrefixDelegation: with cluster.eni.prefixDelegation the operator delegates /28s,
// pods get their addresses one by one through allot-cni's local API, and the scale-down
// gives back whole /28s only, never an address a pod holds.
func TestENIPrefixDelegation(t *testing.T) {
	e := newENIEnv(t, eniSetup{
		nodes:    2,
		types:    []string{"m5.large"},
		subnets:  []netip.Prefix{netip.MustParsePrefix("10.3.0.0/20")},
		prefixes: true,
	})
	ctx := context.Background()
	// 20 pods + pre-allocate 8 (eni-01: 4) = 28 (24) addresses: two /28s per node.
	e.scaleAll(ctx, func(int) int { return 20 })
	eventually(t, "two /28s per node serve the pods", 60*time.Second, func() (bool, string) { return e.prefixState(2) })
	e.checkNoDuplicates(ctx)
	if n := e.fake.Calls("AssignPrivateIpAddresses"); n > 4*len(e.nodes) {
		t.Errorf("%d AssignPrivateIpAddresses calls for %d nodes", n, len(e.nodes))
	}
	free := e.fake.SubnetFree(e.subnets[0])

	// No pod left: 32 - 8 (4) pre-allocated = 24 (28) excess: one whole /28 goes back per
	// node, the other stays for the pre-allocation.
	e.scaleAll(ctx, func(int) int { return 0 })
	eventually(t, "one /28 released per node", 60*time.Second, func() (bool, string) { return e.prefixState(1) })
	if got := e.fake.SubnetFree(e.subnets[0]); got != free+16*uint64(len(e.nodes)) {
		t.Errorf("subnet free %d after the release, want %d (whole /28s back)", got, free+16*uint64(len(e.nodes)))
	}
	e.checkNoDuplicates(ctx)

	// Scale up again: 13 pods + 8 (4) = 21 (17): the pods get addresses of the remaining /28
	// and of a new one.
	e.scaleAll(ctx, func(int) int { return 13 })
	eventually(t, "pods served again", 60*time.Second, func() (bool, string) { return e.prefixState(2) })
	e.checkNoDuplicates(ctx)
}
