package spiderpoolpriority

import (
	"fmt"
	"slices"
	"strings"

	"github.com/allot-ipam/allot/sdk/policy"
)

// filterCode says which filter removed a candidate; keep means none did. Reasons are
// formatted only when a NoFit needs them, so a decision that filters many pools stays cheap.
type filterCode uint8

const (
	keep filterCode = iota
	fTerminating
	fDisabled
	fWrongFamily
	fNodeName
	fNodeAffinity
	fNamespaceName
	fNamespaceAffinity
	fPodAffinity
	fMultusNone
	fMultusName
	fAllExcluded
	fAllReserved
	fExhausted
)

// filterPool applies Spiderpool's candidate pool filters in Spiderpool's order and returns the
// first that removes the pool.
func filterPool(req *policy.PodRequest, pv *policy.PoolView, fam policy.Family) filterCode {
	switch {
	case pv.Terminating:
		return fTerminating
	case pv.Disabled:
		return fDisabled
	case pv.Family != fam:
		return fWrongFamily
	}
	// NodeName takes precedence over NodeAffinity: when NodeName is set, NodeAffinity is not
	// consulted (Spiderpool: "nodeName 优先级高于 nodeAffinity"). Same for namespaces.
	if len(pv.NodeName) > 0 {
		if !slices.Contains(pv.NodeName, req.Node.Name) {
			return fNodeName
		}
	} else if !pv.NodeAffinity.Matches(req.Node.Labels) {
		return fNodeAffinity
	}
	if len(pv.NamespaceName) > 0 {
		if !slices.Contains(pv.NamespaceName, req.Pod.Namespace) {
			return fNamespaceName
		}
	} else if !pv.NamespaceAffinity.Matches(req.Namespace.Labels) {
		return fNamespaceAffinity
	}
	if !pv.PodAffinity.Matches(req.Pod.Labels) {
		return fPodAffinity
	}
	if len(pv.MultusName) > 0 {
		if req.CNI.MultusName == "" {
			return fMultusNone
		}
		if !multusMatches(pv.MultusName, req.CNI.MultusName, req.Pod.Namespace) {
			return fMultusName
		}
	}
	switch {
	case pv.AllExcluded:
		return fAllExcluded
	case pv.AllReserved:
		return fAllReserved
	case pv.Free == 0:
		return fExhausted
	}
	return keep
}

// multusMatches compares Multus network names as namespace/name; a name without a namespace
// is in the pod's namespace, as Spiderpool qualifies spec.multusName entries.
func multusMatches(poolNames []string, got, podNS string) bool {
	gotNS, gotName, ok := strings.Cut(got, "/")
	if !ok {
		gotNS, gotName = podNS, got
	}
	for _, n := range poolNames {
		ns, name, ok := strings.Cut(n, "/")
		if !ok {
			ns, name = podNS, n
		}
		if ns == gotNS && name == gotName {
			return true
		}
	}
	return false
}

// filterReason renders why the filter removed the pool, naming the pool and the filter, e.g.
// `pool "v4-a": nodeAffinity does not match node "n1"`.
func filterReason(req *policy.PodRequest, pv *policy.PoolView, fam policy.Family, code filterCode) string {
	var why string
	switch code {
	case fTerminating:
		why = "terminating"
	case fDisabled:
		why = "disabled"
	case fWrongFamily:
		why = fmt.Sprintf("is an %s pool, not %s", pv.Family.Label(), fam.Label())
	case fNodeName:
		why = fmt.Sprintf("nodeName %s does not include node %q", quoteList(pv.NodeName), req.Node.Name)
	case fNodeAffinity:
		why = selectorReason("nodeAffinity", pv.NodeAffinity, fmt.Sprintf("node %q", req.Node.Name))
	case fNamespaceName:
		why = fmt.Sprintf("namespaceName %s does not include namespace %q", quoteList(pv.NamespaceName), req.Pod.Namespace)
	case fNamespaceAffinity:
		why = selectorReason("namespaceAffinity", pv.NamespaceAffinity, fmt.Sprintf("namespace %q", req.Namespace.Name))
	case fPodAffinity:
		why = selectorReason("podAffinity", pv.PodAffinity, fmt.Sprintf("pod %s/%s", req.Pod.Namespace, req.Pod.Name))
	case fMultusNone:
		why = fmt.Sprintf("multusName %s is set but interface %q has no Multus network", quoteList(pv.MultusName), req.CNI.IfName)
	case fMultusName:
		why = fmt.Sprintf("multusName %s does not include Multus network %q", quoteList(pv.MultusName), req.CNI.MultusName)
	case fAllExcluded:
		why = "all addresses are excluded (excludeIPs)"
	case fAllReserved:
		why = "all addresses are reserved (ReservedIP)"
	case fExhausted:
		why = "exhausted (no free address)"
	default:
		why = "kept"
	}
	return fmt.Sprintf("pool %q: %s", pv.Name, why)
}

