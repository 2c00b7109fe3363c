package operator_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

const waitFor = 30 * time.Second

// TestMultiPoolFulfil: several nodes, two pools, dual stack; every request covered, no two
// blocks overlap, statuses and metrics say so; a block the agent releases is taken back and
// handed out again.
func TestMultiPoolFulfil(t *testing.T) {
	h := newHarness(t)
	h.create(
		newPool("default", []string{"10.0.0.0/16"}, 24, []string{"fd00::/104"}, 120),
		newPool("blue", []string{"10.10.0.0/24", "10.10.1.0/24"}, 26, nil, 0),
	)
	r := h.run("op-a", nil)
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("node-%d", i)
		names = append(names, name)
		h.create(newAllotNode(name, req{pool: "default", v4: 300, v6: 16}, req{pool: "blue", v4: 61 * int64(i%3)}))
	}
	h.waitFulfilled(waitFor, names...)
	if n := h.checkNoOverlap(); n != 6*3+6 {
		t.Errorf("blocks = %d; want %d", n, 6*3+6)
	}
	// Exact carving: 300 addresses in /24 blocks is 2 blocks; the first node gets the lowest.
	n0 := h.getAllotNode("node-0")
	eventually(t, waitFor, "node status", func() error {
		n0 = h.getAllotNode("node-0")
		c := condition(n0.Status.Conditions, allotv1.ConditionPoolsFulfilled)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("PoolsFulfilled = %+v", c)
		}
		if n0.Status.PoolNames != "default" || n0.Status.AllocatedBlocks != 3 {
			return fmt.Errorf("status summary %q %d", n0.Status.PoolNames, n0.Status.AllocatedBlocks)
		}
		return nil
	})
	eventually(t, waitFor, "pool status", func() error {
		p := h.getPool("default")
		if p.Status.IPv4 == nil || p.Status.IPv4.AllocatedBlocks != 12 || p.Status.IPv4.TotalBlocks != 256 {
			return fmt.Errorf("ipv4 status %+v", p.Status.IPv4)
		}
		if p.Status.IPv6 == nil || p.Status.IPv6.AllocatedBlocks != 6 || p.Status.IPv6.TotalBlocks != 65536 {
			return fmt.Errorf("ipv6 status %+v", p.Status.IPv6)
		}
		if !slices.Equal(p.Status.InUseCIDRs, []string{"10.0.0.0/16", "fd00::/104"}) {
			return fmt.Errorf("inUseCIDRs %v", p.Status.InUseCIDRs)
		}
		if !slices.Contains(p.Finalizers, allotv1.FinalizerPoolInUse) {
			return fmt.Errorf("finalizers %v", p.Finalizers)
		}
		return nil
	})
	if v := metricValue(t, r, "allot_operator_blocks_allocated_total", "source", "default"); v != 18 {
		t.Errorf("allocated metric for default = %v; want 18", v)
	}
	// blocks/blocks_capacity is what the pool-usage alert computes.
	if v := metricValue(t, r, "allot_operator_blocks_capacity", "source", "default"); v != 256+65536 {
		t.Errorf("capacity metric for default = %v; want %d (the status' totalBlocks)", v, 256+65536)
	}

	// The agent of node-0 releases a default block (and lowers its request); the operator
	// takes it back and hands it to the next node that asks.
	n0 = h.getAllotNode("node-0")
	var freed string
	h.updateAllotNode("node-0", func(n *allotv1.AllotNode) {
		for i, a := range n.Spec.IPAM.Pools.Allocated {
			if a.Pool == "default" {
				for j, c := range a.CIDRs {
					if strings.Contains(c, ".") {
						freed = c
						n.Spec.IPAM.Pools.Allocated[i].CIDRs = slices.Delete(slices.Clone(a.CIDRs), j, j+1)
						break
					}
				}
			}
		}
		n.Spec.IPAM.Pools.Requested[0].Needed.IPv4 = 200
	})
	eventually(t, waitFor, "pool counts the release", func() error {
		if p := h.getPool("default"); p.Status.IPv4.AllocatedBlocks != 11 {
			return fmt.Errorf("allocated %d", p.Status.IPv4.AllocatedBlocks)
		}
		return nil
	})
	h.create(newAllotNode("node-late", req{pool: "default", v4: 1}))
	h.waitFulfilled(waitFor, "node-late")
	late := h.getAllotNode("node-late")
	if got := late.Spec.IPAM.Pools.Allocated[0].CIDRs; !slices.Equal(got, []string{freed}) {
		t.Errorf("node-late got %v; want the released block %s (lowest free)", got, freed)
	}
	h.checkNoOverlap()
	if v := metricValue(t, r, "allot_operator_blocks_released_total", "source", "default"); v != 1 {
		t.Errorf("released metric = %v", v)
	}
}

