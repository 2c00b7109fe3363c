// Package ciliumannotations chooses a pod's pool per address family the way Cilium's
// multi-pool IPAM does (pkg/ipam/podippool in Cilium): the ipam.cilium.io/ipv4-pool or
// ipv6-pool annotation, else ipam.cilium.io/ip-pool, on the pod, then on its namespace; else
// the one pool whose pod and namespace selectors match the pod; else the pool named
// "default", unless ipam.cilium.io/require-pool-match says to fail instead.
package ciliumannotations

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/allot-ipam/allot/sdk/policy"
)

// Name is the policy's registry name.
const Name = "cilium-annotations"

// Cilium's annotation keys.
const (
	DefaultAnnotation     = "ipam.cilium.io/ip-pool"
	DefaultIPv4Annotation = "ipam.cilium.io/ipv4-pool"
	DefaultIPv6Annotation = "ipam.cilium.io/ipv6-pool"
	// RequirePoolMatchAnnotation set to "true" on a pod or its namespace makes a pod that no
	// pool's selectors match fail instead of falling back to the default pool.
	RequirePoolMatchAnnotation = "ipam.cilium.io/require-pool-match"
)

// Synthetic labels Cilium adds to the pod's labels before matching pool pod selectors.
const (
	PodNamespaceLabel = "io.kubernetes.pod.namespace"
	PodNameLabel      = "io.kubernetes.pod.name"
)

// DefaultPool is the pool used when nothing else names one.
const DefaultPool = "default"

// Config configures the policy.
type Config struct {
	// Annotation is the key naming a pool for both families; empty means DefaultAnnotation.
	Annotation string
	// IPv4Annotation and IPv6Annotation name a pool for one family and win over Annotation;
	// empty means Cilium's keys.
	IPv4Annotation, IPv6Annotation string
	// RequirePoolMatch fails a pod that no annotation names a pool for and no pool's
	// selectors match, instead of using the default pool (the annotation of the same name
	// turns it on per pod or namespace).
	RequirePoolMatch bool
}

// Policy implements Cilium's pod -> namespace -> selectors -> "default" rule per family.
type Policy struct {
	policy.PodOnly
	key              string
	famKey           map[policy.Family]string
	requirePoolMatch bool
}

var _ policy.PoolPolicy = (*Policy)(nil)

// SourceDefaultPool is PodDecision.Source when the pool named "default" is used.
const SourceDefaultPool = `pool "default" (no pod or namespace annotation, no pool selector matched)`

// SourceSelector is PodDecision.Source when a pool's pod/namespace selectors chose it.
const SourceSelector = "pool selectors"

// New validates cfg and returns the policy.
func New(cfg Config) (*Policy, error) {
	p := &Policy{key: cfg.Annotation, famKey: map[policy.Family]string{policy.IPv4: cfg.IPv4Annotation, policy.IPv6: cfg.IPv6Annotation},
		requirePoolMatch: cfg.RequirePoolMatch}
	if p.key == "" {
		p.key = DefaultAnnotation
	}
	if p.famKey[policy.IPv4] == "" {
		p.famKey[policy.IPv4] = DefaultIPv4Annotation
	}
	if p.famKey[policy.IPv6] == "" {
		p.famKey[policy.IPv6] = DefaultIPv6Annotation
	}
	for field, key := range map[string]string{"annotation": p.key, "ipv4Annotation": p.famKey[policy.IPv4], "ipv6Annotation": p.famKey[policy.IPv6]} {
		if err := policy.ValidateLabelKey(key); err != nil {
			return nil, fmt.Errorf("%s: config field %q: %q is not a valid annotation key: %v", Name, field, key, err)
		}
	}
	return p, nil
}

// FromConfig is the registry factory. Known fields: "annotation", "ipv4Annotation",
// "ipv6Annotation" (strings), "requirePoolMatch" (bool).
func FromConfig(cfg map[string]any) (policy.PoolPolicy, error) {
	var c Config
	strs := map[string]*string{"annotation": &c.Annotation, "ipv4Annotation": &c.IPv4Annotation, "ipv6Annotation": &c.IPv6Annotation}
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		if dst, ok := strs[k]; ok {
			s, ok := cfg[k].(string)
			if !ok {
				return nil, fmt.Errorf("%s: config field %q: must be a string, got %T", Name, k, cfg[k])
			}
			*dst = s
			continue
		}
		if k == "requirePoolMatch" {
			b, ok := cfg[k].(bool)
			if !ok {
				return nil, fmt.Errorf("%s: config field %q: must be a boolean, got %T", Name, k, cfg[k])
			}
			c.RequirePoolMatch = b
			continue
		}
		return nil, fmt.Errorf("%s: config field %q: unknown field (known: annotation, ipv4Annotation, ipv6Annotation, requirePoolMatch)", Name, k)
	}
	return New(c)
}

// Annotation returns the annotation key naming a pool for both families.
func (p *Policy) Annotation() string { return p.key }

// choice is the pool chosen for one family and the rule that chose it.
type choice struct {
	pool, source string
	// explicit: an annotation named the pool, so a pool without this family is an error
	// only when the annotation was the family's own key.
	familyKey bool
}

// SelectPodPools implements policy.PoolPolicy. Each family is decided on its own, as in
// Cilium, so a pod may take IPv4 from one pool and IPv6 from another. A pool named by the
// both-families key that lacks a family gives no candidate in that family; a pool named by a
// family's own key must have that family. Empty annotation values count as absent, as in
// Cilium.
func (p *Policy) SelectPodPools(ctx context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	d := p.decide(req)
	if policy.DetailWanted(ctx) {
		d.Rejected = rejected(req, d)
	}
	return d, nil
}

