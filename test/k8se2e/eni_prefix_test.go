package k8se2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-ipam/allot/core/eni/eninode"
	"github.com/allot-ipam/allot/core/enihost"
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
	e.scaleAll(t, ctx, func(int) int { return 20 })
	eventually(t, "two /28s per node serve the pods", 60*time.Second, func() (bool, string) { return e.prefixState(2) })
	e.checkNoDuplicates(ctx)
	eventually(t, "the agents' ENI host state routes every pod through its /28's ENI", 10*time.Second,
		func() (bool, string) { return e.hostState(ctx) })
	if n := e.fake.Calls("AssignPrivateIpAddresses"); n > 4*len(e.nodes) {
		t.Errorf("%d AssignPrivateIpAddresses calls for %d nodes", n, len(e.nodes))
	}
	free := e.fake.SubnetFree(e.subnets[0])

	// No pod left: 32 - 8 (4) pre-allocated = 24 (28) excess: one whole /28 goes back per
	// node, the other stays for the pre-allocation.
	e.scaleAll(t, ctx, func(int) int { return 0 })
	eventually(t, "one /28 released per node", 60*time.Second, func() (bool, string) { return e.prefixState(1) })
	if got := e.fake.SubnetFree(e.subnets[0]); got != free+16*uint64(len(e.nodes)) {
		t.Errorf("subnet free %d after the release, want %d (whole /28s back)", got, free+16*uint64(len(e.nodes)))
	}
	e.checkNoDuplicates(ctx)

	// Scale up again: 13 pods + 8 (4) = 21 (17): the pods get addresses of the remaining /28
	// and of a new one.
	e.scaleAll(t, ctx, func(int) int { return 13 })
	eventually(t, "pods served again", 60*time.Second, func() (bool, string) { return e.prefixState(2) })
	e.checkNoDuplicates(ctx)
}

// ec2Prefixes6 is what EC2 says the node's instance carries of IPv6 /80s, by ENI.
func (e *eniEnv) ec2Prefixes6(name string) map[string][]netip.Prefix {
	out := map[string][]netip.Prefix{}
	for _, en := range e.fake.InstanceENIs(e.inst[name]) {
		if len(en.Prefixes6) > 0 {
			out[en.ID] = en.Prefixes6
		}
	}
	return out
}

// inIPv6Prefix: EC2 delegates a /80 holding a to the node's instance.
func (e *eniEnv) inIPv6Prefix(name string, a netip.Addr) bool {
	for _, ps := range e.ec2Prefixes6(name) {
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}
	}
	return false
}

// ipv6State: every node has exactly one /80 of its own, on its first ENI (device index 0),
// status.eni records it on that interface, and the node's agent serves it.
func (e *eniEnv) ipv6State(ctx context.Context) (bool, string) {
	seen := map[netip.Prefix]string{}
	for _, n := range e.nodes {
		byENI := e.ec2Prefixes6(n.name)
		eth0 := ""
		for _, en := range e.fake.InstanceENIs(e.inst[n.name]) {
			if en.Attachment != nil && en.Attachment.DeviceIndex == 0 {
				eth0 = en.ID
			}
		}
		if len(byENI) != 1 || len(byENI[eth0]) != 1 {
			return false, fmt.Sprintf("%s: IPv6 prefixes on EC2 %v, want one on eth0 %s", n.name, byENI, eth0)
		}
		p := byENI[eth0][0]
		if who, dup := seen[p]; dup {
			return false, fmt.Sprintf("%s and %s both carry %s", who, n.name, p)
		}
		seen[p] = n.name
		an := &allotv1.AllotNode{}
		if err := e.c.Get(ctx, types.NamespacedName{Name: n.name}, an); err != nil {
			return false, n.name + ": " + err.Error()
		}
		if !statusRecords(an, eth0, p) {
			return false, fmt.Sprintf("%s: status.eni %+v does not record %s on %s", n.name, an.Status.ENI, p, eth0)
		}
		if ok, msg := n.serves(ctx, p); !ok {
			return false, msg
		}
	}
	return true, ""
}

