// Package nodelabels chooses the ClusterCIDRConfig a node's pod CIDR block comes from, by
// node labels, with the five tie-break rules of Google Distributed Cloud's ClusterCIDRConfig
// ("ClusterCIDRConfig assignment rules"), and the next best config when the best has no free
// block.
package nodelabels

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/allot-ipam/allot/sdk/policy"
)

// Name is the policy's registry name.
const Name = "node-labels"

// NoFit reasons start with one of these texts, for people. Callers tell "nothing matches this
// node" (the node stays NotReady until a matching config is created) from "configs match but
// all are full" (more CIDRs are needed) by the decision's Cause (policy.CauseNoMatch,
// policy.CauseFull), never by the text.
const (
	ReasonNoMatch = "no ClusterCIDRConfig matches node labels"
	ReasonAllFull = "every ClusterCIDRConfig matching the node is full"
)

// Source is NodeDecision's rule name, used in reasons and logs.
const Source = "ClusterCIDRConfig node selector"

// Policy implements the node-label ClusterCIDRConfig choice. It chooses no pod pools.
type Policy struct {
	policy.NodeOnly
}

var _ policy.PoolPolicy = (*Policy)(nil)

// New returns the policy. It has no configuration.
func New() *Policy { return &Policy{} }

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

// ValidateConfig checks one config (policy.CIDRConfigView.Validate). Errors name the field.
func ValidateConfig(c *policy.CIDRConfigView) error { return c.Validate() }

// ranked holds the sort keys of one matching config.
type ranked struct {
	cfg *policy.CIDRConfigView
	// Rule 1: labels on the node the selector matches, more first.
	matches int
	// Rule 2: log2 of the number of per-node blocks the config can ever hand out, fewer first.
	blocksLog2 int
	// Rule 3: host bits of a node block (log2 of its addresses), fewer first.
	hostBits int
	// Rule 4: the selector's requirements in canonical form, lower first; computed lazily.
	labels     []string
	labelsDone bool
	// Rule 5: the IPv4 CIDR (IPv6 when the config has no IPv4), lower address first.
	cidr netip.Prefix
}

// SelectNodeCIDRConfig implements policy.PoolPolicy (Google Distributed Cloud's
// "ClusterCIDRConfig assignment rules"): every config whose node selector matches the node,
// best first by the five tie-break rules in order, ties after all five broken by name. Configs
// with no free block are left out ("the next best CIDR is chosen"). Invalid configs never
// match.
func (p *Policy) SelectNodeCIDRConfig(_ context.Context, req *policy.NodeRequest) (policy.NodeDecision, error) {
	var buf [32]ranked
	rs := buf[:0]
	var invalid []string
	for i := range req.Configs {
		c := &req.Configs[i]
		if !c.NodeSelector.Matches(req.Node.Labels) {
			continue
		}
		if err := c.Validate(); err != nil {
			invalid = append(invalid, fmt.Sprintf("%q: %v", c.Name, err))
			continue
		}
		rs = append(rs, rank(c))
	}
	if len(rs) == 0 {
		reason := fmt.Sprintf("%s of node %q {%s}; the node gets no pod CIDR until a matching ClusterCIDRConfig is created",
			ReasonNoMatch, req.Node.Name, labelString(req.Node.Labels))
		if len(invalid) > 0 {
			reason += "; invalid configs ignored: " + strings.Join(invalid, "; ")
		}
		return policy.NodeDecision{Code: policy.NoFit, Cause: policy.CauseNoMatch, Reason: reason}, nil
	}
	// Sort indexes, not pointers: pointers handed to the sort's comparator would move rs to
	// the heap.
	var ibuf [32]int
	order := ibuf[:0]
	for i := range rs {
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int { return compare(&rs[a], &rs[b]) })

	d := policy.NodeDecision{Code: policy.Decided, Configs: make([]string, 0, len(order))}
	var full []string
	for _, i := range order {
		r := &rs[i]
		if r.cfg.FreeBlocks == 0 {
			full = append(full, r.cfg.Name)
			continue
		}
		d.Configs = append(d.Configs, r.cfg.Name)
	}
	if len(d.Configs) == 0 {
		return policy.NodeDecision{Code: policy.NoFit, Cause: policy.CauseFull, Reason: fmt.Sprintf("%s: %s match node %q but have no free block",
			ReasonAllFull, quoteList(full), req.Node.Name)}, nil
	}
	if len(full) > 0 {
		d.Reason = "skipped full configs " + quoteList(full)
	}
	return d, nil
}

