package wire

import (
	"slices"

	"github.com/allot-ipam/allot/sdk/policy"
)

// PoolSnapshot is a private copy of a pool view a transport has sent, kept to learn whether
// the next request's view at the same place would encode to the same pool record apart from
// its free count, without encoding it (the pool references of the WASM transport and of
// sdk/pluginrpc: pools change rarely, free counts on every allocation).
//
// The copy is deep, so a caller changing its views in place later cannot change it. Its
// selectors' label maps are also kept as lists of pairs: comparing a map with a list takes
// one lookup per pair, where comparing two maps (maps.Equal) starts an iteration, which
// costs more than the rest of a pool's comparison.
type PoolSnapshot struct {
	view   policy.PoolView
	labels [3][]labelPair // MatchLabels of NodeAffinity, NamespaceAffinity, PodAffinity
}

type labelPair struct{ k, v string }

// SnapshotPool returns a snapshot of v.
func SnapshotPool(v *policy.PoolView) PoolSnapshot {
	s := PoolSnapshot{view: *v}
	c := &s.view
	c.CIDRs = slices.Clone(v.CIDRs)
	c.Excluded, c.Reserved = slices.Clone(v.Excluded), slices.Clone(v.Reserved)
	c.NodeName, c.NamespaceName = slices.Clone(v.NodeName), slices.Clone(v.NamespaceName)
	c.MultusName = slices.Clone(v.MultusName)
	c.NodeAffinity, s.labels[0] = cloneSelector(v.NodeAffinity)
	c.NamespaceAffinity, s.labels[1] = cloneSelector(v.NamespaceAffinity)
	c.PodAffinity, s.labels[2] = cloneSelector(v.PodAffinity)
	return s
}

// View is the snapshot's copy of the view; the caller must not change it.
func (s *PoolSnapshot) View() *policy.PoolView { return &s.view }

// Same reports whether v encodes to the same pool record as the snapshot apart from Free
// (TestPoolSnapshotCoversEveryField keeps it in step with policy.PoolView). Cheap fields
// are compared first: a pool that changed usually differs in one of them.
func (s *PoolSnapshot) Same(v *policy.PoolView) bool {
	a := &s.view
	return a.Family == v.Family && a.Total == v.Total && a.Default == v.Default &&
		a.Disabled == v.Disabled && a.Terminating == v.Terminating &&
		a.AllExcluded == v.AllExcluded && a.AllReserved == v.AllReserved &&
		a.Name == v.Name && a.Subnet == v.Subnet &&
		slices.Equal(a.CIDRs, v.CIDRs) && slices.Equal(a.Excluded, v.Excluded) &&
		slices.Equal(a.Reserved, v.Reserved) && slices.Equal(a.NodeName, v.NodeName) &&
		slices.Equal(a.NamespaceName, v.NamespaceName) && slices.Equal(a.MultusName, v.MultusName) &&
		sameSelector(a.NodeAffinity, s.labels[0], v.NodeAffinity) &&
		sameSelector(a.NamespaceAffinity, s.labels[1], v.NamespaceAffinity) &&
		sameSelector(a.PodAffinity, s.labels[2], v.PodAffinity)
}

// sameSelector compares the snapshot's selector a (whose MatchLabels are pairs) with b. A
// nil and an empty selector differ (an empty one is encoded, as an empty message); nil and
// empty maps and lists do not (neither is encoded).
func sameSelector(a *policy.LabelSelector, pairs []labelPair, b *policy.LabelSelector) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(pairs) != len(b.MatchLabels) {
		return false
	}
	for _, p := range pairs {
		if v, ok := b.MatchLabels[p.k]; !ok || v != p.v {
			return false
		}
	}
	return slices.EqualFunc(a.MatchExpressions, b.MatchExpressions, func(x, y policy.Requirement) bool {
		return x.Key == y.Key && x.Operator == y.Operator && slices.Equal(x.Values, y.Values)
	})
}

// cloneSelector copies s deeply and lists its MatchLabels as pairs.
func cloneSelector(s *policy.LabelSelector) (*policy.LabelSelector, []labelPair) {
	if s == nil {
		return nil, nil
	}
	c := &policy.LabelSelector{MatchExpressions: slices.Clone(s.MatchExpressions)}
	for i := range c.MatchExpressions {
		c.MatchExpressions[i].Values = slices.Clone(c.MatchExpressions[i].Values)
	}
	var pairs []labelPair
	if len(s.MatchLabels) > 0 {
		c.MatchLabels = make(map[string]string, len(s.MatchLabels))
		pairs = make([]labelPair, 0, len(s.MatchLabels))
		for k, v := range s.MatchLabels {
			c.MatchLabels[k] = v
			pairs = append(pairs, labelPair{k, v})
		}
	}
	return c, pairs
}
