package operator

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-ipam/allot/core/addrset"
	"github.com/allot-ipam/allot/core/blockalloc"
	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

// The rules a ClusterCIDRConfig must follow beyond its CRD's CEL rules, as pure functions of
// the objects, so that the webhook (at apply time) and the config controller (Ready condition,
// for a config that got in anyway: webhook off or down, two creates racing) reach the same
// verdict, and the node controller serves nodes only from configs that pass.

// cccFamily is one family of a config as the operator carves it.
type cccFamily struct {
	cidr netip.Prefix
	mask int
	// allowed are the aligned prefixes of cidr no reserved address touches, in address order,
	// each holding at least one block of mask: a block lies outside every reserved range iff
	// it lies inside one of them (addrset.Set.Prefixes).
	allowed []netip.Prefix
}

// cccParsed is a config the operator can serve nodes from.
type cccParsed struct {
	view policy.CIDRConfigView // FreeBlocks left zero
	fams []cccFamily           // IPv4 first
}

// verdict is why a config serves no node; the zero value means it serves.
type verdict struct {
	reason  string // a Ready=False reason
	message string // names the field
}

func (v verdict) ok() bool { return v.reason == "" }

// parseConfigSpec checks one config on its own and against the cluster pod CIDR:
// the node-labels policy's rules (ValidateConfig), reserved ranges inside the CIDR and leaving
// at least one block, and every CIDR of a family the cluster pod CIDR has inside one of its
// CIDRs. Messages name the field.
func parseConfigSpec(c *allotv1.ClusterCIDRConfig, clusterPodCIDRs []netip.Prefix) (*cccParsed, verdict) {
	v, err := allotk8s.CIDRConfigView(c)
	if err != nil {
		return nil, verdict{allotv1.ReasonInvalid, strings.TrimPrefix(err.Error(), fmt.Sprintf("ClusterCIDRConfig %q: ", c.Name))}
	}
	if err := v.Validate(); err != nil {
		return nil, verdict{allotv1.ReasonInvalid, "spec." + err.Error()}
	}
	out := &cccParsed{view: v}
	for i, f := range []*allotv1.CIDRBlockSpec{c.Spec.IPv4, c.Spec.IPv6} {
		s := [2]*policy.CIDRSpec{v.IPv4, v.IPv6}[i]
		if f == nil {
			continue
		}
		field := "spec." + [2]string{"ipv4", "ipv6"}[i]
		fam, err := parseFamily(field, s, f.Reserved)
		if err != nil {
			return nil, verdict{allotv1.ReasonInvalid, err.Error()}
		}
		out.fams = append(out.fams, fam)
		if msg := outsideClusterPodCIDR(field, s.CIDR, clusterPodCIDRs); msg != "" {
			return nil, verdict{allotv1.ReasonOutsideClusterPodCIDR, msg}
		}
	}
	return out, verdict{}
}

// parseFamily reads a family's reserved entries ("a", "a-b" or a CIDR), each inside the CIDR,
// and the prefixes left to carve blocks from.
func parseFamily(field string, s *policy.CIDRSpec, reserved []string) (cccFamily, error) {
	fam := policy.IPv4
	if !s.CIDR.Addr().Is4() {
		fam = policy.IPv6
	}
	whole := addrset.FromPrefix(s.CIDR)
	rs := make([]addrset.Range, 0, len(reserved))
	for i, item := range reserved {
		r, err := parseReserved(item, fam)
		if err != nil {
			return cccFamily{}, fmt.Errorf("%s.reserved[%d]: %w", field, i, err)
		}
		if !s.CIDR.Contains(r.From) || !s.CIDR.Contains(r.To) {
			return cccFamily{}, fmt.Errorf("%s.reserved[%d]: %q is not inside %s.cidr %s", field, i, item, field, s.CIDR)
		}
		rs = append(rs, r)
	}
	out := cccFamily{cidr: s.CIDR, mask: s.PerNodeMaskSize}
	for _, p := range whole.Subtract(addrset.FromRanges(fam, rs)).Prefixes() {
		if p.Bits() <= s.PerNodeMaskSize {
			out.allowed = append(out.allowed, p)
		}
	}
	if len(out.allowed) == 0 {
		return cccFamily{}, fmt.Errorf("%s.reserved: leaves no /%d block of %s free for nodes", field, s.PerNodeMaskSize, s.CIDR)
	}
	return out, nil
}

