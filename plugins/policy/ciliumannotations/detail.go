package ciliumannotations

import (
	"fmt"
	"maps"

	"github.com/allot-ipam/allot/sdk/policy"
)

// rejected says, for allotctl explain (policy.WithDetail), why each pool the decision does not
// name was left out: its selectors do not match the pod, or another rule (an annotation, the
// selectors of another pool, the pool "default") chose for that family.
func rejected(req *policy.PodRequest, d policy.PodDecision) []policy.Rejection {
	labels := make(map[string]string, len(req.Pod.Labels)+2)
	maps.Copy(labels, req.Pod.Labels)
	labels[PodNamespaceLabel] = req.Pod.Namespace
	labels[PodNameLabel] = req.Pod.Name
	var out []policy.Rejection
	for i := range req.Pools {
		v := &req.Pools[i]
		if d.Names(v.Name, v.Family) {
			continue
		}
		cands := d.IPv4
		if v.Family == policy.IPv6 {
			cands = d.IPv6
		}
		r := policy.Rejection{Pool: v.Name, Family: v.Family, Cause: policy.CauseNoMatch}
		switch {
		case v.PodAffinity != nil && !v.PodAffinity.Matches(labels):
			r.Reason = fmt.Sprintf("podAffinity {%s} does not match pod %s/%s", v.PodAffinity.String(), req.Pod.Namespace, req.Pod.Name)
		case v.NamespaceAffinity != nil && !v.NamespaceAffinity.Matches(req.Namespace.Labels):
			r.Reason = fmt.Sprintf("namespaceAffinity {%s} does not match namespace %q", v.NamespaceAffinity.String(), req.Namespace.Name)
		case d.Code == policy.Decided && len(cands) > 0:
			r.Reason = fmt.Sprintf("%s chose pool %q for %s", d.Source, cands[0].Pool, v.Family.Label())
		case d.Code == policy.Decided:
			r.Reason = fmt.Sprintf("the pod gets no %s address (%s)", v.Family.Label(), d.Source)
		default:
			r.Reason = "no rule chose it: " + d.Reason
		}
		out = append(out, r)
	}
	return out
}