// TestRunTimeGrowth: a pool runs out (condition, Event, metric), a CIDR added at run time
// serves the waiting node; a node asking for a pool that does not exist yet is served when
// the pool is created.
func TestRunTimeGrowth(t *testing.T) {
	h := newHarness(t)
	h.create(newPool("small", []string{"10.20.0.0/24"}, 26, nil, 0))
	r := h.run("op-a", nil)
	for i := range 5 {
		h.create(newAllotNode(fmt.Sprintf("n%d", i), req{pool: "small", v4: 61}))
	}
	// Four /26 blocks for five nodes: one node (whichever the workers reach last) waits.
	var last string
	eventually(t, waitFor, "one node exhausted", func() error {
		var served, waiting []string
		for i := range 5 {
			n := h.getAllotNode(fmt.Sprintf("n%d", i))
			if fulfilled(n) == nil {
				served = append(served, n.Name)
			} else {
				waiting = append(waiting, n.Name)
			}
		}
		if len(served) != 4 || len(waiting) != 1 {
			return fmt.Errorf("served %v waiting %v", served, waiting)
		}
		last = waiting[0]
		return nil
	})
	eventually(t, waitFor, last+" exhausted", func() error {
		n := h.getAllotNode(last)
		c := condition(n.Status.Conditions, allotv1.ConditionPoolsFulfilled)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != allotv1.ReasonPoolExhausted ||
			!strings.Contains(c.Message, `pool "small" is exhausted`) {
			return fmt.Errorf("condition %+v", c)
		}
		p := h.getPool("small")
		if pc := condition(p.Status.Conditions, allotv1.ConditionExhausted); pc == nil || !strings.Contains(pc.Message, last) {
			return fmt.Errorf("pool condition %+v", pc)
		}
		return nil
	})
	h.waitEvent(waitFor, last, allotv1.ReasonPoolExhausted, "add CIDRs to spec.ipv4.cidrs")
	if v := metricValue(t, r, "allot_operator_exhausted_total", "source", "small"); v < 1 {
		t.Errorf("exhausted metric = %v", v)
	}

	// Grow the pool at run time (the operator writes its status meanwhile: retry on conflict).
	eventually(t, waitFor, "grow pool small", func() error {
		p := h.getPool("small")
		p.Spec.IPv4.CIDRs = append(p.Spec.IPv4.CIDRs, "10.21.0.0/26")
		return h.c.Update(h.ctx, p)
	})
	h.waitFulfilled(waitFor, last)
	if got := h.getAllotNode(last).Spec.IPAM.Pools.Allocated[0].CIDRs; !slices.Equal(got, []string{"10.21.0.0/26"}) {
		t.Errorf("%s got %v", last, got)
	}
	eventually(t, waitFor, "exhaustion cleared", func() error {
		if c := condition(h.getPool("small").Status.Conditions, allotv1.ConditionExhausted); c != nil {
			return fmt.Errorf("still %+v", c)
		}
		if c := condition(h.getAllotNode(last).Status.Conditions, allotv1.ConditionPoolsFulfilled); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("%s condition %+v", last, c)
		}
		return nil
	})

	// A pool created at run time.
	h.create(newAllotNode("n-late", req{pool: "late", v4: 10}))
	eventually(t, waitFor, "pool not found", func() error {
		c := condition(h.getAllotNode("n-late").Status.Conditions, allotv1.ConditionPoolsFulfilled)
		if c == nil || c.Reason != allotv1.ReasonPoolNotFound {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	h.create(newPool("late", []string{"10.30.0.0/16"}, 28, nil, 0))
	h.waitFulfilled(waitFor, "n-late")
	h.checkNoOverlap()
}

// waitAdmissionPolicy waits until the in-use admission policy refuses a probe: the policy
// and its binding reach the API server's admission plugin asynchronously.
func (h *harness) waitAdmissionPolicy() {
	h.t.Helper()
	probe := newPool("probe-admission", []string{"10.250.0.0/24", "10.251.0.0/24"}, 28, nil, 0)
	h.create(probe)
	probe.Status.InUseCIDRs = []string{"10.250.0.0/24"}
	if err := h.c.Status().Update(h.ctx, probe); err != nil {
		h.t.Fatal(err)
	}
	eventually(h.t, waitFor, "admission policy active", func() error {
		var p allotv1.IPPool
		if err := h.c.Get(h.ctx, client.ObjectKey{Name: probe.Name}, &p); err != nil {
			return err
		}
		p.Spec.IPv4.CIDRs = []string{"10.251.0.0/24"}
		if err := h.c.Update(h.ctx, &p); err == nil {
			return fmt.Errorf("removal accepted") // policy not active yet: CIDR gone, put it back
		} else if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			return err
		}
		return nil
	})
	var p allotv1.IPPool
	if err := h.c.Get(h.ctx, client.ObjectKey{Name: probe.Name}, &p); err == nil {
		p.Status.InUseCIDRs = nil
		_ = h.c.Status().Update(h.ctx, &p)
		_ = h.c.Delete(h.ctx, &p)
	}
}

// TestRefusals: removing an in-use CIDR and deleting an in-use pool are refused at apply time
// by the admission policy with a clear message; with the policy gone (or its view stale) the
// operator refuses them itself: condition CIDRRemovalRefused and the removed CIDR stays
// reserved, the finalizer holds the deletion with condition DeletionRefused. Nothing is ever
// handed out twice.
func TestRefusals(t *testing.T) {
	h := newHarness(t)
	h.waitAdmissionPolicy()
	h.create(newPool("green", []string{"10.40.0.0/24", "10.41.0.0/24"}, 25, nil, 0))
	r := h.run("op-a", nil)
	// n1 takes both blocks of 10.40.0.0/24, n2 one of 10.41.0.0/24.
	h.create(newAllotNode("n1", req{pool: "green", v4: 250}))
	h.waitFulfilled(waitFor, "n1")
	h.create(newAllotNode("n2", req{pool: "green", v4: 1}))
	h.waitFulfilled(waitFor, "n2")
	eventually(t, waitFor, "inUseCIDRs", func() error {
		if got := h.getPool("green").Status.InUseCIDRs; !slices.Equal(got, []string{"10.40.0.0/24", "10.41.0.0/24"}) {
			return fmt.Errorf("inUseCIDRs %v", got)
		}
		return nil
	})

	// 1. At apply time.
	p := h.getPool("green")
	p.Spec.IPv4.CIDRs = []string{"10.41.0.0/24"}
	err := h.c.Update(h.ctx, p)
	if err == nil || !strings.Contains(err.Error(), "cannot remove CIDRs that nodes still hold blocks of: 10.40.0.0/24") {
		t.Fatalf("removing an in-use CIDR: %v", err)
	}
	t.Logf("apply-time refusal: %v", err)
	err = h.c.Delete(h.ctx, h.getPool("green"))
	if err == nil || !strings.Contains(err.Error(), "IPPool green is in use") {
		t.Fatalf("deleting an in-use pool: %v", err)
	}
	t.Logf("apply-time refusal: %v", err)

	// 2. Without the admission policy: the operator's own refusal.
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "ippool-in-use.allot.io"}}
	if err := h.c.Delete(h.ctx, binding); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitFor, "CIDR removal accepted by the API server", func() error {
		p := h.getPool("green")
		p.Spec.IPv4.CIDRs = []string{"10.41.0.0/24"}
		return h.c.Update(h.ctx, p)
	})
	eventually(t, waitFor, "CIDRRemovalRefused", func() error {
		p := h.getPool("green")
		c := condition(p.Status.Conditions, allotv1.ConditionCIDRRemovalRefused)
		if c == nil || !strings.Contains(c.Message, "10.40.0.0/24 (held by n1)") {
			return fmt.Errorf("condition %+v", c)
		}
		if !slices.Equal(p.Status.InUseCIDRs, []string{"10.40.0.0/24", "10.41.0.0/24"}) {
			return fmt.Errorf("inUseCIDRs %v", p.Status.InUseCIDRs)
		}
		return nil
	})
	h.waitEvent(waitFor, "green", allotv1.ConditionCIDRRemovalRefused, "10.40.0.0/24")
	if v := metricValue(t, r, "allot_operator_refusals_total", "reason", "cidr_removal"); v < 1 {
		t.Errorf("refusal metric = %v", v)
	}
	// A new node gets a block of the remaining CIDR, never one of the removed CIDR.
	h.create(newAllotNode("n3", req{pool: "green", v4: 100}))
	h.waitFulfilled(waitFor, "n3")
	if got := h.getAllotNode("n3").Spec.IPAM.Pools.Allocated[0].CIDRs; !slices.Equal(got, []string{"10.41.0.128/25"}) {
		t.Errorf("n3 got %v; want 10.41.0.128/25", got)
	}
	// Another pool that takes over the removed CIDR must not get n1's blocks either.
	h.create(newPool("thief", []string{"10.40.0.0/24"}, 25, nil, 0))
	h.create(newAllotNode("n4", req{pool: "thief", v4: 1}))
	eventually(t, waitFor, "thief's CIDR overlaps green's in-use CIDR", func() error {
		p := h.getPool("thief")
		if c := condition(p.Status.Conditions, allotv1.ConditionCIDROverlap); c == nil || !strings.Contains(c.Message, `pool "green"`) {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	if n := h.getAllotNode("n4"); len(n.Spec.IPAM.Pools.Allocated) != 0 {
		t.Errorf("n4 got %v from an overlapping pool", n.Spec.IPAM.Pools.Allocated)
	}

	// Deleting the in-use pool: the finalizer holds it, the condition says why.
	if err := h.c.Delete(h.ctx, h.getPool("green")); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitFor, "DeletionRefused", func() error {
		p := h.getPool("green")
		c := condition(p.Status.Conditions, allotv1.ConditionDeletionRefused)
		if p.DeletionTimestamp == nil || c == nil || !strings.Contains(c.Message, "n1, n2, n3") {
			return fmt.Errorf("deletion %v condition %+v", p.DeletionTimestamp, c)
		}
		return nil
	})
	h.waitEvent(waitFor, "green", allotv1.ConditionDeletionRefused, "still hold")
	// A terminating pool hands out nothing.
	h.updateAllotNode("n2", func(n *allotv1.AllotNode) { n.Spec.IPAM.Pools.Requested[0].Needed.IPv4 = 1000 })
	eventually(t, waitFor, "terminating pool refuses", func() error {
		c := condition(h.getAllotNode("n2").Status.Conditions, allotv1.ConditionPoolsFulfilled)
		if c == nil || c.Reason != allotv1.ReasonPoolTerminating {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	h.checkNoOverlap()

	// The agents release every block: the pool goes away.
	for _, n := range []string{"n1", "n2", "n3"} {
		h.updateAllotNode(n, func(n *allotv1.AllotNode) {
			n.Spec.IPAM.Pools.Requested = nil
			n.Spec.IPAM.Pools.Allocated = nil
		})
	}
	eventually(t, waitFor, "pool deleted", func() error {
		var p allotv1.IPPool
		err := h.c.Get(h.ctx, client.ObjectKey{Name: "green"}, &p)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v %+v", err, p.Status.Conditions)
	})
	// Now the thief pool's CIDR is free of claims: n4 is served.
	h.waitFulfilled(waitFor, "n4")
	h.checkNoOverlap()
}
