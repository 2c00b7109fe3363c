package operator_test

import (
	"context"
	"fmt"
	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/internal/testenv"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
	nodelabels "github.com/allot-ipam/allot/plugins/policy/nodelabels"
	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/test/k8senv"
)

type harness struct {
	t   *testing.T
	env *k8senv.Env
	c   client.Client
	ctx context.Context
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &harness{t: t, env: env, c: c, ctx: ctx}
}

type replica struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error
	reg    *prometheus.Registry
	leader chan struct{} // receives each time the replica leads
}

func testLogger(t *testing.T) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("ALLOT_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("test", t.Name())
}

// run starts an operator replica; it is stopped at the end of the test.
func (h *harness) run(id string, mod func(*operator.Options)) *replica {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.ctx)
	r := &replica{id: id, cancel: cancel, done: make(chan struct{}), reg: prometheus.NewRegistry(), leader: make(chan struct{}, 16)}
	opts := operator.Options{
		RESTConfig:    h.env.Config,
		Identity:      id,
		Logger:        testLogger(h.t).With("replica", id),
		Registry:      r.reg,
		LeaseDuration: 2 * time.Second,
		RenewDeadline: 1500 * time.Millisecond,
		RetryPeriod:   200 * time.Millisecond,
		StatusDelay:   100 * time.Millisecond,
		OnLeader:      func() { r.leader <- struct{}{} },
		// The real policy: these tests check Google Distributed Cloud's assignment rules
		// end to end. Test files may import plugins (ARCHITECTURE.md, "Dependency rules").
		NodePolicy: nodelabels.New(),
	}
	if mod != nil {
		mod(&opts)
	}
	go func() {
		r.err = operator.Run(ctx, opts)
		close(r.done)
	}()
	h.t.Cleanup(func() { r.stop(h.t) })
	return r
}

// stop cancels the replica and waits for Run to return nil.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		if r.err != nil {
			t.Errorf("operator %s: %v", r.id, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("operator %s did not stop", r.id)
	}
}

func (r *replica) waitLeader(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-r.leader:
	case <-time.After(d):
		t.Fatalf("replica %s did not become leader within %v", r.id, d)
	}
}

// eventually waits until f returns nil.
func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, d, what, testenv.CondErr(f))
}

