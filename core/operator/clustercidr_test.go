package operator_test

import (
	"fmt"
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
// five tie-break rules; the next best config when the best is full; dual stack; a deleted
// node's block is reused by a waiting node.
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
		// Dual stack: 32-24 == 128-120.
		newCCC("ds", map[string]string{"ds": "yes"}, "10.110.0.0/16", 24, "fd10::/112", 120),
		// One block only: reuse after node deletion.
		newCCC("one", map[string]string{"solo": "y"}, "10.120.0.0/24", 24, "", 0),
	)
	h.create(
		newNode("node-a", map[string]string{"type": "medium", "rack": "r1"}),
		newNode("node-c", map[string]string{"zone": "z1"}),
		newNode("node-d", map[string]string{"pool": "p"}),
		newNode("node-e", map[string]string{"kubernetes.io/hostname": "node-e", "node.kubernetes.io/instance-type": "large"}),
		newNode("node-f", map[string]string{"tier": "x"}),
		newNode("node-g", map[string]string{"ds": "yes"}),
		newNode("s1", map[string]string{"solo": "y"}),
	)
	h.waitPodCIDRs("node-a", "10.100.0.0/24")
	h.waitPodCIDRs("node-c", "10.102.0.0/24")
	h.waitPodCIDRs("node-d", "10.104.0.0/26")
	h.waitPodCIDRs("node-e", "10.106.0.0/24")
	h.waitPodCIDRs("node-f", "10.108.0.0/24")
	h.waitPodCIDRs("node-g", "10.110.0.0/24", "fd10::/120")
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
