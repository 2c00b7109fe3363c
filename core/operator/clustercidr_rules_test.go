package operator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-ipam/allot/core/blockalloc"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

func ccc(name string, age int, v4 string, m4 int32, v6 string, m6 int32, reserved4 ...string) allotv1.ClusterCIDRConfig {
	c := allotv1.ClusterCIDRConfig{ObjectMeta: metav1.ObjectMeta{Name: name,
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, age, 0, time.UTC))}}
	if v4 != "" {
		c.Spec.IPv4 = &allotv1.CIDRBlockSpec{CIDR: v4, PerNodeMaskSize: m4, Reserved: reserved4}
	}
	if v6 != "" {
		c.Spec.IPv6 = &allotv1.CIDRBlockSpec{CIDR: v6, PerNodeMaskSize: m6}
	}
	return c
}

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// TestParseConfigSpec: the cluster pod CIDR rule (a family it lists must hold the config's
// CIDR; a family it does not list is flat) and the reserved ranges, each error naming the field.
func TestParseConfigSpec(t *testing.T) {
	island := prefixes("10.0.0.0/8")
	for _, tc := range []struct {
		name       string
		cfg        allotv1.ClusterCIDRConfig
		pods       []netip.Prefix
		reason     string // "" valid
		msg        string
		allowed4   string
		totalNodes uint64
	}{
		{name: "no cluster pod CIDR", cfg: ccc("a", 0, "192.168.0.0/16", 24, "", 0), allowed4: "[192.168.0.0/16]", totalNodes: 256},
		{name: "inside", cfg: ccc("a", 0, "10.244.0.0/16", 24, "", 0), pods: island, allowed4: "[10.244.0.0/16]", totalNodes: 256},
		{name: "equal", cfg: ccc("a", 0, "10.0.0.0/8", 16, "", 0), pods: island, allowed4: "[10.0.0.0/8]", totalNodes: 256},
		{name: "outside", cfg: ccc("a", 0, "192.168.0.0/16", 24, "", 0), pods: island, reason: allotv1.ReasonOutsideClusterPodCIDR,
			msg: "spec.ipv4.cidr: 192.168.0.0/16 is outside the cluster pod CIDR (the operator's cluster.podCIDRs: 10.0.0.0/8)"},
		{name: "straddles", cfg: ccc("a", 0, "10.0.0.0/7", 16, "", 0), pods: island, reason: allotv1.ReasonOutsideClusterPodCIDR,
			msg: "spec.ipv4.cidr: 10.0.0.0/7 is outside"},
		{name: "second cluster CIDR", cfg: ccc("a", 0, "172.16.0.0/16", 24, "", 0), pods: prefixes("10.0.0.0/8", "172.16.0.0/12"),
			allowed4: "[172.16.0.0/16]", totalNodes: 256},
		{name: "IPv4 island, IPv6 flat", cfg: ccc("a", 0, "10.1.0.0/16", 24, "fd00::/112", 120), pods: island,
			allowed4: "[10.1.0.0/16]", totalNodes: 256},
		{name: "IPv6 outside", cfg: ccc("a", 0, "10.1.0.0/16", 24, "fd01::/112", 120), pods: prefixes("10.0.0.0/8", "fd00::/64"),
			reason: allotv1.ReasonOutsideClusterPodCIDR, msg: "spec.ipv6.cidr: fd01::/112 is outside the cluster pod CIDR (the operator's cluster.podCIDRs: fd00::/64)"},
		{name: "reserved", cfg: ccc("a", 0, "10.0.0.0/22", 24, "", 0, "10.0.0.5", "10.0.2.0/24"), allowed4: "[10.0.1.0/24 10.0.3.0/24]", totalNodes: 2},
		{name: "reserved range", cfg: ccc("a", 0, "10.0.0.0/22", 24, "", 0, "10.0.0.200-10.0.1.3"), allowed4: "[10.0.2.0/23]", totalNodes: 2},
		{name: "reserved outside", cfg: ccc("a", 0, "10.0.0.0/22", 24, "", 0, "10.0.0.1", "10.0.3.250-10.0.4.2"), reason: allotv1.ReasonInvalid,
			msg: `spec.ipv4.reserved[1]: "10.0.3.250-10.0.4.2" is not inside spec.ipv4.cidr 10.0.0.0/22`},
		{name: "reserved unparsable", cfg: ccc("a", 0, "10.0.0.0/22", 24, "", 0, "10.0.0.9-10.0.0.3"), reason: allotv1.ReasonInvalid,
			msg: "spec.ipv4.reserved[0]: "},
		{name: "reserved wrong family", cfg: ccc("a", 0, "10.0.0.0/22", 24, "", 0, "fd00::/120"), reason: allotv1.ReasonInvalid,
			msg: `spec.ipv4.reserved[0]: "fd00::/120" is not an IPv4 CIDR`},
		{name: "reserved host bits", cfg: ccc("a", 0, "10.0.0.0/22", 24, "", 0, "10.0.1.7/24"), reason: allotv1.ReasonInvalid,
			msg: `spec.ipv4.reserved[0]: "10.0.1.7/24" has host bits set (did you mean 10.0.1.0/24?)`},
		{name: "reserved everything", cfg: ccc("a", 0, "10.0.0.0/23", 24, "", 0, "10.0.0.1", "10.0.1.1"), reason: allotv1.ReasonInvalid,
			msg: "spec.ipv4.reserved: leaves no /24 block of 10.0.0.0/23 free for nodes"},
		{name: "invalid mask", cfg: ccc("a", 0, "10.0.0.0/16", 12, "", 0), reason: allotv1.ReasonInvalid, msg: "spec.ipv4.perNodeMaskSize: 12"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, v := parseConfigSpec(&tc.cfg, tc.pods)
			if v.reason != tc.reason || !strings.Contains(v.message, tc.msg) {
				t.Fatalf("verdict %+v; want %s %q", v, tc.reason, tc.msg)
			}
			if tc.reason != "" {
				if p != nil {
					t.Fatalf("a refused config was parsed: %+v", p)
				}
				return
			}
			if got := fmt.Sprint(p.fams[0].allowed); got != tc.allowed4 {
				t.Errorf("allowed %s; want %s", got, tc.allowed4)
			}
			if got := p.totalBlocks(); got != tc.totalNodes {
				t.Errorf("totalBlocks %d; want %d", got, tc.totalNodes)
			}
		})
	}
}