// parseReserved reads "a", "a-b" (the glossary's range) or a CIDR of family fam.
func parseReserved(item string, fam policy.Family) (addrset.Range, error) {
	if !strings.Contains(item, "/") {
		return addrset.ParseRange(item, fam)
	}
	p, err := netip.ParsePrefix(item)
	if err != nil {
		return addrset.Range{}, fmt.Errorf("%q is not an address, a range a-b or a CIDR", item)
	}
	if p.Addr().Is4() != (fam == policy.IPv4) || p.Addr().Is4In6() {
		name := "IPv4"
		if fam == policy.IPv6 {
			name = "IPv6"
		}
		return addrset.Range{}, fmt.Errorf("%q is not an %s CIDR", item, name)
	}
	if p.Masked() != p {
		return addrset.Range{}, fmt.Errorf("%q has host bits set (did you mean %s?)", item, p.Masked())
	}
	r := addrset.FromPrefix(p).Ranges()
	return r[0], nil
}

// outsideClusterPodCIDR says why cidr breaks the cluster pod CIDR rule, or "": a family the
// cluster pod CIDR lists must hold the CIDR in one of its CIDRs; a family it does not list is
// unconstrained (Google Distributed Cloud's "flat" mode, e.g. IPv4 island with IPv6 flat).
func outsideClusterPodCIDR(field string, cidr netip.Prefix, clusterPodCIDRs []netip.Prefix) string {
	var same []string
	for _, p := range clusterPodCIDRs {
		if p.Addr().Is4() != cidr.Addr().Is4() {
			continue
		}
		if p.Bits() <= cidr.Bits() && p.Contains(cidr.Addr()) {
			return ""
		}
		same = append(same, p.String())
	}
	if len(same) == 0 {
		return ""
	}
	return fmt.Sprintf("%s.cidr: %s is outside the cluster pod CIDR (the operator's cluster.podCIDRs: %s); every ClusterCIDRConfig CIDR must lie inside it",
		field, cidr, strings.Join(same, ", "))
}

// stack is a config's families: "IPv4", "IPv6" or "dual stack".
func stack(v *policy.CIDRConfigView) string {
	switch {
	case v.IPv4 != nil && v.IPv6 != nil:
		return "dual stack (IPv4 and IPv6)"
	case v.IPv4 != nil:
		return "single stack IPv4"
	default:
		return "single stack IPv6"
	}
}

// older orders configs by age: creationTimestamp, then name (the same verdict on every replica).
func older(a, b *allotv1.ClusterCIDRConfig) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// stackProblem says why c's families break the rule that all configs are dual stack or all
// single stack of one family (Google Distributed Cloud: "Ensure that all ClusterCIDRConfig
// have DualStack CIDRs, if multiple ClusterCIDRConfig are configured"), judged against ref, the
// oldest config that is otherwise valid: a node's pod CIDRs must not depend on which config
// it matched. "" when c agrees or ref is nil.
func stackProblem(c, ref *cccParsed, refName string) string {
	if ref == nil {
		return ""
	}
	got, want := stack(&c.view), stack(&ref.view)
	if got == want {
		return ""
	}
	field := "spec.ipv6"
	if (c.view.IPv4 == nil) != (ref.view.IPv4 == nil) {
		field = "spec.ipv4"
	}
	verb := "must be set"
	if (field == "spec.ipv4" && c.view.IPv4 != nil) || (field == "spec.ipv6" && c.view.IPv6 != nil) {
		verb = "must not be set"
	}
	return fmt.Sprintf("%s: %s: this config is %s but ClusterCIDRConfig %q (the oldest) is %s; all ClusterCIDRConfigs must be dual stack, or all single stack of one family",
		field, verb, got, refName, want)
}