func rank(c *policy.CIDRConfigView) ranked {
	r := ranked{cfg: c, matches: matchCount(&c.NodeSelector), blocksLog2: -1}
	for _, s := range []*policy.CIDRSpec{c.IPv4, c.IPv6} {
		if s == nil {
			continue
		}
		// A node needs a block of every family the config has, so the config can serve as
		// many nodes as its smallest family has blocks.
		if b := s.PerNodeMaskSize - s.CIDR.Bits(); r.blocksLog2 < 0 || b < r.blocksLog2 {
			r.blocksLog2 = b
		}
	}
	primary := c.IPv4
	if primary == nil {
		primary = c.IPv6
	}
	r.hostBits = primary.CIDR.Addr().BitLen() - primary.PerNodeMaskSize
	r.cidr = primary.CIDR
	return r
}

// matchCount is the number of labels on the node that the selector matches: distinct keys
// the selector requires to be present (matchLabels, In, Exists). NotIn and DoesNotExist hold
// for labels the node does not have, so they match no label on the node.
func matchCount(s *policy.LabelSelector) int {
	n := len(s.MatchLabels)
	for i, r := range s.MatchExpressions {
		if r.Operator != policy.OpIn && r.Operator != policy.OpExists {
			continue
		}
		if _, dup := s.MatchLabels[r.Key]; dup {
			continue
		}
		dup := false
		for _, q := range s.MatchExpressions[:i] {
			if q.Key == r.Key && (q.Operator == policy.OpIn || q.Operator == policy.OpExists) {
				dup = true
				break
			}
		}
		if !dup {
			n++
		}
	}
	return n
}

// compare orders two matching configs by the five assignment rules, in order; each rule is
// consulted only when all earlier ones tie.
func compare(a, b *ranked) int {
	// Rule 1: most matching labels first.
	if c := cmp.Compare(b.matches, a.matches); c != 0 {
		return c
	}
	// Rule 2: fewest allocatable pod CIDRs first.
	if c := cmp.Compare(a.blocksLog2, b.blocksLog2); c != 0 {
		return c
	}
	// Rule 3: fewest addresses per node block first.
	if c := cmp.Compare(a.hostBits, b.hostBits); c != 0 {
		return c
	}
	// Rule 4: lower label value first. The selector's requirements rendered as `key=value`
	// (Kubernetes selector syntax), sorted, compared element by element as byte strings. This
	// is what makes the documented example hold: `kubernetes.io/hostname=node-1` sorts before
	// `node.kubernetes.io/instance-type=medium` (comparing values alone would not).
	if c := slices.Compare(a.labelKey(), b.labelKey()); c != 0 {
		return c
	}
	// Rule 5: lower CIDR first, by numeric address (10.9.0.0 < 10.10.0.0), then shorter
	// prefix. Only IPv4 CIDRs are compared when present, as the rule says; IPv4 sorts before
	// IPv6, so an IPv6-only config comes after any config with IPv4.
	if c := a.cidr.Addr().Compare(b.cidr.Addr()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.cidr.Bits(), b.cidr.Bits()); c != 0 {
		return c
	}
	// Not one of the five rules: names are unique, so the order is total and never depends on
	// input order.
	return strings.Compare(a.cfg.Name, b.cfg.Name)
}

// labelKey computes rule 4's key once per config and decision, only when rule 4 is reached.
func (r *ranked) labelKey() []string {
	if !r.labelsDone {
		r.labels, r.labelsDone = r.cfg.NodeSelector.RequirementStrings(), true
	}
	return r.labels
}

func labelString(labels map[string]string) string {
	kv := make([]string, 0, len(labels))
	for k, v := range labels {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, ",")
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
