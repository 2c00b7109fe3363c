package operator

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

func ipPool(name string, cidrs ...string) allotv1.IPPool {
	return allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 3, CreationTimestamp: metav1.NewTime(time.Unix(1000, 0))},
		Spec: allotv1.IPPoolSpec{IPv4: &allotv1.PoolFamily{CIDRs: cidrs, MaskSize: 24}}}
}

func held(node, block string) heldBlock {
	return heldBlock{node: node, block: netip.MustParsePrefix(block)}
}

// TestDecidePool covers the IPPool reconciler's decision: block counts and capacity, in-use
// CIDRs (a CIDR removed while in use stays in use and is refused), the agents' usage,
// Ready's reason, the problem conditions with their refusals, and when the finalizer goes.
func TestDecidePool(t *testing.T) {
	now := metav1.Now()
	terminating := ipPool("p", "10.0.0.0/16")
	terminating.DeletionTimestamp = &now
	shrunk := ipPool("p", "10.1.0.0/16")
	shrunk.Status.InUseCIDRs = []string{"10.0.0.0/16"}
	badGateway := ipPool("p", "10.0.0.0/16")
	badGateway.Spec.IPv4.Gateway = "192.168.0.1"
	usage := allotv1.AllotNode{Status: allotv1.AllotNodeStatus{IPAM: allotv1.NodeIPAMStatus{Pools: []allotv1.PoolUsage{
		{Pool: "p", IPv4: &allotv1.FamilyUsage{Used: 5}}, {Pool: "other", IPv4: &allotv1.FamilyUsage{Used: 7}}}}}}
	tests := []struct {
		name      string
		pool      allotv1.IPPool
		snap      poolSnapshot
		inUse     []string
		alloc     int64
		total     int64
		ready     string
		conds     []string
		refusals  []string
		release   bool
		usedAddrs int64
	}{
		{name: "blocks held", pool: ipPool("p", "10.0.0.0/16"), snap: poolSnapshot{blocks: []heldBlock{held("n1", "10.0.0.0/24"), held("n2", "10.0.1.0/24")}},
			inUse: []string{"10.0.0.0/16"}, alloc: 2, total: 256, ready: allotv1.ReasonValid, usedAddrs: 5},
		{name: "exhausted", pool: ipPool("p", "10.0.0.0/24"), snap: poolSnapshot{blocks: []heldBlock{held("n1", "10.0.0.0/24")}, exhausted: []string{"n2"}},
			inUse: []string{"10.0.0.0/24"}, alloc: 1, total: 1, ready: allotv1.ReasonValid, conds: []string{allotv1.ConditionExhausted}, refusals: []string{""}, usedAddrs: 5},
		{name: "in-use CIDR removed: refused", pool: shrunk, snap: poolSnapshot{blocks: []heldBlock{held("n1", "10.0.3.0/24")}},
			inUse: []string{"10.0.0.0/16"}, alloc: 1, total: 256, ready: allotv1.ReasonValid,
			conds: []string{allotv1.ConditionCIDRRemovalRefused}, refusals: []string{refusalCIDRRemoval}, usedAddrs: 5},
		{name: "terminating while held", pool: terminating, snap: poolSnapshot{blocks: []heldBlock{held("n1", "10.0.0.0/24")}},
			inUse: []string{"10.0.0.0/16"}, alloc: 1, total: 256, ready: allotv1.ReasonPoolTerminating,
			conds: []string{allotv1.ConditionDeletionRefused}, refusals: []string{refusalPoolDeletion}, usedAddrs: 5},
		{name: "terminating, nothing held: released", pool: terminating, total: 256, ready: allotv1.ReasonPoolTerminating, release: true, usedAddrs: 5},
		{name: "gateway outside the CIDRs", pool: badGateway, total: 256, ready: allotv1.ReasonInvalid, usedAddrs: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := buildPoolTable([]allotv1.IPPool{tt.pool})[tt.pool.Name]
			d := decidePool(&tt.pool, e, tt.snap, []allotv1.AllotNode{usage})
			if d.release != tt.release {
				t.Errorf("release = %v, want %v", d.release, tt.release)
			}
			st := d.status
			if !slices.Equal(st.InUseCIDRs, tt.inUse) {
				t.Errorf("inUseCIDRs = %v, want %v", st.InUseCIDRs, tt.inUse)
			}
			if st.IPv4 == nil || st.IPv4.AllocatedBlocks != tt.alloc || st.IPv4.TotalBlocks != tt.total {
				t.Errorf("ipv4 = %+v, want %d of %d", st.IPv4, tt.alloc, tt.total)
			}
			if st.UsedAddresses != tt.usedAddrs || st.ObservedGeneration != 3 {
				t.Errorf("usedAddresses %d, observedGeneration %d", st.UsedAddresses, st.ObservedGeneration)
			}
			if c := meta.FindStatusCondition(st.Conditions, allotv1.ConditionReady); c == nil || c.Reason != tt.ready {
				t.Errorf("Ready = %+v, want %s", c, tt.ready)
			}
			var conds, refusals []string
			for _, c := range st.Conditions {
				if c.Type != allotv1.ConditionReady {
					conds = append(conds, c.Type)
				}
			}
			for _, ev := range d.events {
				refusals = append(refusals, ev.refusal)
			}
			if strings.Join(conds, ",") != strings.Join(tt.conds, ",") || strings.Join(refusals, ",") != strings.Join(tt.refusals, ",") {
				t.Errorf("conditions %v refusals %q; want %v %q", conds, refusals, tt.conds, tt.refusals)
			}
		})
	}
}

