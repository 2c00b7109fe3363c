package operator

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// TestAdvanceStale covers the collector's grace-period bookkeeping: an item is due once it
// stayed stale and unchanged for the grace period; a change restarts the wait; an item no
// longer stale loses its mark; claims are freed before endpoints.
func TestAdvanceStale(t *testing.T) {
	t0 := time.Unix(1000, 0)
	grace := 30 * time.Second
	claim := func(name, rv string) *gcItem {
		return &gcItem{kind: gcKindClaim, key: "claim/" + name, obj: &allotv1.AddressClaim{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}}
	}
	ep := func(name, rv string) *gcItem {
		return &gcItem{kind: gcKindEndpoint, key: "aep/ns/" + name, obj: &allotv1.AllotEndpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}}
	}
	index := func(its ...*gcItem) map[string]*gcItem {
		m := map[string]*gcItem{}
		for _, it := range its {
			m[it.key] = it
		}
		return m
	}
	tests := []struct {
		name     string
		prev     map[string]*staleMark
		stale    map[string]string
		items    map[string]*gcItem
		now      time.Time
		due      []string
		marks    []string
		sinceNow []string // marks whose wait (re)started now
	}{
		{name: "first seen: wait", stale: map[string]string{"claim/a": gcPodGone}, items: index(claim("a", "1")), now: t0,
			marks: []string{"claim/a"}, sinceNow: []string{"claim/a"}},
		{name: "stale for the grace period: due", prev: map[string]*staleMark{"claim/a": {rv: "1", since: t0}},
			stale: map[string]string{"claim/a": gcPodGone}, items: index(claim("a", "1")), now: t0.Add(grace),
			due: []string{"claim/a"}, marks: []string{"claim/a"}},
		{name: "changed: the wait restarts", prev: map[string]*staleMark{"claim/a": {rv: "1", since: t0}},
			stale: map[string]string{"claim/a": gcPodGone}, items: index(claim("a", "2")), now: t0.Add(grace),
			marks: []string{"claim/a"}, sinceNow: []string{"claim/a"}},
		{name: "no longer stale: mark dropped", prev: map[string]*staleMark{"claim/a": {rv: "1", since: t0}},
			items: index(claim("a", "1")), now: t0.Add(grace)},
		{name: "claims before endpoints", prev: map[string]*staleMark{"aep/ns/a": {rv: "1", since: t0}, "claim/z": {rv: "1", since: t0}, "claim/b": {rv: "1", since: t0}},
			stale: map[string]string{"aep/ns/a": gcPodGone, "claim/z": gcPodGone, "claim/b": gcDuplicate},
			items: index(ep("a", "1"), claim("z", "1"), claim("b", "1")), now: t0.Add(time.Hour),
			due: []string{"claim/b", "claim/z", "aep/ns/a"}, marks: []string{"aep/ns/a", "claim/b", "claim/z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, due := advanceStale(tt.prev, tt.stale, tt.items, tt.now, grace)
			if !slices.Equal(due, tt.due) {
				t.Errorf("due = %v, want %v", due, tt.due)
			}
			if got := keys(next); !slices.Equal(got, tt.marks) && (len(got) > 0 || len(tt.marks) > 0) {
				t.Errorf("marks = %v, want %v", got, tt.marks)
			}
			for _, k := range tt.sinceNow {
				if !next[k].since.Equal(tt.now) {
					t.Errorf("%s: wait started %v, want now", k, next[k].since)
				}
			}
			for k, m := range next {
				if m.reason != tt.stale[k] {
					t.Errorf("%s: reason %q, want %q", k, m.reason, tt.stale[k])
				}
			}
		})
	}
}

// TestHolderVerdicts covers the pure verdicts the collector's reads feed.
func TestHolderVerdicts(t *testing.T) {
	ready := node("n1")
	ready.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	past := metav1.NewTime(time.Unix(1000, 0))
	stuck := pod("ns", "a", "u1", "n1", corev1.PodRunning, "")
	stuck.DeletionTimestamp = &past
	pol := gcPolicy{now: func() time.Time { return time.Unix(2000, 0) }, terminatingReady: true}
	h := gcHolder{ns: "ns", pod: "a", uid: "u1", node: "n1"}
	if got := statefulSetVerdict(gcHolder{pod: "web-3", sts: "web"}, sts("ns", "web", 3, 0)); got != gcStsScaledDown {
		t.Errorf("web-3 of 3 replicas: %q", got)
	}
	if got := statefulSetVerdict(gcHolder{pod: "web-3", sts: "web"}, sts("ns", "web", 3, 1)); got != "" {
		t.Errorf("web-3 of ordinals 1..3: %q", got)
	}
	if got := statefulSetVerdict(gcHolder{pod: "web-1", sts: "web"}, nil); got != gcStsGone {
		t.Errorf("StatefulSet gone: %q", got)
	}
	if r, decided := podVerdict(h, nil); r != gcPodGone || !decided {
		t.Errorf("pod gone: %q %v", r, decided)
	}
	if r, decided := podVerdict(h, pod("ns", "a", "u1", "n1", corev1.PodRunning, "")); r != "" || decided {
		t.Errorf("live pod: %q %v", r, decided)
	}
	if got := holderNodeVerdict(stuck, true, nil, pol); got != gcNodeGone {
		t.Errorf("node gone: %q", got)
	}
	if got := holderNodeVerdict(stuck, true, ready, pol); got != gcTerminating {
		t.Errorf("stuck on a Ready node: %q", got)
	}
	if got := holderNodeVerdict(stuck, true, node("n1"), pol); got != "" {
		t.Errorf("stuck on a NotReady node, switched off: %q", got)
	}
}
