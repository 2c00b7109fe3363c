package operator

import (
	"net/netip"
	"slices"
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
