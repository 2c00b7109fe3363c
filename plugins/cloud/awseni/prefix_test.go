package awseni_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/eni"
	awseni "github.com/allot-ipam/allot/plugins/cloud/awseni"
	"github.com/allot-ipam/allot/test/ec2fake"
)

// rounds runs agents and passes n times, the clock advancing by step.
func (h *harness) rounds(n int, step time.Duration) {
	h.t.Helper()
	for i := 0; i < n; i++ {
		h.agents()
		h.engine.Pass(h.ctx)
		h.verify()
		h.clock.Advance(step)
	}
}

func (h *harness) onEC2(n *simNode) (secondary int, prefixes []netip.Prefix) {
	id, _ := awseni.InstanceID(n.ref)
	for _, e := range h.fake.InstanceENIs(id) {
		secondary += len(e.Secondary)
		prefixes = append(prefixes, e.Prefixes4...)
	}
	return secondary, prefixes
}

// With prefix delegation, nodes get /28s, pods get their addresses one by one, and the
// scale-down gives back only /28s no pod uses, whole.
func TestPrefixDelegationOnEC2(t *testing.T) {
	h := newHarness(t, setup{
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/20")},
		types:   []string{"m5.large", "t3.medium"},
		nodes:   4,
		ecfg:    func(c *eni.Config) { c.PrefixDelegation = true },
	})
	for _, n := range h.nodes {
		n.want = 40
	}
	h.converge(20, time.Second, false)
	for _, n := range h.nodes {
		sec, pfx := h.onEC2(n)
		st, _ := h.engine.Status(n.ref.Name)
		// 40 pods + pre-allocate 8 = 48 addresses: three /28s, no secondary address.
		if sec != 0 || len(pfx) != 3 || st.Available != 48 {
			t.Errorf("%s: %d secondary addresses, prefixes %v, available %d; want 0, three /28s, 48", n.ref.Name, sec, pfx, st.Available)
		}
		if want := map[string]int{"m5.large": 3 * 9 * 16, "t3.medium": 3 * 5 * 16}[n.ref.InstanceType]; st.Capacity != want {
			t.Errorf("%s (%s): capacity %d, want %d", n.ref.Name, n.ref.InstanceType, st.Capacity, want)
		}
	}
	if calls := h.fake.Stats()["AssignPrivateIpAddresses"].Calls; calls > 2*len(h.nodes) {
		t.Errorf("%d AssignPrivateIpAddresses calls for %d nodes", calls, len(h.nodes))
	}

	// Scale down to 2 pods: the /28s without a pod go back (the first keeps the pods), whole.
	for _, n := range h.nodes {
		n.want = 2
	}
	h.rounds(12, 61*time.Second)
	for _, n := range h.nodes {
		sec, pfx := h.onEC2(n)
		st, _ := h.engine.Status(n.ref.Name)
		if sec != 0 || len(pfx) != 1 || st.Available != 16 || st.Releasing != 0 {
			t.Errorf("%s after scale-down: %d secondary, prefixes %v, status %+v; want one /28 left", n.ref.Name, sec, pfx, st)
		}
		for _, a := range n.pods {
			if !pfx[0].Contains(a) {
				t.Errorf("%s: pod address %s is not in the remaining %s", n.ref.Name, a, pfx[0])
			}
		}
	}
	if st := h.fake.Stats()["UnassignPrivateIpAddresses"]; st.OK == 0 {
		t.Fatal("no prefix was released")
	}
}

// A subnet without a free /28 and an instance that is not Nitro both get secondary
// addresses, as in Cilium.
func TestPrefixDelegationFallsBack(t *testing.T) {
	types := map[string]ec2fake.TypeLimits{}
	for k, v := range ec2fake.DefaultTypeLimits {
		types[k] = v
	}
	types["m4.large"] = ec2fake.TypeLimits{ENIs: 2, IPv4PerENI: 10, IPv6PerENI: 10, Hypervisor: "xen"}
	for _, tc := range []struct {
		name   string
		subnet string
		typ    string
	}{
		{"no free /28 in the subnet", "10.2.0.0/27", "m5.large"},
		{"not Nitro", "10.2.0.0/20", "m4.large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, setup{
				fake:    ec2fake.Options{Types: types},
				subnets: []netip.Prefix{netip.MustParsePrefix(tc.subnet)},
				types:   []string{tc.typ},
				nodes:   1,
				ecfg:    func(c *eni.Config) { c.PrefixDelegation = true },
			})
			h.nodes[0].want = 4
			h.converge(10, time.Second, false)
			sec, pfx := h.onEC2(h.nodes[0])
			if sec < 12 || len(pfx) != 0 {
				t.Fatalf("%d secondary addresses, prefixes %v; want at least 12 secondary, no prefix", sec, pfx)
			}
		})
	}
}

// With IPv6 prefix delegation every node gets one /80 on its first eligible interface, kept
// in its published pool, and never a second one.
func TestIPv6PrefixPerNode(t *testing.T) {
	h := newHarness(t, setup{
		subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/20")},
		ipv6:    netip.MustParsePrefix("2600:1f18:1:2::/64"),
		types:   []string{"m5.large"},
		nodes:   2,
		ecfg:    func(c *eni.Config) { c.PrefixDelegation, c.IPv6PrefixDelegation = true, true },
	})
	for _, n := range h.nodes {
		n.want = 3
	}
	h.converge(10, time.Second, false)
	h.rounds(3, time.Second)
	seen := map[netip.Prefix]bool{}
	for _, n := range h.nodes {
		id, _ := awseni.InstanceID(n.ref)
		var v6 []netip.Prefix
		for _, e := range h.fake.InstanceENIs(id) {
			v6 = append(v6, e.Prefixes6...)
		}
		if len(v6) != 1 || seen[v6[0]] {
			t.Fatalf("%s: IPv6 prefixes %v on EC2, want one of its own", n.ref.Name, v6)
		}
		seen[v6[0]] = true
		h.pools.mu.Lock()
		published := h.pools.m[n.ref.Name]
		h.pools.mu.Unlock()
		if !eni.HasIPv6Prefix(published.Interfaces) {
			t.Fatalf("%s: the /80 is not in the published pool %+v", n.ref.Name, published)
		}
	}
	if calls := h.fake.Stats()["AssignIpv6Addresses"].Calls; calls != len(h.nodes) {
		t.Fatalf("%d AssignIpv6Addresses calls for %d nodes", calls, len(h.nodes))
	}
}