func (p *Policy) decide(req *policy.PodRequest) policy.PodDecision {
	var d policy.PodDecision
	var sources []string
	var missing []choice
	for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
		c, reason, cause := p.choose(req, fam)
		if reason != "" {
			return policy.PodDecision{Code: policy.NoFit, Cause: cause, Source: c.source, Reason: reason}
		}
		if policy.LookupPool(req.Pools, c.pool, fam) == nil {
			if c.familyKey {
				return policy.PodDecision{Code: policy.NoFit, Cause: policy.CauseNoMatch, Source: c.source,
					Reason: fmt.Sprintf("%s names pool %q, which has no %s CIDRs", c.source, c.pool, fam.Label())}
			}
			missing = append(missing, c)
			continue
		}
		cand := []policy.Candidate{{Pool: c.pool}}
		if fam == policy.IPv4 {
			d.IPv4 = cand
		} else {
			d.IPv6 = cand
		}
		if !slices.Contains(sources, c.source) {
			sources = append(sources, c.source)
		}
	}
	if d.IPv4 == nil && d.IPv6 == nil {
		for _, c := range missing {
			if !slices.Contains(sources, c.source) {
				sources = append(sources, c.source)
			}
		}
		return policy.PodDecision{Code: policy.NoFit, Cause: policy.CauseNoMatch, Source: strings.Join(sources, ", "),
			Reason: noPoolReason(req, missing)}
	}
	d.Code = policy.Decided
	d.Source = strings.Join(sources, ", ")
	return d
}

func noPoolReason(req *policy.PodRequest, missing []choice) string {
	if len(missing) == 2 && missing[0] == missing[1] {
		if missing[0].source == SourceDefaultPool {
			return fmt.Sprintf("no %s annotation on pod %s/%s or namespace %q, no pool selector matched, and no pool named %q",
				DefaultAnnotation, req.Pod.Namespace, req.Pod.Name, req.Namespace.Name, DefaultPool)
		}
		return fmt.Sprintf("%s names pool %q, which does not exist", missing[0].source, missing[0].pool)
	}
	parts := make([]string, len(missing))
	for i, c := range missing {
		parts[i] = fmt.Sprintf("%s names pool %q", c.source, c.pool)
	}
	return strings.Join(parts, "; ") + ", which has neither family"
}

// choose applies Cilium's rules for one family; a non-empty reason is a NoFit, of cause.
func (p *Policy) choose(req *policy.PodRequest, fam policy.Family) (c choice, reason string, cause policy.Cause) {
	for _, src := range []struct {
		ann  map[string]string
		what string
	}{{req.Pod.Annotations, "pod"}, {req.Namespace.Annotations, "namespace"}} {
		if v := src.ann[p.famKey[fam]]; v != "" {
			return choice{pool: v, source: src.what + " annotation " + p.famKey[fam], familyKey: true}, "", 0
		}
		if v := src.ann[p.key]; v != "" {
			return choice{pool: v, source: src.what + " annotation " + p.key}, "", 0
		}
	}
	matches := selectorMatches(req, fam)
	switch len(matches) {
	case 1:
		return choice{pool: matches[0], source: SourceSelector, familyKey: true}, "", 0
	case 0:
	default:
		return choice{source: SourceSelector}, fmt.Sprintf("%d pools' selectors match pod %s/%s for %s (%s): refusing to choose",
			len(matches), req.Pod.Namespace, req.Pod.Name, fam.Label(), strings.Join(matches, ", ")), policy.CauseAmbiguous
	}
	if where := p.requireMatch(req); where != "" {
		return choice{source: SourceSelector}, fmt.Sprintf("no pool's selectors match pod %s/%s for %s and %s requires a match",
			req.Pod.Namespace, req.Pod.Name, fam.Label(), where), policy.CauseNoMatch
	}
	return choice{pool: DefaultPool, source: SourceDefaultPool}, "", 0
}

func (p *Policy) requireMatch(req *policy.PodRequest) string {
	switch {
	case req.Pod.Annotations[RequirePoolMatchAnnotation] == "true":
		return "pod annotation " + RequirePoolMatchAnnotation
	case req.Namespace.Annotations[RequirePoolMatchAnnotation] == "true":
		return "namespace annotation " + RequirePoolMatchAnnotation
	case p.requirePoolMatch:
		return "the policy's requirePoolMatch setting"
	}
	return ""
}

// selectorMatches lists the pools of fam whose selectors match the pod, by name. As in
// Cilium, a pool takes part only when it has a pod or a namespace selector (allot's
// podAffinity and namespaceAffinity), the pod's labels gain io.kubernetes.pod.namespace and
// io.kubernetes.pod.name, and an absent selector matches everything.
func selectorMatches(req *policy.PodRequest, fam policy.Family) []string {
	var labels map[string]string
	var out []string
	for i := range req.Pools {
		v := &req.Pools[i]
		if v.Family != fam || (v.PodAffinity == nil && v.NamespaceAffinity == nil) {
			continue
		}
		if labels == nil {
			labels = make(map[string]string, len(req.Pod.Labels)+2)
			maps.Copy(labels, req.Pod.Labels)
			labels[PodNamespaceLabel] = req.Pod.Namespace
			labels[PodNameLabel] = req.Pod.Name
		}
		if (v.PodAffinity == nil || v.PodAffinity.Matches(labels)) &&
			(v.NamespaceAffinity == nil || v.NamespaceAffinity.Matches(req.Namespace.Labels)) {
			out = append(out, v.Name)
		}
	}
	return out
}
