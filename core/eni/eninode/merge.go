package eninode

import (
	"encoding/json"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// AnnotationAppliedENI holds, as JSON, the spec.eni the agent last wrote from its
// configuration: the base of MergeSpec's three-way merge.
const AnnotationAppliedENI = "allot.io/eni-applied"

// MergeSpec merges the agent's configuration (desired) into n's spec.eni field by field, as
// kubectl apply's three-way merge does (kubernetes.io/docs/tasks/manage-kubernetes-objects/
// declarative-config/): a field takes the desired value while its current value is still
// the one the agent last wrote (AnnotationAppliedENI; for an object without the annotation,
// while it is unset); a field someone set, changed or removed by hand keeps what they did,
// until they put the agent's value back. The annotation then records desired. It returns
// the merged spec and whether n changed; n is changed in place.
func MergeSpec(n *allotv1.AllotNode, desired *allotv1.NodeENISpec) (*allotv1.NodeENISpec, bool, error) {
	want, err := specFields(desired)
	if err != nil {
		return nil, false, err
	}
	cur, err := specFields(n.Spec.ENI)
	if err != nil {
		return nil, false, err
	}
	out := mergeFields(want, cur, lastApplied(n))
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, false, fmt.Errorf("eninode: spec.eni: %w", err)
	}
	merged := &allotv1.NodeENISpec{}
	if err := json.Unmarshal(raw, merged); err != nil {
		return nil, false, fmt.Errorf("eninode: spec.eni: %w", err)
	}
	applied, err := json.Marshal(want)
	if err != nil {
		return nil, false, fmt.Errorf("eninode: spec.eni: %w", err)
	}
	changed := false
	if !equality.Semantic.DeepEqual(n.Spec.ENI, merged) {
		n.Spec.ENI = merged
		changed = true
	}
	if n.Annotations[AnnotationAppliedENI] != string(applied) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[AnnotationAppliedENI] = string(applied)
		changed = true
	}
	return merged, changed, nil
}

// lastApplied is the spec.eni the agent wrote last, from its annotation. A damaged annotation
// reads as empty: every set field then counts as hand-made and is never overwritten.
func lastApplied(n *allotv1.AllotNode) map[string]json.RawMessage {
	last := map[string]json.RawMessage{}
	if s, ok := n.Annotations[AnnotationAppliedENI]; ok {
		if err := json.Unmarshal([]byte(s), &last); err != nil {
			return map[string]json.RawMessage{}
		}
	}
	return last
}

// mergeFields is the three-way merge of spec.eni's fields: a field whose current value is the
// one last applied follows the desired configuration (set or removed); any other field was set,
// changed or removed by hand and is kept as it is.
func mergeFields(want, cur, last map[string]json.RawMessage) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, v := range cur {
		out[k] = v
	}
	keys := map[string]bool{}
	for _, m := range []map[string]json.RawMessage{want, cur, last} {
		for k := range m {
			keys[k] = true
		}
	}
	for k := range keys {
		if !sameJSON(cur[k], last[k]) {
			continue
		}
		if v, ok := want[k]; ok {
			out[k] = v
		} else {
			delete(out, k)
		}
	}
	return out
}

// specFields is spec.eni as its set JSON fields (omitempty leaves unset ones out).
func specFields(s *allotv1.NodeENISpec) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if s == nil {
		return out, nil
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("eninode: spec.eni: %w", err)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("eninode: spec.eni: %w", err)
	}
	return out, nil
}

// sameJSON compares two JSON values (absent = nil) by meaning, not by spelling.
func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