// statusRecords: status.eni lists p among the prefixes of interface id.
func statusRecords(an *allotv1.AllotNode, id string, p netip.Prefix) bool {
	if an.Status.ENI == nil {
		return false
	}
	for _, ifc := range an.Status.ENI.Interfaces {
		if ifc.ID == id && slices.Contains(ifc.Prefixes, p.String()) {
			return true
		}
	}
	return false
}

// serves: the node's agent lists p among its pools' CIDRs (local API).
func (n *node) serves(ctx context.Context, p netip.Prefix) (bool, string) {
	pools, err := n.cli.Pools(ctx)
	if err != nil {
		return false, n.name + ": " + err.Error()
	}
	for _, ps := range pools {
		if slices.Contains(ps.CIDRs, p.String()) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%s: the agent serves %+v, not %s", n.name, pools, p)
}

// checkDualStack checks that every pod holds one IPv4 address and one IPv6 address of its
// node's /80 (presented as a /128 via fe80::1), and returns the IPv6 addresses held.
func (e *eniEnv) checkDualStack(ctx context.Context) map[netip.Addr]string {
	t := e.t
	t.Helper()
	held := map[netip.Addr]string{}
	for _, n := range e.nodes {
		allocs, err := n.cli.Allocations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e.mu.Lock()
		pods := len(e.pods[n.name])
		e.mu.Unlock()
		if len(allocs) != pods {
			t.Errorf("%s: %d allocations for %d pods", n.name, len(allocs), pods)
		}
		for _, al := range allocs {
			var v4, v6 int
			for _, ip := range al.IPs {
				a := netip.MustParsePrefix(ip.Address).Addr()
				if a.Is4() {
					v4++
					continue
				}
				v6++
				held[a] = n.name + "/" + al.Pod.Name
				// As the AWS VPC CNI presents it: a host address, the next hop link-local.
				if netip.MustParsePrefix(ip.Address).Bits() != 128 || ip.Gateway != "fe80::1" {
					t.Errorf("%s/%s: IPv6 %s via %q, want a /128 via fe80::1", n.name, al.Pod.Name, ip.Address, ip.Gateway)
				}
				if !e.inIPv6Prefix(n.name, a) {
					t.Errorf("%s/%s holds %s, outside its node's /80 %v", n.name, al.Pod.Name, a, e.ec2Prefixes6(n.name))
				}
			}
			if v4 != 1 || v6 != 1 {
				t.Errorf("%s/%s holds %+v, want one IPv4 and one IPv6 address", n.name, al.Pod.Name, al.IPs)
			}
		}
	}
	return held
}

// hostState: each agent's ENI host state (what core/enihost applies when host routing is on)
// lists every address its pods hold, of both families, with the device index of the ENI
// that EC2 says carries it (a secondary address, or one of its /28s or /80s), and each ENI
// with its /80s: replies leave through the ENI holding the pod's address.
func (e *eniEnv) hostState(ctx context.Context) (bool, string) {
	for _, n := range e.nodes {
		enis, pods, err := n.d.Agent().ENIHostState(ctx)
		if err != nil {
			return false, n.name + ": " + err.Error()
		}
		allocs, err := n.cli.Allocations(ctx)
		if err != nil {
			return false, n.name + ": " + err.Error()
		}
		want := map[netip.Addr]int{} // address -> device index, from EC2
		for _, en := range e.fake.InstanceENIs(e.inst[n.name]) {
			if en.Attachment == nil {
				continue
			}
			if i := slices.IndexFunc(enis, func(h enihost.ENI) bool { return h.Index == en.Attachment.DeviceIndex }); i < 0 || !slices.Equal(enis[i].IPv6Prefixes, en.Prefixes6) {
				return false, fmt.Sprintf("%s: host state ENIs %+v, want device %d with %v", n.name, enis, en.Attachment.DeviceIndex, en.Prefixes6)
			}
			in := func(p netip.Prefix, a netip.Addr) bool { return p.Contains(a) }
			for _, al := range allocs {
				for _, ip := range al.IPs {
					a := netip.MustParsePrefix(ip.Address).Addr()
					if slices.Contains(en.Secondary, a) || slices.ContainsFunc(append(en.Prefixes4, en.Prefixes6...), func(p netip.Prefix) bool { return in(p, a) }) {
						want[a] = en.Attachment.DeviceIndex
					}
				}
			}
		}
		got := map[netip.Addr]int{}
		for _, p := range pods {
			got[p.Addr] = p.ENIIndex
		}
		if len(want) == 0 || !maps.Equal(got, want) {
			return false, fmt.Sprintf("%s: host state pods %v, want %v", n.name, got, want)
		}
	}
	return true, ""
}

// released: no pod is left, and neither the agents nor status.ipam.used hold an address.
func (e *eniEnv) released(ctx context.Context) (bool, string) {
	for _, n := range e.nodes {
		pools, err := n.cli.Pools(ctx)
		if err != nil {
			return false, n.name + ": " + err.Error()
		}
		for _, ps := range pools {
			if ps.Used != 0 {
				return false, fmt.Sprintf("%s: pool %s/%s still has %d used", n.name, ps.Name, ps.Family, ps.Used)
			}
		}
		an := &allotv1.AllotNode{}
		if err := e.c.Get(ctx, types.NamespacedName{Name: n.name}, an); err != nil {
			return false, n.name + ": " + err.Error()
		}
		if len(an.Status.IPAM.Used) > 0 {
			return false, fmt.Sprintf("%s: status.ipam.used %v", n.name, an.Status.IPAM.Used)
		}
	}
	return true, ""
}

// TestENIIPv6PrefixDelegation: with cluster.eni.ipv6PrefixDelegation (and IPv4 prefix
// delegation) the operator delegates one /80 per node through the AWS SDK, status.eni
// records it, and pods get one IPv4 address of the node's /28s and one IPv6 address of its
// /80 through the agent's local API; DEL gives both back.
func TestENIIPv6PrefixDelegation(t *testing.T) {
	e := newENIEnv(t, eniSetup{
		nodes:    2,
		types:    []string{"m5.large"},
		subnets:  []netip.Prefix{netip.MustParsePrefix("10.4.0.0/20")},
		ipv6:     netip.MustParsePrefix("2600:1f18:1:2::/64"),
		prefixes: true,
	})
	ctx := context.Background()
	eventually(t, "one /80 per node, recorded and served", 60*time.Second, func() (bool, string) { return e.ipv6State(ctx) })
	if n := e.fake.Calls("AssignIpv6Addresses"); n != len(e.nodes) {
		t.Errorf("%d AssignIpv6Addresses calls for %d nodes", n, len(e.nodes))
	}

	e.scaleAll(t, ctx, func(int) int { return 20 })
	eventually(t, "two /28s per node serve the pods", 60*time.Second, func() (bool, string) { return e.prefixState(2) })
	first := e.checkDualStack(ctx)
	if len(first) != 20*len(e.nodes) {
		t.Errorf("%d distinct IPv6 addresses held by %d pods", len(first), 20*len(e.nodes))
	}
	e.checkNoDuplicates(ctx)
	eventually(t, "the agents' ENI host state routes every pod through the ENI of each address", 10*time.Second,
		func() (bool, string) { return e.hostState(ctx) })

	// DEL gives both families back: nothing held, on the agents or in status.ipam.used.
	e.scaleAll(t, ctx, func(int) int { return 0 })
	eventually(t, "every address released", 30*time.Second, func() (bool, string) { return e.released(ctx) })

	// Served again from the same /80s, which stay (one per node, never released).
	e.scaleAll(t, ctx, func(int) int { return 13 })
	again := e.checkDualStack(ctx)
	if len(again) != 13*len(e.nodes) {
		t.Errorf("%d distinct IPv6 addresses held by %d pods", len(again), 13*len(e.nodes))
	}
	e.checkNoDuplicates(ctx)
	eventually(t, "still one /80 per node", 10*time.Second, func() (bool, string) { return e.ipv6State(ctx) })
	if n := e.fake.Calls("UnassignIpv6Addresses"); n != 0 {
		t.Errorf("%d UnassignIpv6Addresses calls: a node's /80 is never released", n)
	}
}