// TestCarveAroundReserved: blocks come lowest first and never overlap a reserved range; the
// free count follows; dual stack takes one block of each family or none.
func TestCarveAroundReserved(t *testing.T) {
	c := ccc("a", 0, "10.0.0.0/22", 24, "fd00::/118", 120, "10.0.0.5", "10.0.2.0/24")
	p, v := parseConfigSpec(&c, nil)
	if !v.ok() {
		t.Fatal(v)
	}
	var set blockalloc.Set
	if n := p.freeBlocks(&set); n != 2 {
		t.Fatalf("free %d; want 2", n)
	}
	var got []string
	for {
		bs, ok := p.carve(&set)
		if !ok {
			break
		}
		got = append(got, fmt.Sprint(bs))
	}
	if want := []string{"[10.0.1.0/24 fd00::/120]", "[10.0.3.0/24 fd00::100/120]"}; !slices.Equal(got, want) {
		t.Fatalf("carved %v; want %v", got, want)
	}
	if n := p.freeBlocks(&set); n != 0 {
		t.Errorf("free %d after carving all", n)
	}
	// Nothing half taken: the IPv6 family still has free blocks, none was kept.
	if set.Len() != 4 {
		t.Errorf("set holds %v", set.Prefixes())
	}
}

// TestConfigVerdictsStack: all configs dual stack or all single stack of one family; the
// oldest valid config sets the rule (the same verdict on every replica), an invalid one does
// not; the webhook judges a new config against the existing ones the same way.
func TestConfigVerdictsStack(t *testing.T) {
	dual := func(name string, age int) allotv1.ClusterCIDRConfig {
		return ccc(name, age, fmt.Sprintf("10.%d.0.0/16", age), 24, fmt.Sprintf("fd00:%d::/112", age), 120)
	}
	v4 := func(name string, age int) allotv1.ClusterCIDRConfig {
		return ccc(name, age, fmt.Sprintf("10.%d.0.0/16", age), 24, "", 0)
	}
	v6 := func(name string, age int) allotv1.ClusterCIDRConfig {
		return ccc(name, age, "", 0, fmt.Sprintf("fd00:%d::/112", age), 120)
	}
	bad := ccc("broken", 0, "10.0.0.0/16", 8, "", 0)
	for _, tc := range []struct {
		name string
		cfgs []allotv1.ClusterCIDRConfig
		want map[string]string // config -> substring of its StackMismatch message
	}{
		{"all dual", []allotv1.ClusterCIDRConfig{dual("a", 1), dual("b", 2)}, nil},
		{"all IPv4", []allotv1.ClusterCIDRConfig{v4("a", 1), v4("b", 2)}, nil},
		{"single after dual", []allotv1.ClusterCIDRConfig{v4("b", 2), dual("a", 1)},
			map[string]string{"b": `spec.ipv6: must be set: this config is single stack IPv4 but ClusterCIDRConfig "a" (the oldest) is dual stack`}},
		{"dual after single", []allotv1.ClusterCIDRConfig{v4("a", 1), dual("b", 2), v4("c", 3)},
			map[string]string{"b": "spec.ipv6: must not be set: this config is dual stack (IPv4 and IPv6)"}},
		{"IPv6 after IPv4", []allotv1.ClusterCIDRConfig{v4("a", 1), v6("b", 2)},
			map[string]string{"b": "spec.ipv4: must be set: this config is single stack IPv6 but"}},
		{"same age: by name", []allotv1.ClusterCIDRConfig{v4("z", 1), dual("m", 1)},
			map[string]string{"z": `ClusterCIDRConfig "m" (the oldest)`}},
		{"invalid oldest does not count", []allotv1.ClusterCIDRConfig{bad, v4("a", 1), v4("b", 2)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parsed, badv := configVerdicts(tc.cfgs, nil)
			for _, c := range tc.cfgs {
				want, refused := tc.want[c.Name]
				v := badv[c.Name]
				switch {
				case c.Name == "broken":
					if v.reason != allotv1.ReasonInvalid {
						t.Errorf("broken: %+v", v)
					}
				case refused && (v.reason != allotv1.ReasonStackMismatch || !strings.Contains(v.message, want) || parsed[c.Name] != nil):
					t.Errorf("%s: %+v; want StackMismatch %q", c.Name, v, want)
				case !refused && (parsed[c.Name] == nil || !v.ok()):
					t.Errorf("%s refused: %+v", c.Name, v)
				}
			}
			// The webhook: each config created last, after the ones older than it.
			for _, c := range tc.cfgs {
				var before []allotv1.ClusterCIDRConfig
				for _, o := range tc.cfgs {
					if older(&o, &c) < 0 {
						before = append(before, o)
					}
				}
				got := admitConfig(&c, before, nil)
				want, refused := tc.want[c.Name]
				if c.Name == "broken" {
					refused, want = true, "spec.ipv4.perNodeMaskSize"
				}
				if refused != (len(got) > 0) || (refused && !strings.Contains(got[0], want)) {
					t.Errorf("webhook on %s: %q; want refused=%v %q", c.Name, got, refused, want)
				}
			}
		})
	}
}

