package ipam

import (
	"fmt"

	"github.com/allot-ipam/allot/sdk/policy"
)

// PoolSelection are the fields of a cluster pool's object that pool policies select on
// (IPPool: default, affinities, and whether it is being deleted; spec.disable is
// SetPoolDisabled's, which also enforces it). Cilium's
// multi-pool podSelector and namespaceSelector are the podAffinity and namespaceAffinity
// read here (plugins/policy/ciliumannotations).
type PoolSelection struct {
	Default, Terminating bool
	NodeName             []string
	NodeAffinity         *policy.LabelSelector
	NamespaceName        []string
	NamespaceAffinity    *policy.LabelSelector
	PodAffinity          *policy.LabelSelector
	MultusName           []string
}

// SetPoolSelection sets what the policy sees of dynamic pool name, family fam, beyond its
// addresses (the zero value: nothing). Kept while the pool is dropped and registered again.
func (m *Manager) SetPoolSelection(name string, fam policy.Family, s PoolSelection) error {
	if m.opts.Dynamic == nil {
		return ErrNotDynamic
	}
	if !fam.Valid() {
		return fmt.Errorf("ipam: pool %q: invalid family %q", name, fam)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.selection == nil {
		m.selection = map[poolKey]PoolSelection{}
	}
	m.selection[poolKey{name, fam}] = s
	return nil
}

// applySelectionLocked copies pool k's selection fields into its view.
func (m *Manager) applySelectionLocked(k poolKey, v *policy.PoolView) {
	s, ok := m.selection[k]
	if !ok {
		return
	}
	v.Default = v.Default || s.Default
	v.Terminating = s.Terminating
	v.NodeName, v.NodeAffinity = s.NodeName, s.NodeAffinity
	v.NamespaceName, v.NamespaceAffinity = s.NamespaceName, s.NamespaceAffinity
	v.PodAffinity, v.MultusName = s.PodAffinity, s.MultusName
}
