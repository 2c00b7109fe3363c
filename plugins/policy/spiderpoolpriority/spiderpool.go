// Package spiderpoolpriority chooses a pod's pools the way Spiderpool does: candidate pools
// from the first of five sources that applies (subnet annotation, pool annotation, namespace
// defaults, CNI config defaults, cluster default pools), then filters (terminating, disabled,
// node, namespace, pod and Multus affinity, fully excluded, fully reserved, exhausted), then
// ordering by affinity kind. Per family and per interface.
package spiderpoolpriority

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/allot-ipam/allot/sdk/policy"
)

// Name is the policy's registry name.
const Name = "spiderpool-priority"

// Sources, as they appear in PodDecision.Source, highest priority first.
const (
	SourceSubnets        = "pod annotation " + AnnoSubnets
	SourceSubnet         = "pod annotation " + AnnoSubnet
	SourceIPPools        = "pod annotation " + AnnoIPPools
	SourceIPPool         = "pod annotation " + AnnoIPPool
	SourceNamespace      = "namespace annotations " + AnnoNSDefaultIPv4 + " / " + AnnoNSDefaultIPv6
	SourceCNIConfig      = "CNI config default_ipv4_ippool / default_ipv6_ippool"
	SourceClusterDefault = "cluster default pools"
)

// Policy implements Spiderpool's candidate/filter/order pipeline. It is stateless.
type Policy struct {
	policy.PodOnly
	cache *parseCache
}

var _ policy.PoolPolicy = (*Policy)(nil)

// New returns the policy. It has no configuration.
func New() *Policy { return &Policy{cache: &parseCache{}} }