// TestUnmetChanges: a request newly unmet or unmet for another reason changes its pool's
// status; one no longer unmet clears it; an unchanged one does neither.
func TestUnmetChanges(t *testing.T) {
	full := unmetReason{exhausted: true, message: "pool \"a\" is exhausted"}
	gone := unmetReason{message: "pool \"b\": no such IPPool"}
	tests := []struct {
		name             string
		old, cur         map[string]unmetReason
		changed, cleared []string
	}{
		{"nothing", nil, nil, nil, nil},
		{"new", nil, map[string]unmetReason{"a": full}, []string{"a"}, nil},
		{"same", map[string]unmetReason{"a": full}, map[string]unmetReason{"a": full}, nil, nil},
		{"other reason", map[string]unmetReason{"a": gone}, map[string]unmetReason{"a": full}, []string{"a"}, nil},
		{"met now", map[string]unmetReason{"a": full, "b": gone}, map[string]unmetReason{"b": gone}, nil, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed, cleared := unmetChanges(tt.old, tt.cur)
			if !slices.Equal(changed, tt.changed) || !slices.Equal(cleared, tt.cleared) {
				t.Errorf("unmetChanges = %v, %v; want %v, %v", changed, cleared, tt.changed, tt.cleared)
			}
		})
	}
}

// TestNodeStatus covers PoolsFulfilled's reason (exhaustion first, then a missing or
// terminating pool, then conflicts) and the summary fields.
func TestNodeStatus(t *testing.T) {
	n := &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Generation: 4}}
	n.Spec.IPAM.Pools.Allocated = []allotv1.PoolAllocation{{Pool: "b", CIDRs: []string{"10.1.0.0/24"}},
		{Pool: "a", CIDRs: []string{"10.0.0.0/24", "10.0.1.0/24"}}, {Pool: "empty"}}
	tests := []struct {
		name      string
		unmet     map[string]unmetReason
		conflicts []string
		status    metav1.ConditionStatus
		reason    string
	}{
		{"covered", nil, nil, metav1.ConditionTrue, allotv1.ReasonAllocated},
		{"missing pool", map[string]unmetReason{"x": {message: "pool \"x\": no such IPPool"}}, nil, metav1.ConditionFalse, allotv1.ReasonPoolNotFound},
		{"terminating pool", map[string]unmetReason{"x": {message: "pool \"x\" is being deleted; it hands out no new blocks"}}, nil,
			metav1.ConditionFalse, allotv1.ReasonPoolTerminating},
		{"exhaustion wins", map[string]unmetReason{"x": {message: "no such"}, "y": {exhausted: true, message: "full"}}, []string{"c"},
			metav1.ConditionFalse, allotv1.ReasonPoolExhausted},
		{"conflicts", nil, []string{"10.9.0.0/24 (pool \"a\"): overlaps"}, metav1.ConditionFalse, allotv1.ReasonConflictingAllocation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s allotv1.AllotNodeStatus
			nodeStatus(&s, n, tt.unmet, tt.conflicts)
			if s.PoolNames != "a,b" || s.AllocatedBlocks != 3 {
				t.Errorf("summary %q %d", s.PoolNames, s.AllocatedBlocks)
			}
			c := meta.FindStatusCondition(s.Conditions, allotv1.ConditionPoolsFulfilled)
			if c == nil || c.Status != tt.status || c.Reason != tt.reason || c.ObservedGeneration != 4 {
				t.Errorf("PoolsFulfilled = %+v, want %s %s", c, tt.status, tt.reason)
			}
		})
	}
}

