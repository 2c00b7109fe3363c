package operator

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

func sharedPool(name string, created int, ips ...string) allotv1.SharedIPPool {
	return allotv1.SharedIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 2, CreationTimestamp: metav1.NewTime(time.Unix(int64(created), 0))},
		Spec:       allotv1.SharedIPPoolSpec{IPv4: &allotv1.SharedPoolFamily{Subnet: "10.0.0.0/24", IPs: ips}},
	}
}

func sharedClaim(pool, ip, pod string) allotv1.AddressClaim {
	return allotv1.AddressClaim{Spec: allotv1.AddressClaimSpec{IP: ip, Pool: pool,
		Holder: allotv1.AddressHolder{Namespace: "ns", Pod: pod, Interface: "eth0"}}}
}

// TestDecideSharedPool covers the SharedIPPool reconciler's decision: counts, Ready's reason,
// the problem conditions, their Events and when the finalizer goes.
func TestDecideSharedPool(t *testing.T) {
	now := metav1.Now()
	terminating := sharedPool("p", 1, "10.0.0.10-10.0.0.11")
	terminating.DeletionTimestamp = &now
	disabled := sharedPool("p", 1, "10.0.0.10-10.0.0.11")
	disabled.Spec.Disable = true
	tests := []struct {
		name      string
		pool      allotv1.SharedIPPool
		others    []allotv1.SharedIPPool
		reserved  []string
		claims    []allotv1.AddressClaim
		alloc     int64
		total     int64
		ready     string // Ready's reason
		conds     []string
		events    []string
		release   bool
		noFamilyV bool // IPv4 status absent
	}{
		{name: "free addresses", pool: sharedPool("p", 1, "10.0.0.10-10.0.0.12"),
			claims: []allotv1.AddressClaim{sharedClaim("p", "10.0.0.10", "a")}, alloc: 1, total: 3, ready: allotv1.ReasonValid},
		{name: "reserved addresses do not count", pool: sharedPool("p", 1, "10.0.0.10-10.0.0.12"), reserved: []string{"10.0.0.12"},
			alloc: 0, total: 2, ready: allotv1.ReasonValid},
		{name: "exhausted", pool: sharedPool("p", 1, "10.0.0.10"), claims: []allotv1.AddressClaim{sharedClaim("p", "10.0.0.10", "a")},
			alloc: 1, total: 1, ready: allotv1.ReasonValid, conds: []string{allotv1.ConditionExhausted}, events: []string{allotv1.ConditionExhausted}},
		{name: "address removed while held", pool: sharedPool("p", 1, "10.0.0.11"), claims: []allotv1.AddressClaim{sharedClaim("p", "10.0.0.10", "a")},
			alloc: 1, total: 1, ready: allotv1.ReasonAddressRemovalRefused, events: []string{allotv1.ReasonAddressRemovalRefused}},
		{name: "younger overlapping pool conflicts", pool: sharedPool("p", 2, "10.0.0.10-10.0.0.11"),
			others: []allotv1.SharedIPPool{sharedPool("old", 1, "10.0.0.11")}, alloc: 0, total: 2, ready: allotv1.ReasonOverlap,
			conds: []string{allotv1.ConditionAddressConflict}, events: []string{allotv1.ConditionAddressConflict}},
		{name: "older overlapping pool keeps its addresses", pool: sharedPool("p", 1, "10.0.0.10-10.0.0.11"),
			others: []allotv1.SharedIPPool{sharedPool("young", 2, "10.0.0.11")}, alloc: 0, total: 2, ready: allotv1.ReasonValid},
		{name: "disabled", pool: disabled, alloc: 0, total: 2, ready: allotv1.ReasonInvalid},
		{name: "terminating with holders waits", pool: terminating, claims: []allotv1.AddressClaim{sharedClaim("p", "10.0.0.10", "a")},
			alloc: 1, total: 2, ready: allotv1.ReasonPoolTerminating, conds: []string{allotv1.ConditionDeletionRefused},
			events: []string{allotv1.ConditionDeletionRefused}},
		{name: "terminating without holders is released", pool: terminating, alloc: 0, total: 2, ready: allotv1.ReasonPoolTerminating, release: true},
		{name: "bad claim address ignored", pool: sharedPool("p", 1, "10.0.0.10"), claims: []allotv1.AddressClaim{sharedClaim("p", "nope", "a")},
			alloc: 0, total: 1, ready: allotv1.ReasonValid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pools := append([]allotv1.SharedIPPool{tt.pool}, tt.others...)
			var rips []allotv1.ReservedIP
			if tt.reserved != nil {
				rips = []allotv1.ReservedIP{{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: allotv1.ReservedIPSpec{IPs: tt.reserved}}}
			}
			d := decideSharedPool(&tt.pool, pools, rips, tt.claims)
			if d.release != tt.release {
				t.Fatalf("release = %v, want %v", d.release, tt.release)
			}
			if d.status.ObservedGeneration != 2 {
				t.Errorf("observedGeneration = %d", d.status.ObservedGeneration)
			}
			if fs := d.status.IPv4; fs == nil || fs.AllocatedIPs != tt.alloc || fs.TotalIPs != tt.total {
				t.Errorf("ipv4 = %+v, want %d/%d", fs, tt.alloc, tt.total)
			}
			if d.status.IPv6 != nil {
				t.Errorf("ipv6 = %+v, want none", d.status.IPv6)
			}
			if c := meta.FindStatusCondition(d.status.Conditions, allotv1.ConditionReady); c == nil || c.Reason != tt.ready {
				t.Errorf("Ready = %+v, want reason %s", c, tt.ready)
			}
			var conds []string
			for _, c := range d.status.Conditions {
				if c.Type != allotv1.ConditionReady {
					conds = append(conds, c.Type)
				}
			}
			if strings.Join(conds, ",") != strings.Join(tt.conds, ",") {
				t.Errorf("conditions = %v, want %v", conds, tt.conds)
			}
			var evs []string
			for _, e := range d.events {
				evs = append(evs, e.reason)
			}
			if strings.Join(evs, ",") != strings.Join(tt.events, ",") {
				t.Errorf("events = %v, want %v", evs, tt.events)
			}
		})
	}
}

// TestDecideSharedPoolSteady: a status already showing the problem raises no new Event.
func TestDecideSharedPoolSteady(t *testing.T) {
	pool := sharedPool("p", 1, "10.0.0.10")
	claims := []allotv1.AddressClaim{sharedClaim("p", "10.0.0.10", "a")}
	first := decideSharedPool(&pool, []allotv1.SharedIPPool{pool}, nil, claims)
	pool.Status = *first.status
	again := decideSharedPool(&pool, []allotv1.SharedIPPool{pool}, nil, claims)
	if len(again.events) != 0 {
		t.Fatalf("events on an unchanged pool: %+v", again.events)
	}
	if sharedStatusFingerprint(again.status) != sharedStatusFingerprint(first.status) {
		t.Fatalf("status changed: %+v -> %+v", first.status, again.status)
	}
}
