package operator_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/allot-ipam/allot/test/k8senv"
)

// TestPoolNotWatchedYet: an AllotNode asks for the blocks of an IPPool created a moment
// before, which the operator's watch has not delivered (the test holds the operator's IPPool
// watches, so its informer provably lacks the pool). The operator reads the pool from the API
// server and hands the block out at once: the node's PoolsFulfilled condition is never False
// on the way. Once the watch catches up, the pool's finalizer and status count the block. A
// pool that does not exist is still reported (PoolNotFound, "no such IPPool"), and reconciles
// of that node within a second share one read.
func TestPoolNotWatchedYet(t *testing.T) {
	h := newHarness(t)
	h.create(newPool("default", []string{"10.0.0.0/16"}, 24, nil, 0))
	hold := k8senv.NewWatchHold()
	defer hold.Release() // before the replica stops (t.Cleanup): a held watch would not end
	r := h.run("op-a", func(o *operator.Options) { o.RESTConfig = hold.Wrap(h.env.Config, "ippools") })
	h.create(newAllotNode("node-a", req{pool: "default", v4: 10}))
	h.waitFulfilled(waitFor, "node-a") // the operator leads, its IPPool informer has synced

	conds := h.recordConditions("node-b")
	hold.Hold()
	h.create(newPool("fresh", []string{"10.1.0.0/16"}, 24, nil, 0))
	h.create(newAllotNode("node-b", req{pool: "fresh", v4: 10}))
	h.waitFulfilled(waitFor, "node-b")
	eventually(t, waitFor, "node-b PoolsFulfilled", func() error {
		if c := condition(h.getAllotNode("node-b").Status.Conditions, allotv1.ConditionPoolsFulfilled); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	if p := h.getPool("fresh"); slices.Contains(p.Finalizers, allotv1.FinalizerPoolInUse) {
		t.Fatal("pool fresh has the operator's finalizer: its informer had the pool, the test did not hold the watch")
	}
	if v := metricValue(t, r, "allot_operator_live_pool_reads_total", "result", "found"); v < 1 {
		t.Errorf("live reads found = %v, want at least 1", v)
	}
	eventually(t, waitFor, "node-b's watch shows PoolsFulfilled", func() error {
		if seen := conds.seen(); !slices.ContainsFunc(seen, func(c metav1.Condition) bool { return c.Status == metav1.ConditionTrue }) {
			return fmt.Errorf("conditions seen %+v", seen)
		}
		return nil
	})
	for _, c := range conds.stop() {
		if c.Status != metav1.ConditionTrue {
			t.Errorf("node-b's PoolsFulfilled was %s (%s: %s) while the operator's watch lagged", c.Status, c.Reason, c.Message)
		}
	}

	// The watch catches up: the IPPool reconciler counts the block handed out of the live read.
	hold.Release()
	eventually(t, waitFor, "pool fresh's finalizer and status", func() error {
		p := h.getPool("fresh")
		if !slices.Contains(p.Finalizers, allotv1.FinalizerPoolInUse) || p.Status.IPv4 == nil || p.Status.IPv4.AllocatedBlocks != 1 {
			return fmt.Errorf("finalizers %v, ipv4 status %+v", p.Finalizers, p.Status.IPv4)
		}
		return nil
	})
	h.checkNoOverlap()
	testMissingPool(t, h, r)
}

// testMissingPool: a node asks for a pool that does not exist: it is reported unmet, and ten
// changes of the node within a short time read the pool at most once per second.
func testMissingPool(t *testing.T, h *harness, r *replica) {
	reads := func() float64 { return metricValue(t, r, "allot_operator_live_pool_reads_total", "result", "none") }
	notFound := func(gen int64) error {
		n := h.getAllotNode("node-c")
		c := condition(n.Status.Conditions, allotv1.ConditionPoolsFulfilled)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != allotv1.ReasonPoolNotFound ||
			!strings.Contains(c.Message, `pool "nosuch": no such IPPool`) || c.ObservedGeneration < gen {
			return fmt.Errorf("condition %+v, want PoolNotFound of generation %d", c, gen)
		}
		return nil
	}
	h.create(newAllotNode("node-c", req{pool: "nosuch", v4: 10}))
	eventually(t, waitFor, "node-c PoolNotFound", func() error { return notFound(1) })
	if v := reads(); v < 1 {
		t.Errorf("live reads none = %v, want at least 1", v)
	}
	if problems, err := testutil.GatherAndLint(r.reg, "allot_operator_live_pool_reads_total"); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %+v", err, problems)
	}
	before, start := reads(), time.Now()
	for i := range 10 {
		h.updateAllotNode("node-c", func(n *allotv1.AllotNode) { n.Spec.IPAM.Pools.Requested[0].Needed.IPv4 = int64(11 + i) })
	}
	gen := h.getAllotNode("node-c").Generation
	eventually(t, waitFor, "node-c PoolNotFound, last generation", func() error { return notFound(gen) })
	// A read begins at most once per second; one begun before start may be counted after.
	n, elapsed := reads()-before, time.Since(start)
	if limit := elapsed.Seconds() + 2; n > limit {
		t.Errorf("%v live reads of a missing pool in %v for 10 changes, want at most %v (one per second)", n, elapsed, limit)
	}
}

// conditionLog records the PoolsFulfilled condition of every version of one AllotNode.
type conditionLog struct {
	mu    sync.Mutex
	conds []metav1.Condition
	close func()
	done  chan struct{}
}

// recordConditions watches AllotNode name (from before it exists) until stop.
func (h *harness) recordConditions(name string) *conditionLog {
	h.t.Helper()
	wc, err := client.NewWithWatch(h.env.Config, client.Options{Scheme: allotk8s.NewScheme()})
	if err != nil {
		h.t.Fatal(err)
	}
	w, err := wc.Watch(h.ctx, &allotv1.AllotNodeList{}, client.MatchingFields{"metadata.name": name})
	if err != nil {
		h.t.Fatal(err)
	}
	l := &conditionLog{close: w.Stop, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*allotv1.AllotNode); ok {
				if c := condition(n.Status.Conditions, allotv1.ConditionPoolsFulfilled); c != nil {
					l.mu.Lock()
					l.conds = append(l.conds, *c)
					l.mu.Unlock()
				}
			}
		}
	}()
	h.t.Cleanup(w.Stop)
	return l
}

// seen returns the conditions seen so far.
func (l *conditionLog) seen() []metav1.Condition {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.conds)
}

// stop ends the watch and returns the conditions seen.
func (l *conditionLog) stop() []metav1.Condition {
	l.close()
	<-l.done
	return l.seen()
}
