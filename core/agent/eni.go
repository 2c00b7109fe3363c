package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-ipam/allot/core/eni"
	"github.com/allot-ipam/allot/core/eni/eninode"
	"github.com/allot-ipam/allot/core/enihost"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/sdk/policy"
)

// ENI mode.
//
// The operator's ENI engine puts cloud addresses in spec.ipam.pool; the agent serves them
// as one local pool (ENIOptions.Pool), each address a single-address block of the dynamic
// pools, presented to pods with its subnet's prefix length and router when status.eni
// names the subnet. The agent reports status.ipam.used (with owners) and pending, and
// writes spec.eni (instance, type, zone, per-node overrides).
//
// The release handshake, agent side: for an address marked-for-release the agent first
// removes its block from the local allocator — refused while a pod holds the address,
// and once it succeeds nothing can hand the address out — and only then answers
// ready-for-release (eni.AgentAnswer, inUse = the removal was refused: do-not-release). An
// address in any reserved state (eni.Reserved) is never added back; a released entry is
// dropped only once the address has left spec.ipam.pool, so an address the cloud no longer
// assigns to this node can never be handed out again from a lagging pool.

// ENIOptions turn on ENI mode.
type ENIOptions struct {
	// Pool is the local pool the addresses form (the name pool policies choose; default
	// "default").
	Pool string
	// Spec is what the agent writes in spec.eni: the instance, its type and zone, and
	// per-node overrides of the operator's configuration.
	Spec v1alpha1.NodeENISpec
	// HostRoutes presents every address as a host address (/32, /128) without gateway,
	// instead of with its subnet's prefix length and router.
	HostRoutes bool
}

// DefaultENIPool is the local pool of ENI mode when none is configured.
const DefaultENIPool = "default"

func (o *ENIOptions) pool() string {
	if o.Pool == "" {
		return DefaultENIPool
	}
	return o.Pool
}

func (a *Agent) eniClients() eninode.Clients {
	return eninode.Clients{Live: a.live, Writer: a.live, Cached: a.cache}
}

// syncENI is the node loop's pass in ENI mode.
func (a *Agent) syncENI(ctx context.Context) error {
	m := a.m.Load()
	pool := a.opts.ENI.pool()
	node := &v1alpha1.AllotNode{}
	err := a.cache.Get(ctx, types.NamespacedName{Name: a.opts.NodeName}, node)
	if apierrors.IsNotFound(err) {
		return a.createENINode(ctx)
	}
	if err != nil {
		return fmt.Errorf("agent: read AllotNode %s: %w", a.opts.NodeName, err)
	}
	if err := a.eniMergeSpec(ctx, node); err != nil {
		return err
	}
	addrs, bad := eninode.Pool(node)
	for _, b := range bad {
		a.reportOnce("bad pool entry "+b, "spec.ipam.pool holds a key that is not an IP address; ignored", "entry", b)
	}
	prefixes := eniIPv6Prefixes(node)
	states := eninode.States(node)
	for _, fam := range eniFamilies(addrs, prefixes) {
		if err := m.EnsurePool(pool, fam); err != nil {
			return fmt.Errorf("agent: pool %q: %w", pool, err)
		}
	}
	answers := a.eniHandshake(m, pool, addrs, states)
	served := a.eniServe(m, pool, node, addrs, states, prefixes)
	// The node store holds what is served before any ready-for-release answer is written:
	// an agent restarted while the API server is down never serves an address the operator
	// may have given back to the cloud.
	if a.opts.Store != nil {
		if err := a.saveState(ctx, served); err != nil {
			return err
		}
	}
	a.reconcileDone(m)
	a.markNodeRead()
	return a.eniWriteStatus(ctx, m, pool, node, answers)
}

