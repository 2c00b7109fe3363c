package operator

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// TestDecideConfig covers the ClusterCIDRConfig reconciler's decision: counts, Ready's
// reason (a config that serves no node says why), Exhausted, DeletionRefused with its
// refusal, and when the finalizer goes.
func TestDecideConfig(t *testing.T) {
	now := metav1.Now()
	good := ccc("a", 1, "10.0.0.0/22", 24, "", 0)
	terminating := good
	terminating.DeletionTimestamp = &now
	parse := func(c allotv1.ClusterCIDRConfig) (*cccParsed, verdict) {
		parsed, bad := configVerdicts([]allotv1.ClusterCIDRConfig{c}, nil)
		return parsed[c.Name], bad[c.Name]
	}
	tests := []struct {
		name     string
		cfg      allotv1.ClusterCIDRConfig
		invalid  bool // judge as not parsed
		snap     configSnapshot
		alloc    int64
		total    int64
		ready    string
		conds    []string
		events   []string
		refusals []string
		release  bool
	}{
		{name: "serving", cfg: good, snap: configSnapshot{holders: []string{"n1"}, free: 3}, alloc: 1, total: 4, ready: allotv1.ReasonValid},
		{name: "full", cfg: good, snap: configSnapshot{holders: []string{"n1", "n2", "n3", "n4"}}, alloc: 4, total: 4, ready: allotv1.ReasonValid,
			conds: []string{allotv1.ConditionExhausted}, events: []string{allotv1.ConditionExhausted}, refusals: []string{""}},
		{name: "not judged yet", cfg: good, invalid: true, ready: allotv1.ReasonInvalid, events: []string{allotv1.ReasonInvalid}, refusals: []string{""}},
		{name: "terminating while held", cfg: terminating, snap: configSnapshot{holders: []string{"n1"}, free: 3}, alloc: 1, total: 4,
			ready: allotv1.ReasonPoolTerminating, conds: []string{allotv1.ConditionDeletionRefused},
			events: []string{allotv1.ConditionDeletionRefused}, refusals: []string{refusalConfigDeletion}},
		{name: "terminating, unheld: released", cfg: terminating, snap: configSnapshot{free: 4}, total: 4, ready: allotv1.ReasonPoolTerminating, release: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, bv := parse(tt.cfg)
			if tt.invalid {
				p, bv = nil, verdict{}
			}
			d := decideConfig(&tt.cfg, p, bv, tt.snap)
			if d.release != tt.release || d.status.AllocatedBlocks != tt.alloc || d.status.TotalBlocks != tt.total {
				t.Errorf("release %v, blocks %d of %d; want %v, %d of %d", d.release, d.status.AllocatedBlocks, d.status.TotalBlocks,
					tt.release, tt.alloc, tt.total)
			}
			if c := meta.FindStatusCondition(d.status.Conditions, allotv1.ConditionReady); c == nil || c.Reason != tt.ready {
				t.Errorf("Ready = %+v, want %s", c, tt.ready)
			}
			var conds, evs, refusals []string
			for _, c := range d.status.Conditions {
				if c.Type != allotv1.ConditionReady {
					conds = append(conds, c.Type)
				}
			}
			for _, e := range d.events {
				evs, refusals = append(evs, e.reason), append(refusals, e.refusal)
			}
			if strings.Join(conds, ",") != strings.Join(tt.conds, ",") || strings.Join(evs, ",") != strings.Join(tt.events, ",") ||
				strings.Join(refusals, ",") != strings.Join(tt.refusals, ",") {
				t.Errorf("conditions %v events %v refusals %q; want %v %v %q", conds, evs, refusals, tt.conds, tt.events, tt.refusals)
			}
		})
	}
}