// configVerdicts judges every config: its own rules (parseConfigSpec), then the stack rule
// against the oldest config that passed them. Configs being deleted count (nodes still hold
// their blocks). parsed holds the configs that may serve nodes.
func configVerdicts(cfgs []allotv1.ClusterCIDRConfig, clusterPodCIDRs []netip.Prefix) (parsed map[string]*cccParsed, bad map[string]verdict) {
	parsed, bad = map[string]*cccParsed{}, map[string]verdict{}
	order := make([]*allotv1.ClusterCIDRConfig, 0, len(cfgs))
	for i := range cfgs {
		order = append(order, &cfgs[i])
	}
	slices.SortFunc(order, older)
	var ref *cccParsed
	var refName string
	for _, c := range order {
		p, v := parseConfigSpec(c, clusterPodCIDRs)
		if !v.ok() {
			bad[c.Name] = v
			continue
		}
		if msg := stackProblem(p, ref, refName); msg != "" {
			bad[c.Name] = verdict{allotv1.ReasonStackMismatch, msg}
			continue
		}
		if ref == nil {
			ref, refName = p, c.Name
		}
		parsed[c.Name] = p
	}
	return parsed, bad
}

// admitConfig is the webhook's verdict on a new config: its own rules, and the stack rule
// against the oldest valid config among the existing ones (a new config is the newest).
func admitConfig(c *allotv1.ClusterCIDRConfig, existing []allotv1.ClusterCIDRConfig, clusterPodCIDRs []netip.Prefix) []string {
	p, v := parseConfigSpec(c, clusterPodCIDRs)
	if !v.ok() {
		return []string{v.message}
	}
	others := slices.DeleteFunc(slices.Clone(existing), func(o allotv1.ClusterCIDRConfig) bool { return o.Name == c.Name })
	parsed, _ := configVerdicts(others, clusterPodCIDRs)
	var ref *allotv1.ClusterCIDRConfig
	for i := range others {
		if o := &others[i]; parsed[o.Name] != nil && (ref == nil || older(o, ref) < 0) {
			ref = o
		}
	}
	if ref != nil {
		if msg := stackProblem(p, parsed[ref.Name], ref.Name); msg != "" {
			return []string{msg}
		}
	}
	return nil
}

// totalBlocks is the number of nodes a config can ever serve: per family the blocks outside
// its reserved ranges, the smaller family's count (saturating).
func (p *cccParsed) totalBlocks() uint64 {
	total := ^uint64(0)
	for _, f := range p.fams {
		var n uint64
		for _, a := range f.allowed {
			n = satAddU(n, blockalloc.TotalBlocks(a, f.mask))
		}
		total = min(total, n)
	}
	return total
}

// freeBlocks is the number of nodes a config can still serve given the taken blocks.
func (p *cccParsed) freeBlocks(set *blockalloc.Set) uint64 {
	free := ^uint64(0)
	for _, f := range p.fams {
		var n uint64
		for _, a := range f.allowed {
			n = satAddU(n, set.FreeBlocks(a, f.mask))
		}
		free = min(free, n)
	}
	if len(p.fams) == 0 {
		return 0
	}
	return free
}

// carve takes one block per family (IPv4 first), the lowest free one outside the reserved
// ranges, all or none.
func (p *cccParsed) carve(set *blockalloc.Set) ([]netip.Prefix, bool) {
	var out []netip.Prefix
	for _, f := range p.fams {
		var b netip.Prefix
		for _, a := range f.allowed {
			if got, err := set.Allocate(a, f.mask); err == nil {
				b = got
				break
			}
		}
		if !b.IsValid() {
			for _, q := range out {
				set.Release(q)
			}
			return nil, false
		}
		out = append(out, b)
	}
	return out, len(out) > 0
}

