package operator_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
)

func newNode(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func newCCC(name string, sel map[string]string, v4 string, m4 int32, v6 string, m6 int32) *allotv1.ClusterCIDRConfig {
	c := &allotv1.ClusterCIDRConfig{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if sel != nil {
		c.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: sel}
	}
	if v4 != "" {
		c.Spec.IPv4 = &allotv1.CIDRBlockSpec{CIDR: v4, PerNodeMaskSize: m4}
	}
	if v6 != "" {
		c.Spec.IPv6 = &allotv1.CIDRBlockSpec{CIDR: v6, PerNodeMaskSize: m6}
	}
	return c
}

func (h *harness) getNode(name string) *corev1.Node {
	h.t.Helper()
	var n corev1.Node
	if err := h.c.Get(h.ctx, client.ObjectKey{Name: name}, &n); err != nil {
		h.t.Fatal(err)
	}
	return &n
}

func (h *harness) waitPodCIDRs(name string, want ...string) {
	h.t.Helper()
	eventually(h.t, waitFor, "pod CIDRs of "+name, func() error {
		n := h.getNode(name)
		if !slices.Equal(n.Spec.PodCIDRs, want) || n.Spec.PodCIDR != want[0] {
			return fmt.Errorf("podCIDR %q podCIDRs %v; want %v", n.Spec.PodCIDR, n.Spec.PodCIDRs, want)
		}
		return nil
	})
}

func nodeCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == allotv1.NodeConditionPodCIDRAssigned {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func (h *harness) waitNodeCondition(name string, status corev1.ConditionStatus, reason, substr string) {
	h.t.Helper()
	eventually(h.t, waitFor, "condition of node "+name, func() error {
		c := nodeCondition(h.getNode(name))
		if c == nil || c.Status != status || c.Reason != reason || !strings.Contains(c.Message, substr) {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
}

// TestClusterCIDRConfig drives the ClusterCIDRConfig allocator through real objects: a node no
// config matches waits (condition, Event) and is served when a matching config appears; the
// five tie-break rules; the next best config when the best is full; a deleted node's block is
// reused by a waiting node. Every config here is IPv4 only (all configs must be of one stack):
// dual stack is in TestClusterCIDRConfigRules.
func TestClusterCIDRConfig(t *testing.T) {
	h := newHarness(t)
	r := h.run("op-a", func(o *operator.Options) { o.ClusterCIDRConfig = true; o.DisableMultiPool = true })

	// No match, then a matching config.
	h.create(newNode("lonely", map[string]string{"rack": "r9"}))
	h.waitNodeCondition("lonely", corev1.ConditionFalse, allotv1.ReasonNoMatchingConfig, "no ClusterCIDRConfig matches node labels")
	h.waitEvent(waitFor, "lonely", allotv1.ReasonNoMatchingConfig, `node "lonely"`)
	if v := metricValue(t, r, "allot_operator_refusals_total", "reason", "no_matching_config"); v < 1 {
		t.Errorf("refusal metric = %v", v)
	}
	h.create(newCCC("rack9", map[string]string{"rack": "r9"}, "10.9.0.0/16", 24, "", 0))
	h.waitPodCIDRs("lonely", "10.9.0.0/24")
	h.waitNodeCondition("lonely", corev1.ConditionTrue, allotv1.ReasonPodCIDRAssigned, `ClusterCIDRConfig "rack9"`)
	if a := h.getNode("lonely").Annotations[allotv1.AnnotationClusterCIDRConfig]; a != "rack9" {
		t.Errorf("annotation = %q", a)
	}

	h.create(
		// Rule 1: most matching labels; then next best when full.
		newCCC("medium-r1", map[string]string{"type": "medium", "rack": "r1"}, "10.100.0.0/24", 24, "", 0),
		newCCC("medium", map[string]string{"type": "medium"}, "10.101.0.0/16", 24, "", 0),
		// Rule 2: fewest allocatable pod CIDRs.
		newCCC("many", map[string]string{"zone": "z1"}, "10.103.0.0/22", 24, "", 0),
		newCCC("few", map[string]string{"zone": "z1"}, "10.102.0.0/23", 24, "", 0),
		// Rule 3: fewest addresses per node (both hold 64 blocks).
		newCCC("big", map[string]string{"pool": "p"}, "10.105.0.0/18", 24, "", 0),
		newCCC("small", map[string]string{"pool": "p"}, "10.104.0.0/20", 26, "", 0),
		// Rule 4: lower label (kubernetes.io/hostname=... < node.kubernetes.io/instance-type=...).
		newCCC("by-type", map[string]string{"node.kubernetes.io/instance-type": "large"}, "10.107.0.0/24", 24, "", 0),
		newCCC("by-host", map[string]string{"kubernetes.io/hostname": "node-e"}, "10.106.0.0/24", 24, "", 0),
		// Rule 5: lower IPv4 CIDR.
		newCCC("hi", map[string]string{"tier": "x"}, "10.109.0.0/24", 24, "", 0),
		newCCC("lo", map[string]string{"tier": "x"}, "10.108.0.0/24", 24, "", 0),
		// One block only: reuse after node deletion.
		newCCC("one", map[string]string{"solo": "y"}, "10.120.0.0/24", 24, "", 0),
	)
	h.create(
		newNode("node-a", map[string]string{"type": "medium", "rack": "r1"}),
		newNode("node-c", map[string]string{"zone": "z1"}),
		newNode("node-d", map[string]string{"pool": "p"}),
		newNode("node-e", map[string]string{"kubernetes.io/hostname": "node-e", "node.kubernetes.io/instance-type": "large"}),
		newNode("node-f", map[string]string{"tier": "x"}),
		newNode("s1", map[string]string{"solo": "y"}),
	)
	h.waitPodCIDRs("node-a", "10.100.0.0/24")
	h.waitPodCIDRs("node-c", "10.102.0.0/24")
	h.waitPodCIDRs("node-d", "10.104.0.0/26")
	h.waitPodCIDRs("node-e", "10.106.0.0/24")
	h.waitPodCIDRs("node-f", "10.108.0.0/24")
	h.waitPodCIDRs("s1", "10.120.0.0/24")

	// Next best when the best is full.
	h.create(newNode("node-b", map[string]string{"type": "medium", "rack": "r1"}))
	h.waitPodCIDRs("node-b", "10.101.0.0/24")
	eventually(t, waitFor, "config status", func() error {
		var c allotv1.ClusterCIDRConfig
		if err := h.c.Get(h.ctx, client.ObjectKey{Name: "medium-r1"}, &c); err != nil {
			return err
		}
		if c.Status.AllocatedBlocks != 1 || c.Status.TotalBlocks != 1 || condition(c.Status.Conditions, allotv1.ConditionExhausted) == nil {
			return fmt.Errorf("status %+v", c.Status)
		}
		if !slices.Contains(c.Finalizers, allotv1.FinalizerConfigInUse) {
			return fmt.Errorf("finalizers %v", c.Finalizers)
		}
		return nil
	})

	// All full: the node waits; a deleted node's block goes to it.
	h.create(newNode("s2", map[string]string{"solo": "y"}))
	h.waitNodeCondition("s2", corev1.ConditionFalse, allotv1.ReasonAllConfigsFull, "every ClusterCIDRConfig matching the node is full")
	h.waitEvent(waitFor, "s2", allotv1.ReasonAllConfigsFull, `"one"`)
	if err := h.c.Delete(h.ctx, h.getNode("s1")); err != nil {
		t.Fatal(err)
	}
	h.waitPodCIDRs("s2", "10.120.0.0/24")
	h.waitNodeCondition("s2", corev1.ConditionTrue, allotv1.ReasonPodCIDRAssigned, "10.120.0.0/24")
	h.checkNoOverlap()
}

func (h *harness) waitNodeConditionOf(name string, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, substr string) {
	h.t.Helper()
	eventually(h.t, waitFor, fmt.Sprintf("condition %s of node %s", typ, name), func() error {
		n := h.getNode(name)
		for _, c := range n.Status.Conditions {
			if c.Type == typ {
				if c.Status != status || c.Reason != reason || !strings.Contains(c.Message, substr) {
					return fmt.Errorf("condition %+v", c)
				}
				return nil
			}
		}
		return fmt.Errorf("no condition %s in %+v", typ, n.Status.Conditions)
	})
}

func (h *harness) waitConfigReady(name string, status metav1.ConditionStatus, reason, substr string) *allotv1.ClusterCIDRConfig {
	h.t.Helper()
	var c allotv1.ClusterCIDRConfig
	eventually(h.t, waitFor, "Ready of ClusterCIDRConfig "+name, func() error {
		if err := h.c.Get(h.ctx, client.ObjectKey{Name: name}, &c); err != nil {
			return err
		}
		r := condition(c.Status.Conditions, allotv1.ConditionReady)
		if r == nil || r.Status != status || r.Reason != reason || !strings.Contains(r.Message, substr) {
			return fmt.Errorf("Ready %+v", r)
		}
		return nil
	})
	return &c
}

// TestClusterCIDRConfigRules drives the rules beyond the node-labels choice on the real API
// server, first as status conditions (configs that got in with no webhook), then at admission:
//   - the cluster pod CIDR (Options.ClusterPodCIDRs, IPv4 island and IPv6 flat here): a config
//     outside it is Ready=False (OutsideClusterPodCIDR) and serves no node; the webhook refuses it;
//   - one stack for all configs: an IPv4-only config after a dual-stack one is Ready=False
//     (StackMismatch) and serves no node; the webhook refuses it;
//   - NetworkUnavailable: True (reason NoMatchingClusterCIDRConfig) on a node no config serves,
//     False once a matching config gives it its CIDRs;
//   - reserved ranges: no node block overlaps them, totalBlocks leaves them out, the webhook
//     refuses one outside the CIDR;
//   - pod CIDRs another allocator wrote (kube-controller-manager's --allocate-node-cidrs): an
//     Event and a condition naming the flag, and the CIDRs are kept out of every hand-out.
func TestClusterCIDRConfigRules(t *testing.T) {
	h := newHarness(t)
	podCIDRs := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	r := h.run("op-a", func(o *operator.Options) {
		o.ClusterCIDRConfig, o.DisableMultiPool, o.SharedPools.Disable = true, true, true
		o.ClusterPodCIDRs = podCIDRs
	})
	r.waitLeader(t, waitFor)

	// Dual stack, IPv4 inside the cluster pod CIDR, its first two /24s reserved (one by an
	// address, one by a range).
	base := newCCC("base", map[string]string{"pool": "base"}, "10.1.0.0/16", 24, "fd00:1::/112", 120)
	base.Spec.IPv4.Reserved = []string{"10.1.0.1", "10.1.1.0-10.1.1.255"}
	base.Spec.IPv6.Reserved = []string{"fd00:1::/120"}
	h.create(base)
	h.waitConfigReady("base", metav1.ConditionTrue, allotv1.ReasonValid, "")
	eventually(t, waitFor, "totalBlocks of base", func() error {
		c := h.waitConfigReady("base", metav1.ConditionTrue, allotv1.ReasonValid, "")
		if c.Status.TotalBlocks != 254 {
			return fmt.Errorf("totalBlocks %d; want 254 (256 /24s but the two reserved)", c.Status.TotalBlocks)
		}
		return nil
	})
	h.create(newNode("b1", map[string]string{"pool": "base"}), newNode("b2", map[string]string{"pool": "base"}))
	h.waitPodCIDRs("b1", "10.1.2.0/24", "fd00:1::100/120")
	h.waitPodCIDRs("b2", "10.1.3.0/24", "fd00:1::200/120")

	// Outside the cluster pod CIDR; IPv4 only after a dual-stack config. Both serve no node.
	h.create(newCCC("outside", map[string]string{"pool": "out"}, "192.168.0.0/16", 24, "fd00:2::/112", 120),
		newCCC("single", map[string]string{"pool": "single"}, "10.3.0.0/16", 24, "", 0))
	h.waitConfigReady("outside", metav1.ConditionFalse, allotv1.ReasonOutsideClusterPodCIDR,
		"spec.ipv4.cidr: 192.168.0.0/16 is outside the cluster pod CIDR (the operator's cluster.podCIDRs: 10.0.0.0/8)")
	h.waitConfigReady("single", metav1.ConditionFalse, allotv1.ReasonStackMismatch,
		`spec.ipv6: must be set: this config is single stack IPv4 but ClusterCIDRConfig "base" (the oldest) is dual stack`)
	h.waitEvent(waitFor, "single", allotv1.ReasonStackMismatch, "all ClusterCIDRConfigs must be dual stack")
	h.create(newNode("o1", map[string]string{"pool": "out"}), newNode("s1", map[string]string{"pool": "single"}))
	netU := corev1.NodeConditionType(allotv1.NodeConditionNetworkUnavailable)
	h.waitNodeConditionOf("o1", netU, corev1.ConditionTrue, allotv1.ReasonNoMatchingConfig,
		`matching configs that serve no node: "outside" (OutsideClusterPodCIDR: spec.ipv4.cidr: 192.168.0.0/16 is outside`)
	h.waitNodeConditionOf("s1", netU, corev1.ConditionTrue, allotv1.ReasonNoMatchingConfig, `"single" (StackMismatch: spec.ipv6`)
	for _, n := range []string{"o1", "s1"} {
		if got := h.getNode(n).Spec.PodCIDRs; len(got) != 0 {
			t.Errorf("node %s got pod CIDRs %v from a config that serves no node", n, got)
		}
	}

	// NetworkUnavailable until a matching config appears, then False.
	h.create(newNode("lonely", map[string]string{"rack": "r9"}))
	h.waitNodeConditionOf("lonely", netU, corev1.ConditionTrue, allotv1.ReasonNoMatchingConfig,
		`no ClusterCIDRConfig matches node labels of node "lonely"`)
	h.create(newCCC("rack9", map[string]string{"rack": "r9"}, "10.9.0.0/16", 24, "fd00:9::/112", 120))
	h.waitPodCIDRs("lonely", "10.9.0.0/24", "fd00:9::/120")
	h.waitNodeConditionOf("lonely", netU, corev1.ConditionFalse, allotv1.ReasonPodCIDRAssigned, "10.9.0.0/24")

	// kube-controller-manager's --allocate-node-cidrs wrote these (inside the cluster pod CIDR,
	// in no config). A config over them created later never hands them out.
	kcm := newNode("kcm", map[string]string{"pool": "late"})
	kcm.Spec.PodCIDR, kcm.Spec.PodCIDRs = "10.7.0.0/24", []string{"10.7.0.0/24"}
	h.create(kcm)
	h.waitEvent(waitFor, "kcm", allotv1.ReasonForeignPodCIDR, "--allocate-node-cidrs=false")
	h.waitNodeConditionOf("kcm", allotv1.NodeConditionPodCIDRAssigned, corev1.ConditionFalse, allotv1.ReasonForeignPodCIDR,
		`pod CIDRs 10.7.0.0/24 of node "kcm" were not assigned by allot and lie in no ClusterCIDRConfig`)
	if v := metricValue(t, r, "allot_operator_refusals_total", "reason", "foreign_pod_cidr"); v != 1 {
		t.Errorf("foreign pod CIDR metric = %v; want 1 (one Event per node)", v)
	}
	h.create(newCCC("late", map[string]string{"pool": "late2"}, "10.7.0.0/23", 24, "fd00:7::/120", 120))
	h.create(newNode("l1", map[string]string{"pool": "late2"}))
	h.waitPodCIDRs("l1", "10.7.1.0/24", "fd00:7::/120")
	h.checkNoOverlap()

	// The webhook, served by a second replica (every replica serves it, leader or not).
	h.run("op-b", func(o *operator.Options) {
		o.ClusterCIDRConfig, o.DisableMultiPool, o.SharedPools.Disable = true, true, true
		o.ClusterPodCIDRs = podCIDRs
		o.SharedPools.Webhook = operator.WebhookOptions{Address: "127.0.0.1:0", Register: true}
	})
	outside := newCCC("outside2", nil, "172.16.0.0/16", 24, "fd00:3::/112", 120)
	eventually(t, waitFor, "webhook answering", func() error {
		if err := h.c.Create(h.ctx, outside.DeepCopy(), client.DryRunAll); err == nil {
			return fmt.Errorf("not refused yet")
		}
		return nil
	})
	// Shared pools are off; IPPools are sent to be refused (multi-pool is off: they would do
	// nothing).
	if hooks := mustVWC(t, h).Webhooks; len(hooks) != 2 || hooks[0].Name != "clustercidrconfigs.allot.io" || hooks[1].Name != "ippools.allot.io" {
		names := make([]string, len(hooks))
		for i := range hooks {
			names[i] = hooks[i].Name
		}
		t.Errorf("webhooks %v; want clustercidrconfigs.allot.io and ippools.allot.io (shared pools are off)", names)
	}
	reservedOut := newCCC("reserved-out", nil, "10.20.0.0/16", 24, "fd00:20::/112", 120)
	reservedOut.Spec.IPv4.Reserved = []string{"10.20.0.1", "10.21.0.0/24"}
	for _, tc := range []struct {
		name string
		obj  *allotv1.ClusterCIDRConfig
		want string // "" allowed
	}{
		{"outside the cluster pod CIDR", outside, "spec.ipv4.cidr: 172.16.0.0/16 is outside the cluster pod CIDR"},
		{"single stack after dual", newCCC("single2", nil, "10.30.0.0/16", 24, "", 0), "spec.ipv6: must be set"},
		{"IPv6 only", newCCC("v6only", nil, "", 0, "fd00:30::/112", 120), "spec.ipv4: must be set"},
		{"reserved outside the CIDR", reservedOut, `spec.ipv4.reserved[1]: "10.21.0.0/24" is not inside spec.ipv4.cidr 10.20.0.0/16`},
		{"valid", newCCC("valid", map[string]string{"pool": "valid"}, "10.40.0.0/16", 24, "fd00:40::/112", 120), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := h.c.Create(h.ctx, tc.obj)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v; want refused with %q", err, tc.want)
			}
		})
	}
}
