// Package ciliumannotations chooses a pod's pool the way Cilium's multi-pool IPAM does: the
// ipam.cilium.io/ip-pool annotation on the pod, else on its namespace, else the pool named
// "default".
package ciliumannotations

import (
	"context"
	"fmt"
	"slices"

	"github.com/allot-ipam/allot/sdk/policy"
)

// Name is the policy's registry name.
const Name = "cilium-annotations"

// DefaultAnnotation is Cilium's pool annotation key.
const DefaultAnnotation = "ipam.cilium.io/ip-pool"

// DefaultPool is the pool used when neither the pod nor its namespace is annotated.
const DefaultPool = "default"

// Config configures the policy.
type Config struct {
	// Annotation is the annotation key read on pods and namespaces; empty means
	// DefaultAnnotation.
	Annotation string
}

// Policy implements Cilium's pod → namespace → "default" rule.
type Policy struct {
	policy.PodOnly
	key       string
	podSource string
	nsSource  string
}

var _ policy.PoolPolicy = (*Policy)(nil)

// SourceDefaultPool is PodDecision.Source when the pool named "default" is used.
const SourceDefaultPool = `pool "default" (no pod or namespace annotation)`

// New validates cfg and returns the policy.
func New(cfg Config) (*Policy, error) {
	key := cfg.Annotation
	if key == "" {
		key = DefaultAnnotation
	}
	if err := policy.ValidateLabelKey(key); err != nil {
		return nil, fmt.Errorf("%s: config field \"annotation\": %q is not a valid annotation key: %v", Name, key, err)
	}
	return &Policy{key: key, podSource: "pod annotation " + key, nsSource: "namespace annotation " + key}, nil
}

// FromConfig is the registry factory. Known field: "annotation" (string).
func FromConfig(cfg map[string]any) (policy.PoolPolicy, error) {
	var c Config
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch k {
		case "annotation":
			s, ok := cfg[k].(string)
			if !ok {
				return nil, fmt.Errorf("%s: config field %q: must be a string, got %T", Name, k, cfg[k])
			}
			c.Annotation = s
		default:
			return nil, fmt.Errorf("%s: config field %q: unknown field (known: annotation)", Name, k)
		}
	}
	return New(c)
}

// Annotation returns the annotation key the policy reads.
func (p *Policy) Annotation() string { return p.key }

// SelectPodPools implements policy.PoolPolicy (seed 000, rules 1-3).
//
// The chosen pool is the candidate in each family it has: a pool with IPv4 and IPv6 CIDRs is a
// candidate in both, an IPv4-only pool in IPv4 only. A named pool that does not exist is NoFit.
// An annotation present but empty is NoFit too: it is a mistake, not an absence.
func (p *Policy) SelectPodPools(_ context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	// Rule 1: annotation on the pod itself.
	if name, ok := req.Pod.Annotations[p.key]; ok {
		return decide(req, name, p.podSource), nil
	}
	// Rule 2: annotation on the pod's namespace.
	if name, ok := req.Namespace.Annotations[p.key]; ok {
		return decide(req, name, p.nsSource), nil
	}
	// Rule 3: the pool named "default".
	d := decide(req, DefaultPool, SourceDefaultPool)
	if d.Code == policy.NoFit {
		d.Reason = fmt.Sprintf("no %s annotation on pod %s/%s or namespace %q, and no pool named %q",
			p.key, req.Pod.Namespace, req.Pod.Name, req.Namespace.Name, DefaultPool)
	}
	return d, nil
}

func decide(req *policy.PodRequest, name, source string) policy.PodDecision {
	if name == "" {
		return policy.PodDecision{Code: policy.NoFit, Source: source, Reason: source + " is empty"}
	}
	d := policy.PodDecision{Code: policy.Decided, Source: source}
	if policy.LookupPool(req.Pools, name, policy.IPv4) != nil {
		d.IPv4 = []policy.Candidate{{Pool: name}}
	}
	if policy.LookupPool(req.Pools, name, policy.IPv6) != nil {
		d.IPv6 = []policy.Candidate{{Pool: name}}
	}
	if d.IPv4 == nil && d.IPv6 == nil {
		return policy.PodDecision{Code: policy.NoFit, Source: source,
			Reason: fmt.Sprintf("%s names pool %q, which does not exist", source, name)}
	}
	return d
}