// eniMergeSpec writes spec.eni: the agent's configuration, merged so that a field someone
// edited by hand keeps its value (eninode.MergeSpec).
func (a *Agent) eniMergeSpec(ctx context.Context, node *v1alpha1.AllotNode) error {
	o := a.opts.ENI
	_, changed, err := eninode.MergeSpec(node.DeepCopy(), &o.Spec)
	if err != nil {
		a.reportOnce("merge spec.eni", "spec.eni could not be merged with the agent's configuration", "err", err)
		return nil
	}
	if !changed {
		return nil
	}
	err = eninode.UpdateSpec(ctx, a.eniClients(), a.opts.NodeName, func(n *v1alpha1.AllotNode) bool {
		_, changed, err := eninode.MergeSpec(n, &o.Spec)
		return err == nil && changed
	})
	a.metrics.writes.WithLabelValues("spec", resultOf(err)).Inc()
	if err != nil {
		return fmt.Errorf("agent: write spec.eni: %w", err)
	}
	return nil
}

// eniHandshake takes every address the operator wants back out of the allocator first and
// returns the agent's answers (a released entry is dropped only once its address has left
// spec.ipam.pool).
func (a *Agent) eniHandshake(m *ipam.Manager, pool string, addrs map[netip.Addr]string, states map[netip.Addr]eni.ReleaseState) []eni.Transition {
	held := map[netip.Addr]bool{} // the removal was refused: a pod holds it
	for _, ad := range sortedAddrKeys(states) {
		if !eni.Reserved(states[ad]) {
			continue
		}
		if err := m.RemoveCIDR(pool, hostPrefix(ad)); err != nil {
			held[ad] = true
			if !errors.Is(err, ipam.ErrBlockInUse) {
				a.log.Warn("address marked for release could not be taken out of the pool", "addr", ad, "err", err)
			}
		}
	}
	answers := eni.AgentAnswer(states, func(ad netip.Addr) bool { return held[ad] })
	kept := answers[:0]
	for _, t := range answers {
		if t.From == eni.StateReleased {
			if _, still := addrs[t.Addr]; still {
				continue
			}
		}
		kept = append(kept, t)
	}
	return kept
}

// eniServe puts the pool's addresses not in the handshake (do-not-release stays in
// service) and the node's IPv6 prefixes into the allocator, and takes out what left them. It
// returns the blocks it serves, as the node store keeps them, in a stable order.
func (a *Agent) eniServe(m *ipam.Manager, pool string, node *v1alpha1.AllotNode, addrs map[netip.Addr]string, states map[netip.Addr]eni.ReleaseState, prefixes []netip.Prefix) []store.Block {
	addressing := a.eniAddressing(node)
	var served []store.Block
	for _, ad := range sortedAddrKeys(addrs) {
		if eni.Reserved(states[ad]) {
			continue
		}
		if b, ok := a.eniAdd(m, pool, ad, addrs[ad], addressing); ok {
			served = append(served, b)
		}
	}
	v6 := a.eniIPv6Addressing()
	for _, p := range prefixes {
		// Pods get single addresses of the /80, as from the AWS VPC CNI's IPv6 prefix.
		if err := m.AddCIDRWith(pool, p, v6); err != nil {
			a.reportOnce("add "+p.String(), "IPv6 prefix of status.eni refused", "prefix", p, "err", err)
			continue
		}
		served = append(served, store.Block{Pool: pool, CIDR: p, Bits: v6.Bits, Gateway: v6.Gateway})
	}
	// Addresses that left the pool without the handshake (the cloud lost them): out, unless
	// a pod holds one (kept, and reported, until it is released).
	for _, u := range m.Usage() {
		if u.Name != pool {
			continue
		}
		for _, c := range u.CIDRs {
			ad := c.Prefix.Addr()
			if _, ok := addrs[ad]; (ok && !eni.Reserved(states[ad])) || slices.Contains(prefixes, c.Prefix) {
				continue
			}
			if err := m.RemoveCIDR(pool, c.Prefix); err != nil {
				a.reportOnce("lost "+ad.String(), "an address in use left spec.ipam.pool; kept until its pod releases it", "addr", ad, "err", err)
			}
		}
	}
	return served
}