func satAddU(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

// foreignPodCIDRMessage says, for a node with pod CIDRs the operator did not write (no
// annotation naming a config) that lie in no config, what set them and what to do; "" for a
// node the operator served or whose CIDRs a config holds.
func foreignPodCIDRMessage(n *corev1.Node, cidrs []netip.Prefix, cfgs []allotv1.ClusterCIDRConfig) string {
	if len(cidrs) == 0 || configOf(n, cidrs, cfgs) != "" {
		return ""
	}
	s := make([]string, len(cidrs))
	for i, c := range cidrs {
		s[i] = c.String()
	}
	return fmt.Sprintf("pod CIDRs %s of node %q were not assigned by allot and lie in no ClusterCIDRConfig: another allocator set them, "+
		"most likely kube-controller-manager running with --allocate-node-cidrs=true; run it with --allocate-node-cidrs=false so that only allot "+
		"assigns pod CIDRs (allot keeps these reserved and never hands them out; delete the Node, or clear its spec.podCIDRs, to have it served from a ClusterCIDRConfig)",
		strings.Join(s, ", "), n.Name)
}

// nodeVerdict is what the operator concluded about one Node.
type nodeVerdict struct {
	// served: the node has pod CIDRs (from a config, or from another allocator).
	served bool
	// AllotPodCIDRAssigned: its status, reason and message; always writes it even when the
	// node has none yet (a True condition is only written to replace an earlier one: a node
	// served at once needs no condition, its pod CIDRs say it).
	assigned corev1.ConditionStatus
	reason   string
	message  string
	always   bool
}

// ownNetworkReasons are the NetworkUnavailable reasons the operator writes when True; it sets
// False only over one of them, never over another component's (the route controller's
// NoRouteCreated, a CNI's own).
var ownNetworkReasons = []string{allotv1.ReasonNoMatchingConfig, allotv1.ReasonAllConfigsFull}

// planNodeConditions applies a verdict to a Node's conditions: AllotPodCIDRAssigned as the
// verdict says, and Kubernetes' NetworkUnavailable True while the node has no pod CIDR (the
// node lifecycle controller then taints it node.kubernetes.io/network-unavailable, so no pod
// is scheduled there, as the route controller and CNI providers use the condition) and False
// once it has them, if the True was the operator's. It returns the new list and whether it
// changed; LastTransitionTime moves only when a status changes.
func planNodeConditions(conds []corev1.NodeCondition, v nodeVerdict, now metav1.Time) ([]corev1.NodeCondition, bool) {
	out := slices.Clone(conds)
	changed := false
	set := func(typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) {
		c := corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
		i := slices.IndexFunc(out, func(c corev1.NodeCondition) bool { return c.Type == typ })
		if i < 0 {
			out = append(out, c)
			changed = true
			return
		}
		old := out[i]
		if old.Status == status && old.Reason == reason && old.Message == msg {
			return
		}
		if old.Status == status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		out[i] = c
		changed = true
	}
	has := slices.ContainsFunc(out, func(c corev1.NodeCondition) bool { return c.Type == allotv1.NodeConditionPodCIDRAssigned })
	if has || v.always {
		set(allotv1.NodeConditionPodCIDRAssigned, v.assigned, v.reason, v.message)
	}
	netType := corev1.NodeConditionType(allotv1.NodeConditionNetworkUnavailable)
	if !v.served {
		set(netType, corev1.ConditionTrue, v.reason, v.message)
	} else if i := slices.IndexFunc(out, func(c corev1.NodeCondition) bool { return c.Type == netType }); i >= 0 &&
		out[i].Status == corev1.ConditionTrue && slices.Contains(ownNetworkReasons, out[i].Reason) {
		set(netType, corev1.ConditionFalse, allotv1.ReasonPodCIDRAssigned, "the node has its pod CIDRs: "+v.message)
	}
	return out, changed
}