// TestAllocationNote and TestAddAllocations: blocks handed out are written sorted, per pool.
func TestAllocationNote(t *testing.T) {
	added := map[netip.Prefix]string{netip.MustParsePrefix("10.0.1.0/24"): "a", netip.MustParsePrefix("10.0.0.0/24"): "a",
		netip.MustParsePrefix("fd00::/120"): "b"}
	if got, want := allocationNote(added), `10.0.0.0/24, 10.0.1.0/24 from pool "a"; fd00::/120 from pool "b"`; got != want {
		t.Errorf("note = %s, want %s", got, want)
	}
	n := &allotv1.AllotNode{}
	n.Spec.IPAM.Pools.Allocated = []allotv1.PoolAllocation{{Pool: "b", CIDRs: []string{"fd00::100/120"}}}
	addAllocations(n, added)
	got := n.Spec.IPAM.Pools.Allocated
	if len(got) != 2 || got[0].Pool != "a" || !slices.Equal(got[0].CIDRs, []string{"10.0.0.0/24", "10.0.1.0/24"}) ||
		!slices.Equal(got[1].CIDRs, []string{"fd00::100/120", "fd00::/120"}) {
		t.Errorf("allocated = %+v", got)
	}
}

// A pool's counters are written at most once per StatusDelay per 100 AllotNodes: each write
// reaches every node's agent.
func TestCounterDelay(t *testing.T) {
	st := newState()
	r := &ippoolReconciler{st: st, status: newStatusBatch(time.Second)}
	for _, c := range []struct {
		nodes int
		want  time.Duration
	}{{0, time.Second}, {99, time.Second}, {100, 2 * time.Second}, {5000, 51 * time.Second}} {
		st.mu.Lock()
		st.allot = map[string]*allotHold{}
		for i := range c.nodes {
			st.allot[strconv.Itoa(i)] = &allotHold{}
		}
		st.mu.Unlock()
		if got := r.counterDelay(); got != c.want {
			t.Errorf("%d nodes: counterDelay = %v, want %v", c.nodes, got, c.want)
		}
	}
	b := newStatusBatch(time.Second)
	now := time.Unix(100, 0)
	b.now = func() time.Time { return now }
	b.written("k")
	now = now.Add(2 * time.Second)
	if w := b.waitAtLeast("k", 6*time.Second); w != 4*time.Second {
		t.Errorf("waitAtLeast 6s, 2s after a write = %v, want 4s", w)
	}
	if w := b.waitAtLeast("k", 0); w != -time.Second {
		t.Errorf("waitAtLeast 0 (the batch's 1s), 2s after a write = %v, want -1s", w)
	}
}

// TestResolveDoubt: a live read settles each block of a write in doubt: listed by the object
// (same pool): confirmed; not listed and the object changed since: released (the write's
// resourceVersion precondition can no longer hold); not listed and unchanged: written again.
func TestResolveDoubt(t *testing.T) {
	a, b := netip.MustParsePrefix("10.0.0.0/25"), netip.MustParsePrefix("10.0.0.128/25")
	d := &doubtWrite{rv: "7", blocks: map[netip.Prefix]string{a: "p", b: "p"}}
	type m = map[netip.Prefix]string
	for _, c := range []struct {
		name                       string
		liveRV                     string
		listed                     m
		confirmed, released, retry m
	}{
		{"landed", "8", m{a: "p", b: "p"}, m{a: "p", b: "p"}, m{}, m{}},
		{"landed, agent wrote since", "9", m{a: "p", b: "p", netip.MustParsePrefix("10.1.0.0/24"): "q"}, m{a: "p", b: "p"}, m{}, m{}},
		{"changed without it", "8", m{}, m{}, m{a: "p", b: "p"}, m{}},
		{"unchanged: may be in flight", "7", m{}, m{}, m{}, m{a: "p", b: "p"}},
		{"listed under another pool", "8", m{a: "other", b: "p"}, m{b: "p"}, m{a: "p"}, m{}},
		{"unchanged, other pool listed", "7", m{a: "other"}, m{}, m{}, m{a: "p", b: "p"}},
	} {
		o := resolveDoubt(d, c.liveRV, c.listed)
		for _, f := range []struct {
			what      string
			got, want m
		}{{"confirmed", o.confirmed, c.confirmed}, {"released", o.released, c.released}, {"retry", o.retry, c.retry}} {
			if len(f.got) != len(f.want) {
				t.Errorf("%s: %s = %v; want %v", c.name, f.what, f.got, f.want)
				continue
			}
			for k, v := range f.want {
				if f.got[k] != v {
					t.Errorf("%s: %s = %v; want %v", c.name, f.what, f.got, f.want)
				}
			}
		}
	}
}