// eniIPv6LinkGateway is the next hop of a pod's IPv6 default route in ENI mode: the AWS VPC
// CNI's dummy link-local gateway (its driver routes ::/0 via fe80::1 on the pod's veth).
var eniIPv6LinkGateway = netip.MustParseAddr("fe80::1")

// eniIPv6Addressing is how an address of the node's IPv6 /80 is presented to a pod, as the
// AWS VPC CNI presents it: a /128 (the rest of the /80 belongs to other pods on other veths,
// not to the pod's link) with a link-local gateway; with hostRoutes a /128 without gateway,
// like an IPv4 address then.
func (a *Agent) eniIPv6Addressing() ipam.Addressing {
	if a.opts.ENI.HostRoutes {
		return ipam.Addressing{Bits: 128}
	}
	return ipam.Addressing{Bits: 128, Gateway: eniIPv6LinkGateway}
}

// eniAdd serves one address of the pool, presented as its interface's subnet says, and
// returns its block as the node store keeps it (ok false: not served).
func (a *Agent) eniAdd(m *ipam.Manager, pool string, ad netip.Addr, ifc string, addressing map[string]ipam.Addressing) (b store.Block, ok bool) {
	var err error
	b = store.Block{Pool: pool, CIDR: hostPrefix(ad)}
	ad2, known := addressing[ifc]
	switch {
	case a.opts.ENI.HostRoutes:
		err = m.AddCIDR(pool, b.CIDR)
	case !known:
		// The operator writes status.eni before the pool; an interface it does not list
		// yet is served once it does, so no pod gets an address without its subnet.
		a.reportOnce("unknown interface "+ifc, "spec.ipam.pool names an interface status.eni does not list yet; its addresses wait", "interface", ifc)
		return b, false
	case ad2.Bits > 0 && ad2.Bits <= ad.BitLen():
		b.Bits, b.Gateway = ad2.Bits, ad2.Gateway
		err = m.AddCIDRWith(pool, b.CIDR, ad2)
	default:
		err = m.AddCIDR(pool, b.CIDR)
	}
	if err != nil {
		a.reportOnce("add "+ad.String(), "address of spec.ipam.pool refused", "addr", ad, "err", err)
		return b, false
	}
	return b, true
}

// eniWriteStatus writes the handshake answers, used and pending, in one write.
func (a *Agent) eniWriteStatus(ctx context.Context, m *ipam.Manager, pool string, node *v1alpha1.AllotNode, answers []eni.Transition) error {
	used, pending, err := a.eniUsage(ctx, m, pool)
	if err != nil {
		return err
	}
	if len(answers) == 0 && equalUsed(node.Status.IPAM.Used, used) && node.Status.IPAM.Pending == pending {
		return nil
	}
	var rejected []eni.Transition
	err = eninode.UpdateStatus(ctx, a.eniClients(), a.opts.NodeName, func(n *v1alpha1.AllotNode) bool {
		changed := false
		if len(answers) > 0 {
			var rs map[string]v1alpha1.ReleaseState
			rs, rejected = eninode.ApplyTransitions(cloneReleaseIPs(n.Status.IPAM.ReleaseIPs), answers)
			if len(rejected) < len(answers) {
				n.Status.IPAM.ReleaseIPs = rs
				changed = true
			}
		}
		if !equalUsed(n.Status.IPAM.Used, used) || n.Status.IPAM.Pending != pending {
			n.Status.IPAM.Used, n.Status.IPAM.Pending = used, pending
			changed = true
		}
		return changed
	})
	a.metrics.writes.WithLabelValues("status", resultOf(err)).Inc()
	if err != nil {
		return fmt.Errorf("agent: write status.ipam: %w", err)
	}
	for _, t := range rejected {
		a.log.Debug("handshake entry moved meanwhile", "transition", t.String())
	}
	for _, t := range answers {
		if t.To == eni.StateReady {
			a.log.Info("address ready for release", "addr", t.Addr)
		}
	}
	return nil
}