func selectorReason(field string, sel *policy.LabelSelector, subject string) string {
	if err := sel.Validate(); err != nil {
		return fmt.Sprintf("%s is invalid (%v), so it matches no %s", field, err, strings.SplitN(subject, " ", 2)[0])
	}
	return fmt.Sprintf("%s {%s} does not match %s", field, sel.String(), subject)
}

// Affinity rank bits (Spiderpool's candidate pool sorting): podAffinity highest; then nodeName,
// then nodeAffinity; then namespaceName, then namespaceAffinity; multusName lowest. Comparing
// the sums compares the presence flags lexicographically in that order, which is exactly
// Spiderpool's documented rule and its three examples (and Spiderpool's ByPoolPriority).
const (
	rankPodAffinity       = 1 << 5
	rankNodeName          = 1 << 4
	rankNodeAffinity      = 1 << 3
	rankNamespaceName     = 1 << 2
	rankNamespaceAffinity = 1 << 1
	rankMultusName        = 1 << 0
)

// affinityScore ranks a pool by which affinity kinds it sets. An empty selector counts as
// unset: PoolView documents empty affinities as "any".
func affinityScore(pv *policy.PoolView) int {
	s := 0
	if !pv.PodAffinity.Empty() {
		s |= rankPodAffinity
	}
	if len(pv.NodeName) > 0 {
		s |= rankNodeName
	}
	if !pv.NodeAffinity.Empty() {
		s |= rankNodeAffinity
	}
	if len(pv.NamespaceName) > 0 {
		s |= rankNamespaceName
	}
	if !pv.NamespaceAffinity.Empty() {
		s |= rankNamespaceAffinity
	}
	if len(pv.MultusName) > 0 {
		s |= rankMultusName
	}
	return s
}

// filterCause classifies a filter for a rejection: no free address is Full, every other
// filter says the pool may not serve this pod (Unavailable).
func filterCause(code filterCode) policy.Cause {
	if code == fExhausted {
		return policy.CauseFull
	}
	return policy.CauseUnavailable
}

// rejections says, for allotctl explain (policy.WithDetail), why each pool of fam the
// decision leaves out was left out: the filter that removed a pool the source brought in, or
// that the source did not bring it in. seen marks, by index into req.Pools, the pools it did.
func rejections(req *policy.PodRequest, src *source, fam policy.Family, cs []cand, seen []uint64) []policy.Rejection {
	var out []policy.Rejection
	for _, c := range cs {
		if c.filter != keep {
			pv := &req.Pools[c.idx]
			out = append(out, policy.Rejection{Pool: pv.Name, Family: fam, Cause: filterCause(c.filter),
				Reason: filterReason(req, pv, fam, c.filter)})
		}
	}
	for i := range req.Pools {
		pv := &req.Pools[i]
		if pv.Family != fam || seen[i/64]&(1<<(i%64)) != 0 {
			continue
		}
		out = append(out, policy.Rejection{Pool: pv.Name, Family: fam, Cause: policy.CauseNoMatch,
			Reason: fmt.Sprintf("pool %q: not among the pools of %s", pv.Name, src.name)})
	}
	return out
}
