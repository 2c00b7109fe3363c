package operator

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
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

// TestWaitVerdict: why a node gets no pod CIDR, as the condition, the refusal and the message
// say it.
func TestWaitVerdict(t *testing.T) {
	tests := []struct {
		name     string
		d        policy.NodeDecision
		unusable []string
		reason   string
		refusal  string
		msg      string // contained
	}{
		{"no match", policy.NodeDecision{Code: policy.NoFit, Reason: "no ClusterCIDRConfig matches node labels: x"}, nil,
			allotv1.ReasonNoMatchingConfig, refusalNoMatch, "no ClusterCIDRConfig matches"},
		{"all full", policy.NodeDecision{Code: policy.NoFit, Cause: policy.CauseFull, Reason: "every ClusterCIDRConfig matching the node is full: a"}, nil,
			allotv1.ReasonAllConfigsFull, "", "is full"},
		{"filled up while carving", policy.NodeDecision{Code: policy.Decided, Configs: []string{"a", "b"}}, nil,
			allotv1.ReasonAllConfigsFull, "", `a, b matched node "n1" but filled up`},
		{"no opinion", policy.NodeDecision{Code: policy.Skip}, nil, allotv1.ReasonNoMatchingConfig, refusalNoMatch, "had no opinion"},
		{"unusable configs named", policy.NodeDecision{Code: policy.NoFit}, []string{`"c" (Invalid: bad)`},
			allotv1.ReasonNoMatchingConfig, refusalNoMatch, `matching configs that serve no node: "c" (Invalid: bad)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, refusal, msg := waitVerdict(tt.d, "n1", tt.unusable)
			if reason != tt.reason || refusal != tt.refusal || !strings.Contains(msg, tt.msg) {
				t.Errorf("waitVerdict = %s, %q, %q; want %s, %q, containing %q", reason, refusal, msg, tt.reason, tt.refusal, tt.msg)
			}
		})
	}
}

// TestPodCIDRNode: the Node written carries both families' blocks, the first as spec.podCIDR,
// and the config's annotation; the Node read is left as it was.
func TestPodCIDRNode(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	upd := podCIDRNode(n, prefixes("10.0.1.0/24", "fd00::100/120"), "a")
	if upd.Spec.PodCIDR != "10.0.1.0/24" || strings.Join(upd.Spec.PodCIDRs, ",") != "10.0.1.0/24,fd00::100/120" ||
		upd.Annotations[allotv1.AnnotationClusterCIDRConfig] != "a" {
		t.Errorf("node = %+v %v", upd.Spec, upd.Annotations)
	}
	if n.Spec.PodCIDR != "" || n.Annotations != nil {
		t.Errorf("the Node read changed: %+v", n)
	}
}

// TestCandidateConfigs: terminating and invalid configs are no candidates; an invalid one
// that matches the node is named.
func TestCandidateConfigs(t *testing.T) {
	cfgs := []allotv1.ClusterCIDRConfig{ccc("a", 1, "10.0.0.0/16", 24, "", 0), ccc("b", 2, "10.1.0.0/16", 24, "", 0),
		ccc("bad", 3, "10.2.0.0/16", 8, "", 0)}
	parsed, bad := configVerdicts(cfgs, nil)
	views, unusable := candidateConfigs(cfgs, parsed, bad, nil, map[string]bool{"ccc/b": true}, func(*cccParsed) uint64 { return 7 })
	if len(views) != 1 || views[0].Name != "a" || views[0].FreeBlocks != 7 {
		t.Errorf("views = %+v", views)
	}
	if len(unusable) != 1 || !strings.HasPrefix(unusable[0], `"bad" (`) {
		t.Errorf("unusable = %v", unusable)
	}
}