// eniIPv6Prefixes are the IPv6 prefixes status.eni lists (IPv6 prefix delegation).
func eniIPv6Prefixes(node *v1alpha1.AllotNode) []netip.Prefix {
	if node.Status.ENI == nil {
		return nil
	}
	var out []netip.Prefix
	for _, ifc := range node.Status.ENI.Interfaces {
		out = append(out, ifcIPv6Prefixes(ifc)...)
	}
	return out
}

// ifcIPv6Prefixes are the IPv6 prefixes delegated to ifc (malformed entries ignored).
func ifcIPv6Prefixes(ifc v1alpha1.ENIInterface) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ifc.Prefixes {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is6() && p == p.Masked() {
			out = append(out, p)
		}
	}
	return out
}

// eniFamilies are the families the pool serves. IPv4 always: an ENI node's pods have an
// IPv4 address, and an ADD that comes before the node's first one waits for it instead of
// leaving with an IPv6 address alone (the /80 can arrive before the first /28); IPv6 beside
// it once the node has a /80 or IPv6 addresses.
func eniFamilies(addrs map[netip.Addr]string, prefixes []netip.Prefix) []policy.Family {
	fams := []policy.Family{policy.IPv4}
	if len(prefixes) > 0 || slices.Contains(families4and6(addrs), policy.IPv6) {
		fams = append(fams, policy.IPv6)
	}
	return fams
}

// eniAddressing maps each interface of status.eni to how its addresses are presented: the
// subnet's prefix length and its router (the subnet's first host address, as in a VPC), or
// the zero value (host addresses) when the subnet is not given.
func (a *Agent) eniAddressing(node *v1alpha1.AllotNode) map[string]ipam.Addressing {
	out := map[string]ipam.Addressing{}
	if node.Status.ENI == nil {
		return out
	}
	for _, ifc := range node.Status.ENI.Interfaces {
		p, err := netip.ParsePrefix(ifc.SubnetCIDR)
		if err != nil || p != p.Masked() {
			out[ifc.ID] = ipam.Addressing{} // known, no subnet: served as host addresses
			continue
		}
		ad := ipam.Addressing{Bits: p.Bits()}
		if hb := p.Addr().BitLen() - p.Bits(); hb >= 2 {
			ad.Gateway = p.Addr().Next()
		}
		out[ifc.ID] = ad
	}
	return out
}

// eniUsage is status.ipam.used (addresses of the pool held, with their pod) and pending.
func (a *Agent) eniUsage(ctx context.Context, m *ipam.Manager, pool string) (map[string]v1alpha1.UsedAddress, int32, error) {
	allocs, err := m.Allocations(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("agent: allocations: %w", err)
	}
	used := map[string]v1alpha1.UsedAddress{}
	for _, al := range allocs {
		for _, ip := range al.IPs {
			if ip.Pool != pool {
				continue
			}
			p, err := netip.ParsePrefix(ip.Address)
			if err != nil {
				continue
			}
			used[p.Addr().String()] = v1alpha1.UsedAddress{Owner: eninode.Owner(al.Pod.Namespace, al.Pod.Name, al.Owner.String())}
		}
	}
	if len(used) == 0 {
		used = nil
	}
	var pending int32
	for _, u := range m.Usage() {
		if u.Name == pool {
			pending += int32(u.Pending)
		}
	}
	return used, pending, nil
}

// createENINode creates the node's AllotNode with spec.eni, owned by the Node when it exists.
func (a *Agent) createENINode(ctx context.Context) error {
	node := &v1alpha1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName}}
	if _, _, err := eninode.MergeSpec(node, &a.opts.ENI.Spec); err != nil {
		return fmt.Errorf("agent: spec.eni: %w", err)
	}
	if err := a.createOwned(ctx, node); err != nil {
		return err
	}
	a.log.Info("AllotNode created (ENI mode)", "node", a.opts.NodeName, "instance", node.Spec.ENI.InstanceID)
	return nil
}