func (h *harness) create(objs ...client.Object) {
	h.t.Helper()
	for _, o := range objs {
		if err := h.c.Create(h.ctx, o); err != nil {
			h.t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

func newPool(name string, v4 []string, v4mask int32, v6 []string, v6mask int32) *allotv1.IPPool {
	p := &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if v4 != nil {
		p.Spec.IPv4 = &allotv1.PoolFamily{CIDRs: v4, MaskSize: v4mask}
	}
	if v6 != nil {
		p.Spec.IPv6 = &allotv1.PoolFamily{CIDRs: v6, MaskSize: v6mask}
	}
	return p
}

type req struct {
	pool   string
	v4, v6 int64
}

func newAllotNode(name string, reqs ...req) *allotv1.AllotNode {
	n := &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, r := range reqs {
		n.Spec.IPAM.Pools.Requested = append(n.Spec.IPAM.Pools.Requested,
			allotv1.PoolRequest{Pool: r.pool, Needed: allotv1.AddressCounts{IPv4: r.v4, IPv6: r.v6}})
	}
	return n
}

// setRequests changes a node's requests as the agent would (retrying on conflicts).
func (h *harness) updateAllotNode(name string, f func(*allotv1.AllotNode)) {
	h.t.Helper()
	testenv.Eventually(h.t, 5*time.Second, "update AllotNode "+name, testenv.CondErr(func() error {
		var n allotv1.AllotNode
		if err := h.c.Get(h.ctx, client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		f(&n)
		return h.c.Update(h.ctx, &n)
	}))
}

func (h *harness) getAllotNode(name string) *allotv1.AllotNode {
	h.t.Helper()
	var n allotv1.AllotNode
	if err := h.c.Get(h.ctx, client.ObjectKey{Name: name}, &n); err != nil {
		h.t.Fatal(err)
	}
	return &n
}

func (h *harness) getPool(name string) *allotv1.IPPool {
	h.t.Helper()
	var p allotv1.IPPool
	if err := h.c.Get(h.ctx, client.ObjectKey{Name: name}, &p); err != nil {
		h.t.Fatal(err)
	}
	return &p
}

// capacity is the number of addresses of a family a node can hand out from a pool (usable
// addresses, as the node's allocator counts them).
func capacity(n *allotv1.AllotNode, pool string, v4 bool) int64 {
	var total int64
	for _, a := range n.Spec.IPAM.Pools.Allocated {
		if a.Pool != pool {
			continue
		}
		for _, s := range a.CIDRs {
			p := netip.MustParsePrefix(s)
			if p.Addr().Is4() == v4 {
				fam := policy.IPv4
				if !v4 {
					fam = policy.IPv6
				}
				a, err := allocator.New(allocator.Config{Name: "block", Family: fam})
				if err != nil {
					panic(err)
				}
				// As the agent adds it: with its gateway reserved.
				if err := a.AddCIDRWithGateway(p, ipam.BlockGateway(p)); err != nil {
					panic(err)
				}
				total += int64(a.Stats().Usable)
			}
		}
	}
	return total
}

// fulfilled says whether every request of the node is covered.
func fulfilled(n *allotv1.AllotNode) error {
	for _, r := range n.Spec.IPAM.Pools.Requested {
		if c := capacity(n, r.Pool, true); c < r.Needed.IPv4 {
			return fmt.Errorf("node %s pool %s: ipv4 capacity %d < %d", n.Name, r.Pool, c, r.Needed.IPv4)
		}
		if c := capacity(n, r.Pool, false); c < r.Needed.IPv6 {
			return fmt.Errorf("node %s pool %s: ipv6 capacity %d < %d", n.Name, r.Pool, c, r.Needed.IPv6)
		}
	}
	return nil
}

func (h *harness) waitFulfilled(d time.Duration, names ...string) {
	h.t.Helper()
	defer func() {
		if h.t.Failed() {
			var l allotv1.AllotNodeList
			_ = h.c.List(h.ctx, &l)
			for _, n := range l.Items {
				if fulfilled(&n) != nil {
					h.t.Logf("AllotNode %s gen %d spec %+v status %+v", n.Name, n.Generation, n.Spec.IPAM.Pools, n.Status)
				}
			}
		}
	}()
	eventually(h.t, d, "nodes fulfilled", func() error {
		for _, name := range names {
			var n allotv1.AllotNode
			if err := h.c.Get(h.ctx, client.ObjectKey{Name: name}, &n); err != nil {
				return err
			}
			if err := fulfilled(&n); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkNoOverlap lists every AllotNode and Node and fails if two blocks overlap.
func (h *harness) checkNoOverlap() int {
	h.t.Helper()
	type owned struct {
		p     netip.Prefix
		owner string
	}
	var all []owned
	var ans allotv1.AllotNodeList
	if err := h.c.List(h.ctx, &ans); err != nil {
		h.t.Fatal(err)
	}
	for _, n := range ans.Items {
		for _, a := range n.Spec.IPAM.Pools.Allocated {
			for _, s := range a.CIDRs {
				all = append(all, owned{netip.MustParsePrefix(s), "allotnode/" + n.Name})
			}
		}
	}
	var nodes corev1.NodeList
	if err := h.c.List(h.ctx, &nodes); err != nil {
		h.t.Fatal(err)
	}
	for _, n := range nodes.Items {
		for _, s := range n.Spec.PodCIDRs {
			all = append(all, owned{netip.MustParsePrefix(s), "node/" + n.Name})
		}
	}
	slices.SortFunc(all, func(a, b owned) int {
		if c := a.p.Addr().Compare(b.p.Addr()); c != 0 {
			return c
		}
		return a.p.Bits() - b.p.Bits()
	})
	// Prefixes nest or are disjoint: in address order, a prefix overlaps an earlier one iff
	// the earlier one reaching furthest contains its first address.
	best := -1
	for i := range all {
		if best >= 0 && all[best].p.Addr().Is4() == all[i].p.Addr().Is4() && all[best].p.Contains(all[i].p.Addr()) {
			h.t.Errorf("blocks overlap: %s of %s and %s of %s", all[best].p, all[best].owner, all[i].p, all[i].owner)
			continue
		}
		best = i
	}
	return len(all)
}

func condition(conds []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(conds, typ)
}

// waitEvent waits for an Event about the named object with the reason whose note contains
// substr.
func (h *harness) waitEvent(d time.Duration, object, reason, substr string) {
	h.t.Helper()
	eventually(h.t, d, fmt.Sprintf("event %s on %s", reason, object), func() error {
		var evs corev1.EventList
		if err := h.c.List(h.ctx, &evs, client.InNamespace(operator.EventsNamespace)); err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name != object {
				continue
			}
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, substr) {
				return nil
			}
		}
		return fmt.Errorf("events on %s: %q", object, seen)
	})
}

// leaseHolder returns the holder of the operator's Lease.
func (h *harness) leaseHolder() string {
	h.t.Helper()
	var l coordinationv1.Lease
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: operator.DefaultNamespace, Name: operator.DefaultLeaseName}, &l); err != nil {
		return ""
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// metricValue sums the samples of a metric whose label has the value.
func metricValue(t *testing.T, r *replica, name, label, value string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := label == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					ok = true
				}
			}
			if !ok {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
