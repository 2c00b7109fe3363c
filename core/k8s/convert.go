package k8s

import (
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

// LabelSelector converts a Kubernetes label selector to the policy contract's; nil is the
// empty selector (matches everything).
func LabelSelector(s *metav1.LabelSelector) policy.LabelSelector {
	if s == nil {
		return policy.LabelSelector{}
	}
	out := policy.LabelSelector{MatchLabels: s.MatchLabels}
	for _, r := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, policy.Requirement{
			Key: r.Key, Operator: string(r.Operator), Values: r.Values,
		})
	}
	return out
}

// CIDRConfigView converts a ClusterCIDRConfig to the policy contract's view (FreeBlocks left
// zero for the caller). Unparsable CIDRs are an error naming the field.
func CIDRConfigView(c *allotv1.ClusterCIDRConfig) (policy.CIDRConfigView, error) {
	v := policy.CIDRConfigView{Name: c.Name, NodeSelector: LabelSelector(c.Spec.NodeSelector)}
	for i, f := range []*allotv1.CIDRBlockSpec{c.Spec.IPv4, c.Spec.IPv6} {
		if f == nil {
			continue
		}
		p, err := netip.ParsePrefix(f.CIDR)
		if err != nil {
			return v, fmt.Errorf("ClusterCIDRConfig %q: spec.%s.cidr: %w", c.Name, [2]string{"ipv4", "ipv6"}[i], err)
		}
		spec := &policy.CIDRSpec{CIDR: p, PerNodeMaskSize: int(f.PerNodeMaskSize)}
		if i == 0 {
			v.IPv4 = spec
		} else {
			v.IPv6 = spec
		}
	}
	return v, nil
}