func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func families4and6(addrs map[netip.Addr]string) []policy.Family {
	var v4, v6 bool
	for a := range addrs {
		if a.Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	var out []policy.Family
	if v4 {
		out = append(out, policy.IPv4)
	}
	if v6 {
		out = append(out, policy.IPv6)
	}
	return out
}

func sortedAddrKeys[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func equalUsed(a, b map[string]v1alpha1.UsedAddress) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func cloneReleaseIPs(m map[string]v1alpha1.ReleaseState) map[string]v1alpha1.ReleaseState {
	out := make(map[string]v1alpha1.ReleaseState, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ENIHostState is what the node's host routing must reflect (core/enihost): the interfaces
// of status.eni with their IPv6 prefixes, and each address of the ENI pool a pod holds with
// the device index of the interface that carries it (from spec.ipam.pool, or for an IPv6
// address the interface whose /80 holds it). An address whose interface the node object
// does not name (it left the pool, or its prefix the interface, while a pod holds it) gets
// no rule: which ENI would carry its traffic is unknown.
func (a *Agent) ENIHostState(ctx context.Context) ([]enihost.ENI, []enihost.Pod, error) {
	if a.opts.ENI == nil {
		return nil, nil, errors.New("agent: not in ENI mode")
	}
	m := a.m.Load()
	if m == nil {
		return nil, nil, errors.New("agent: not running yet")
	}
	node := &v1alpha1.AllotNode{}
	if err := a.cachedGet(ctx, types.NamespacedName{Name: a.opts.NodeName}, node); err != nil {
		return nil, nil, fmt.Errorf("agent: read AllotNode %s: %w", a.opts.NodeName, err)
	}
	enis, index := eniHostInterfaces(node)
	pool, _ := eninode.Pool(node)
	used, _, err := a.eniUsage(ctx, m, a.opts.ENI.pool())
	if err != nil {
		return nil, nil, err
	}
	var pods []enihost.Pod
	for k := range used {
		ad, err := netip.ParseAddr(k)
		if err != nil {
			continue
		}
		idx, ok := index[pool[ad]]
		if !ok {
			idx, ok = prefixENI(enis, ad)
		}
		if !ok {
			continue
		}
		pods = append(pods, enihost.Pod{Addr: ad, ENIIndex: idx})
	}
	slices.SortFunc(pods, func(x, y enihost.Pod) int { return x.Addr.Compare(y.Addr) })
	return enis, pods, nil
}

// eniHostInterfaces are the interfaces of status.eni as core/enihost takes them, and their
// device index by ID.
func eniHostInterfaces(node *v1alpha1.AllotNode) ([]enihost.ENI, map[string]int) {
	var enis []enihost.ENI
	index := map[string]int{}
	if node.Status.ENI == nil {
		return nil, index
	}
	for _, ifc := range node.Status.ENI.Interfaces {
		sub, _ := netip.ParsePrefix(ifc.SubnetCIDR) // invalid: enihost reports the ENI
		enis = append(enis, enihost.ENI{Index: int(ifc.Index), MAC: ifc.MAC, Subnet: sub.Masked(), IPv6Prefixes: ifcIPv6Prefixes(ifc)})
		index[ifc.ID] = int(ifc.Index)
	}
	return enis, index
}

// prefixENI is the device index of the interface whose IPv6 prefix holds ad.
func prefixENI(enis []enihost.ENI, ad netip.Addr) (int, bool) {
	for _, e := range enis {
		for _, p := range e.IPv6Prefixes {
			if p.Contains(ad) {
				return e.Index, true
			}
		}
	}
	return 0, false
}

// ENIPool returns the addresses of spec.ipam.pool, sorted (tests, allotctl).
func ENIPool(n *v1alpha1.AllotNode) []netip.Addr {
	m, _ := eninode.Pool(n)
	return sortedAddrKeys(m)
}