// FromConfig is the registry factory. The policy takes no configuration, so any key is an
// error naming that key.
func FromConfig(cfg map[string]any) (policy.PoolPolicy, error) {
	if len(cfg) > 0 {
		keys := make([]string, 0, len(cfg))
		for k := range cfg {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return nil, fmt.Errorf("%s: config field %q: unknown field (this policy takes no configuration)", Name, keys[0])
	}
	return New(), nil
}

type sourceKind int

const (
	kindPools          sourceKind = iota // names are pool names or patterns
	kindSubnets                          // names are subnet names or patterns
	kindClusterDefault                   // every pool with Default set
)

type source struct {
	name   string
	kind   sourceKind
	v4, v6 []string
}

// SelectPodPools implements policy.PoolPolicy.
func (p *Policy) SelectPodPools(ctx context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	if req.CNI.MultusName == "" {
		if name := multusNetwork(req.Pod.Annotations, req.CNI.IfName); name != "" {
			r := *req
			r.CNI.MultusName = name
			req = &r
		}
	}
	src, stop := p.pickSource(req)
	if stop != nil {
		return *stop, nil
	}
	d := policy.PodDecision{Code: policy.Decided, Source: src.name}
	var rej *[]policy.Rejection // per-pool reasons, only when asked (allotctl explain)
	if policy.DetailWanted(ctx) {
		rej = &d.Rejected
	}
	var reason string
	var cause policy.Cause
	if src.kind == kindClusterDefault || len(src.v4) > 0 {
		if d.IPv4, reason, cause = resolve(req, &src, policy.IPv4, src.v4, rej); reason != "" {
			nf := noFit(src.name, cause, reason)
			nf.Rejected = d.Rejected
			return *nf, nil
		}
	}
	if src.kind == kindClusterDefault || len(src.v6) > 0 {
		if d.IPv6, reason, cause = resolve(req, &src, policy.IPv6, src.v6, rej); reason != "" {
			nf := noFit(src.name, cause, reason)
			nf.Rejected = d.Rejected
			return *nf, nil
		}
	}
	return d, nil
}

// pickSource applies the five sources in strict priority (Spiderpool's candidate pool
// acquisition): the first that applies overrides all later ones. A malformed source is NoFit,
// not a fall-through: the user asked for something and must learn it is broken.
func (p *Policy) pickSource(req *policy.PodRequest) (source, *policy.PodDecision) {
	ifName := req.CNI.IfName
	ann := req.Pod.Annotations

	// Priority 1: SpiderSubnet annotation; "subnets" is read before "subnet" (Spiderpool).
	if v, ok := ann[AnnoSubnets]; ok {
		r := p.cache.get(kSubnets, v)
		sels, err := r.sels, r.err
		if err != nil {
			return source{}, noFit(SourceSubnets, policy.CauseInvalid, fmt.Sprintf("pod annotation %s is invalid: %v", AnnoSubnets, err))
		}
		sel, found := forInterface(sels, ifName)
		if !found {
			return source{}, noFit(SourceSubnets, policy.CauseNoMatch, fmt.Sprintf("pod annotation %s has no entry for interface %q", AnnoSubnets, ifName))
		}
		return source{name: SourceSubnets, kind: kindSubnets, v4: sel.IPv4, v6: sel.IPv6}, nil
	}
	if v, ok := ann[AnnoSubnet]; ok {
		r := p.cache.get(kSubnet, v)
		sel, err := r.sel, r.err
		if err != nil {
			return source{}, noFit(SourceSubnet, policy.CauseInvalid, fmt.Sprintf("pod annotation %s is invalid: %v", AnnoSubnet, err))
		}
		if sel.Interface != "" && sel.Interface != ifName {
			return source{}, noFit(SourceSubnet, policy.CauseNoMatch, fmt.Sprintf("pod annotation %s is for interface %q, not %q", AnnoSubnet, sel.Interface, ifName))
		}
		return source{name: SourceSubnet, kind: kindSubnets, v4: sel.IPv4, v6: sel.IPv6}, nil
	}

	// Priority 2: SpiderIPPool annotation; "ippools" has precedence over "ippool".
	if v, ok := ann[AnnoIPPools]; ok {
		r := p.cache.get(kIPPools, v)
		sels, err := r.sels, r.err
		if err != nil {
			return source{}, noFit(SourceIPPools, policy.CauseInvalid, fmt.Sprintf("pod annotation %s is invalid: %v", AnnoIPPools, err))
		}
		sel, found := forInterface(sels, ifName)
		if !found {
			return source{}, noFit(SourceIPPools, policy.CauseNoMatch, fmt.Sprintf("pod annotation %s has no entry for interface %q", AnnoIPPools, ifName))
		}
		return source{name: SourceIPPools, kind: kindPools, v4: sel.IPv4, v6: sel.IPv6}, nil
	}
	if v, ok := ann[AnnoIPPool]; ok {
		r := p.cache.get(kIPPool, v)
		sel, err := r.sel, r.err
		if err != nil {
			return source{}, noFit(SourceIPPool, policy.CauseInvalid, fmt.Sprintf("pod annotation %s is invalid: %v", AnnoIPPool, err))
		}
		if sel.Interface != "" && sel.Interface != ifName {
			return source{}, noFit(SourceIPPool, policy.CauseNoMatch, fmt.Sprintf("pod annotation %s is for interface %q, not %q", AnnoIPPool, sel.Interface, ifName))
		}
		return source{name: SourceIPPool, kind: kindPools, v4: sel.IPv4, v6: sel.IPv6}, nil
	}

	// Priority 3: namespace default pools. Applies when either family is set (non-empty).
	var ns source
	for _, a := range []struct {
		key string
		dst *[]string
	}{{AnnoNSDefaultIPv4, &ns.v4}, {AnnoNSDefaultIPv6, &ns.v6}} {
		v, ok := req.Namespace.Annotations[a.key]
		if !ok {
			continue
		}
		r := p.cache.get(kNSDefault, v)
		names, err := r.names, r.err
		if err != nil {
			return source{}, noFit(SourceNamespace, policy.CauseInvalid, fmt.Sprintf("namespace %q annotation %s is invalid: %v", req.Namespace.Name, a.key, err))
		}
		*a.dst = names
	}
	if len(ns.v4) > 0 || len(ns.v6) > 0 {
		ns.name, ns.kind = SourceNamespace, kindPools
		return ns, nil
	}

	// Priority 4: CNI config default_ipv4_ippool / default_ipv6_ippool, tried in array order.
	if len(req.CNI.DefaultIPv4Pools) > 0 || len(req.CNI.DefaultIPv6Pools) > 0 {
		for i, n := range req.CNI.DefaultIPv4Pools {
			if err := validateName(n, "pool"); err != nil {
				return source{}, noFit(SourceCNIConfig, policy.CauseInvalid, fmt.Sprintf("CNI config default_ipv4_ippool[%d]: %v", i, err))
			}
		}
		for i, n := range req.CNI.DefaultIPv6Pools {
			if err := validateName(n, "pool"); err != nil {
				return source{}, noFit(SourceCNIConfig, policy.CauseInvalid, fmt.Sprintf("CNI config default_ipv6_ippool[%d]: %v", i, err))
			}
		}
		return source{name: SourceCNIConfig, kind: kindPools, v4: req.CNI.DefaultIPv4Pools, v6: req.CNI.DefaultIPv6Pools}, nil
	}

	// Priority 5: cluster default pools (spec.default: true).
	for i := range req.Pools {
		if req.Pools[i].Default {
			return source{name: SourceClusterDefault, kind: kindClusterDefault}, nil
		}
	}
	return source{}, &policy.PodDecision{Code: policy.Skip,
		Reason: "no subnet or pool annotation on the pod, no namespace or CNI config default pools, and no cluster default pool"}
}

func forInterface(sels []Selection, ifName string) (Selection, bool) {
	for _, s := range sels {
		if s.Interface == ifName {
			return s, true
		}
	}
	return Selection{}, false
}

func noFit(src string, cause policy.Cause, reason string) *policy.PodDecision {
	return &policy.PodDecision{Code: policy.NoFit, Cause: cause, Source: src, Reason: reason}
}

// cand is one pool under consideration for one family.
type cand struct {
	idx    int // index into req.Pools
	order  int // position after expansion: the source's order
	score  int // affinity rank, higher first
	filter filterCode
}

// resolve expands the source's names for one family into pools, filters and orders them.
// It returns the ordered candidates, or a NoFit reason and its cause. With rej, it appends why
// each other pool of the family was left out.
func resolve(req *policy.PodRequest, src *source, fam policy.Family, names []string, rej *[]policy.Rejection) ([]policy.Candidate, string, policy.Cause) {
	var buf [32]cand
	cs := buf[:0]
	// seen is a bitset over req.Pools, on the stack for up to 256 pools.
	var seenBuf [4]uint64
	seen := seenBuf[:]
	if n := (len(req.Pools) + 63) / 64; n > len(seen) {
		seen = make([]uint64, n)
	}
	add := func(idx int) {
		w, b := idx/64, uint64(1)<<(idx%64)
		if seen[w]&b == 0 {
			seen[w] |= b
			cs = append(cs, cand{idx: idx, order: len(cs)})
		}
	}
	// Pools a pattern, a subnet or the cluster default flag brings in are ordered by name,
	// explicitly: the answer must not depend on the order the host listed pools in.
	sortFrom := func(start int) {
		group := cs[start:]
		slices.SortFunc(group, func(a, b cand) int {
			return strings.Compare(req.Pools[a.idx].Name, req.Pools[b.idx].Name)
		})
		for i := range group {
			group[i].order = start + i
		}
	}

	switch src.kind {
	case kindClusterDefault:
		for i := range req.Pools {
			if req.Pools[i].Default && req.Pools[i].Family == fam {
				add(i)
			}
		}
		sortFrom(0)
		if len(cs) == 0 {
			// Cluster defaults exist, but none of this family: the family is not wanted.
			return nil, "", 0
		}
	case kindSubnets:
		for _, pat := range names {
			start := len(cs)
			for i := range req.Pools {
				pv := &req.Pools[i]
				if pv.Family != fam || pv.Subnet == "" {
					continue
				}
				if ok, _ := matchName(pat, pv.Subnet); ok {
					add(i)
				}
			}
			sortFrom(start)
		}
		if len(cs) == 0 {
			return nil, fmt.Sprintf("%s: no %s pool belongs to subnet %s", src.name, fam.Label(), quoteList(names)), policy.CauseNoMatch
		}
	case kindPools:
		for j, n := range names {
			if policy.IsPoolNamePattern(n) {
				start := len(cs)
				lit := literalPrefix(n)
				for i := range req.Pools {
					if req.Pools[i].Family != fam || !strings.HasPrefix(req.Pools[i].Name, lit) {
						continue
					}
					if ok, _ := path.Match(n, req.Pools[i].Name); ok {
						add(i)
					}
				}
				sortFrom(start)
				continue
			}
			if slices.Contains(names[:j], n) {
				return nil, fmt.Sprintf("%s: pool %q is listed twice for %s", src.name, n, fam.Label()), policy.CauseInvalid
			}
			// Prefer the view of this family; a pool of the other family stays a candidate
			// so that the family filter reports it, as Spiderpool's version check does.
			idx := -1
			for i := range req.Pools {
				if req.Pools[i].Name == n && (idx < 0 || req.Pools[i].Family == fam) {
					idx = i
				}
			}
			if idx < 0 {
				return nil, fmt.Sprintf("%s names %s pool %q, which does not exist", src.name, fam.Label(), n), policy.CauseNoMatch
			}
			add(idx)
		}
		if len(cs) == 0 {
			return nil, fmt.Sprintf("%s: %s pool pattern %s matches no %s pool", src.name, fam.Label(), quoteList(names), fam.Label()), policy.CauseNoMatch
		}
	}

	// Filter (Spiderpool's candidate pool filtering), then rank the survivors (its sorting).
	kept := 0
	for i := range cs {
		pv := &req.Pools[cs[i].idx]
		cs[i].filter = filterPool(req, pv, fam)
		if cs[i].filter == keep {
			cs[i].score = affinityScore(pv)
			kept++
		}
	}
	if rej != nil {
		*rej = append(*rej, rejections(req, src, fam, cs, seen)...)
	}
	if kept == 0 {
		// Full when the only thing wrong with every candidate is that it has no free address.
		cause := policy.CauseFull
		parts := make([]string, len(cs))
		for i := range cs {
			parts[i] = filterReason(req, &req.Pools[cs[i].idx], fam, cs[i].filter)
			if cs[i].filter != fExhausted {
				cause = policy.CauseUnavailable
			}
		}
		return nil, fmt.Sprintf("%s: no usable %s pool for interface %q: %s",
			src.name, fam.Label(), req.CNI.IfName, strings.Join(parts, "; ")), cause
	}
	out := cs[:0]
	for _, c := range cs {
		if c.filter == keep {
			out = append(out, c)
		}
	}
	// Higher affinity rank first; equal ranks keep the source's order (order is unique, so
	// this is a total order and the result never depends on the sort algorithm).
	slices.SortFunc(out, func(a, b cand) int {
		if a.score != b.score {
			return b.score - a.score
		}
		return a.order - b.order
	})
	res := make([]policy.Candidate, len(out))
	for i, c := range out {
		res[i] = policy.Candidate{Pool: req.Pools[c.idx].Name}
	}
	return res, "", 0
}

// matchName matches a subnet name or pattern; patterns were validated when parsed.
func matchName(pat, name string) (bool, error) {
	if policy.IsPoolNamePattern(pat) {
		return path.Match(pat, name)
	}
	return pat == name, nil
}

// literalPrefix is the part of a glob before its first special character; every name the
// glob matches starts with it, so checking it first skips most path.Match calls.
func literalPrefix(pat string) string {
	for i := 0; i < len(pat); i++ {
		switch pat[i] {
		case '*', '?', '[', '\\':
			return pat[:i]
		}
	}
	return pat
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