// TestForeignPodCIDRMessage: a node's pod CIDRs the operator did not write and no config holds
// are reported with the flag to turn off; its own (annotation) and a config's are not.
func TestForeignPodCIDRMessage(t *testing.T) {
	cfgs := []allotv1.ClusterCIDRConfig{ccc("a", 0, "10.244.0.0/16", 24, "", 0)}
	node := func(annot string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		if annot != "" {
			n.Annotations = map[string]string{allotv1.AnnotationClusterCIDRConfig: annot}
		}
		return n
	}
	if m := foreignPodCIDRMessage(node(""), prefixes("10.96.3.0/24"), cfgs); !strings.Contains(m, "--allocate-node-cidrs=false") ||
		!strings.Contains(m, `pod CIDRs 10.96.3.0/24 of node "n1" were not assigned by allot and lie in no ClusterCIDRConfig`) {
		t.Errorf("foreign: %q", m)
	}
	if m := foreignPodCIDRMessage(node("a"), prefixes("10.96.3.0/24"), cfgs); m != "" {
		t.Errorf("annotated: %q", m)
	}
	if m := foreignPodCIDRMessage(node(""), prefixes("10.244.3.0/24"), cfgs); m != "" {
		t.Errorf("inside a config: %q", m)
	}
	if m := foreignPodCIDRMessage(node(""), nil, cfgs); m != "" {
		t.Errorf("no pod CIDR: %q", m)
	}
}

