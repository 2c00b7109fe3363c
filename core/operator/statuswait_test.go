package operator

import (
	"net/netip"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// TestStatusWait: a node's status that only says its requests are covered waits as a pool's
// counters do (longer with more nodes), once per hand-out, and once more if other nodes'
// blocks are still being written when it comes due; bad news, and the news that clears it,
// go at once.
func TestStatusWait(t *testing.T) {
	now := time.Unix(1000, 0)
	st := newState()
	for i := range 250 {
		st.allot["n"+strconv.Itoa(i)] = &allotHold{}
	}
	r := &allotNodeReconciler{st: st, statusDelay: time.Second, now: func() time.Time { return now }}
	h := &allotHold{}
	added := map[netip.Prefix]string{netip.MustParsePrefix("10.0.0.0/26"): "default"}
	node := &allotv1.AllotNode{}

	// Blocks handed out, all covered: wait StatusDelay x (1 + 250/100).
	if d := r.statusWait(node, nodePlan{h: h, added: added}); d != 3*time.Second {
		t.Fatalf("good news after a hand-out waits %v, want 3s", d)
	}
	// A reconcile in between (the agent's status write) does not push the deadline back.
	now = now.Add(2 * time.Second)
	if d := r.statusWait(node, nodePlan{h: h}); d != time.Second {
		t.Fatalf("a reconcile before the deadline waits %v, want the 1s left", d)
	}
	now = now.Add(time.Second)
	if d := r.statusWait(node, nodePlan{h: h}); d > 0 {
		t.Fatalf("at the deadline the status still waits %v", d)
	}
	if !h.statusDue.IsZero() {
		t.Fatal("the deadline is kept after it passed")
	}
	// Nothing handed out, nothing pending: at once.
	if d := r.statusWait(node, nodePlan{h: h}); d > 0 {
		t.Fatalf("a status with nothing handed out waits %v", d)
	}

	// Due while other nodes' blocks are still being written: once more, not twice.
	r.statusWait(node, nodePlan{h: h, added: added})
	now = now.Add(3 * time.Second)
	r.lastSpecWrite.Store(now.Add(-100 * time.Millisecond).UnixNano())
	if d := r.statusWait(node, nodePlan{h: h}); d != 3*time.Second {
		t.Fatalf("due during other nodes' spec writes: waits %v, want 3s more", d)
	}
	now = now.Add(3 * time.Second)
	r.lastSpecWrite.Store(now.Add(-100 * time.Millisecond).UnixNano())
	if d := r.statusWait(node, nodePlan{h: h}); d > 0 {
		t.Fatalf("extended once already, still waits %v", d)
	}
	// Nothing handed out, nothing pending: at once.
	if d := r.statusWait(node, nodePlan{h: h}); d > 0 {
		t.Fatalf("a status with nothing handed out waits %v", d)
	}

	// Bad news goes at once, and drops a pending wait.
	r.statusWait(node, nodePlan{h: h, added: added})
	unmet := map[string]unmetReason{"default": {message: "pool exhausted", exhausted: true}}
	if d := r.statusWait(node, nodePlan{h: h, added: added, newUnmet: unmet}); d > 0 {
		t.Fatalf("an unmet request's status waits %v", d)
	}
	if d := r.statusWait(node, nodePlan{h: h, conflicts: []string{"10.0.0.0/26 also on n2"}}); d > 0 {
		t.Fatalf("a conflict's status waits %v", d)
	}
	// The news that clears a False condition goes at once too.
	node.Status.Conditions = []metav1.Condition{{Type: allotv1.ConditionPoolsFulfilled, Status: metav1.ConditionFalse}}
	if d := r.statusWait(node, nodePlan{h: h, added: added}); d > 0 {
		t.Fatalf("the status that clears a False condition waits %v", d)
	}
}