// TestPlanNodeConditions: NetworkUnavailable True while no config serves the node, False once
// it has pod CIDRs only over the operator's own True; AllotPodCIDRAssigned as before.
func TestPlanNodeConditions(t *testing.T) {
	t0, t1 := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0))
	netU := corev1.NodeConditionType(allotv1.NodeConditionNetworkUnavailable)
	assigned := corev1.NodeConditionType(allotv1.NodeConditionPodCIDRAssigned)
	cond := func(typ corev1.NodeConditionType, st corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: st, Reason: reason, Message: "m", LastTransitionTime: t0, LastHeartbeatTime: t0}
	}
	waits := nodeVerdict{assigned: corev1.ConditionFalse, reason: allotv1.ReasonNoMatchingConfig, message: "m", always: true}
	served := nodeVerdict{served: true, assigned: corev1.ConditionTrue, reason: allotv1.ReasonPodCIDRAssigned, message: "got"}
	kubeletReady := cond(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady")
	for _, tc := range []struct {
		name    string
		in      []corev1.NodeCondition
		v       nodeVerdict
		changed bool
		want    map[corev1.NodeConditionType]string // type -> "Status/Reason", "" absent
	}{
		{"no match", []corev1.NodeCondition{kubeletReady}, waits, true,
			map[corev1.NodeConditionType]string{netU: "True/NoMatchingClusterCIDRConfig", assigned: "False/NoMatchingClusterCIDRConfig", corev1.NodeReady: "False/KubeletNotReady"}},
		{"no match again", []corev1.NodeCondition{cond(netU, corev1.ConditionTrue, allotv1.ReasonNoMatchingConfig), cond(assigned, corev1.ConditionFalse, allotv1.ReasonNoMatchingConfig)},
			waits, false, nil},
		{"served after waiting", []corev1.NodeCondition{cond(netU, corev1.ConditionTrue, allotv1.ReasonAllConfigsFull), cond(assigned, corev1.ConditionFalse, allotv1.ReasonAllConfigsFull)},
			served, true, map[corev1.NodeConditionType]string{netU: "False/PodCIDRAssigned", assigned: "True/PodCIDRAssigned"}},
		{"served at once", []corev1.NodeCondition{kubeletReady}, served, false,
			map[corev1.NodeConditionType]string{netU: "", assigned: ""}},
		{"another component's NetworkUnavailable", []corev1.NodeCondition{cond(netU, corev1.ConditionTrue, "NoRouteCreated")}, served, false,
			map[corev1.NodeConditionType]string{netU: "True/NoRouteCreated", assigned: ""}},
		{"another component's False", []corev1.NodeCondition{cond(netU, corev1.ConditionFalse, "RouteCreated")}, served, false,
			map[corev1.NodeConditionType]string{netU: "False/RouteCreated"}},
		{"foreign", nil, nodeVerdict{served: true, assigned: corev1.ConditionFalse, reason: allotv1.ReasonForeignPodCIDR, message: "f", always: true}, true,
			map[corev1.NodeConditionType]string{netU: "", assigned: "False/PodCIDRFromAnotherAllocator"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			out, changed := planNodeConditions(in, tc.v, t1)
			if changed != tc.changed {
				t.Errorf("changed %v; want %v", changed, tc.changed)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("input modified")
			}
			for typ, want := range tc.want {
				i := slices.IndexFunc(out, func(c corev1.NodeCondition) bool { return c.Type == typ })
				got := ""
				if i >= 0 {
					got = fmt.Sprintf("%s/%s", out[i].Status, out[i].Reason)
				}
				if got != want {
					t.Errorf("%s: %q; want %q", typ, got, want)
				}
			}
		})
	}
	// A message change without a status change keeps the transition time.
	in := []corev1.NodeCondition{cond(netU, corev1.ConditionTrue, allotv1.ReasonNoMatchingConfig)}
	out, _ := planNodeConditions(in, nodeVerdict{assigned: corev1.ConditionFalse, reason: allotv1.ReasonAllConfigsFull, message: "full", always: true}, t1)
	if c := out[0]; c.Reason != allotv1.ReasonAllConfigsFull || !c.LastTransitionTime.Equal(&t0) || !c.LastHeartbeatTime.Equal(&t1) {
		t.Errorf("condition %+v", c)
	}
}
