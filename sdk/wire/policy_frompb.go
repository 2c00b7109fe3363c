package wire

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
)

const (
	msgPodRequest   = "pod request"
	msgPodDecision  = "pod decision"
	msgNodeRequest  = "node request"
	msgNodeDecision = "node decision"
)

// PodRequestFromProto decodes and validates a pod request (plugin side).
func PodRequestFromProto(m *pb.PodRequest) (*policy.PodRequest, error) {
	if m == nil {
		return nil, invalid(msgPodRequest, "", "missing message")
	}
	p, ns, n, c := m.GetPod(), m.GetNamespace(), m.GetNode(), m.GetCni()
	out := &policy.PodRequest{
		Pod: policy.Pod{
			Namespace:   p.GetNamespace(),
			Name:        p.GetName(),
			UID:         p.GetUid(),
			Labels:      mapFromProto(p.GetLabels()),
			Annotations: mapFromProto(p.GetAnnotations()),
			OwnerKind:   p.GetOwnerKind(),
			OwnerName:   p.GetOwnerName(),
		},
		Namespace: policy.Namespace{
			Name:        ns.GetName(),
			Labels:      mapFromProto(ns.GetLabels()),
			Annotations: mapFromProto(ns.GetAnnotations()),
		},
		Node: policy.Node{Name: n.GetName(), Labels: mapFromProto(n.GetLabels())},
		CNI: policy.CNIRequest{
			IfName:           c.GetIfName(),
			Network:          c.GetNetwork(),
			MultusName:       c.GetMultusName(),
			Pools:            c.GetPools(),
			DefaultIPv4Pools: c.GetDefaultIpv4Pools(),
			DefaultIPv6Pools: c.GetDefaultIpv6Pools(),
		},
	}
	if len(m.Pools) > 0 {
		out.Pools = make([]policy.PoolView, len(m.Pools))
		for i, pv := range m.Pools {
			if err := poolViewFromProto(pv, idx("pools", i), &out.Pools[i]); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func poolViewFromProto(m *pb.PoolView, field string, out *policy.PoolView) error {
	if m == nil {
		return invalid(msgPodRequest, field, "missing message")
	}
	fam, err := FamilyFromProto(m.Family)
	if err != nil {
		return invalid(msgPodRequest, field+".family", "%v", err)
	}
	cidrs, err := parsePrefixes(msgPodRequest, field+".cidrs", m.Cidrs)
	if err != nil {
		return err
	}
	*out = policy.PoolView{
		Name:          m.Name,
		Family:        fam,
		CIDRs:         cidrs,
		Subnet:        m.Subnet,
		Total:         m.Total,
		Free:          m.Free,
		Default:       m.Default,
		Disabled:      m.Disabled,
		Terminating:   m.Terminating,
		Excluded:      m.Excluded,
		Reserved:      m.Reserved,
		AllExcluded:   m.AllExcluded,
		AllReserved:   m.AllReserved,
		NodeName:      m.NodeName,
		NamespaceName: m.NamespaceName,
		MultusName:    m.MultusName,
	}
	if out.NodeAffinity, err = selectorFromProto(msgPodRequest, field+".node_affinity", m.NodeAffinity); err != nil {
		return err
	}
	if out.NamespaceAffinity, err = selectorFromProto(msgPodRequest, field+".namespace_affinity", m.NamespaceAffinity); err != nil {
		return err
	}
	if out.PodAffinity, err = selectorFromProto(msgPodRequest, field+".pod_affinity", m.PodAffinity); err != nil {
		return err
	}
	return nil
}

func selectorFromProto(msg, field string, m *pb.LabelSelector) (*policy.LabelSelector, error) {
	if m == nil {
		return nil, nil
	}
	out := &policy.LabelSelector{MatchLabels: mapFromProto(m.MatchLabels)}
	if len(m.MatchExpressions) > 0 {
		out.MatchExpressions = make([]policy.Requirement, len(m.MatchExpressions))
		for i, r := range m.MatchExpressions {
			f := idx(field+".match_expressions", i)
			if r == nil {
				return nil, invalid(msg, f, "missing message")
			}
			switch r.Operator {
			case "In", "NotIn", "Exists", "DoesNotExist":
			default:
				return nil, invalid(msg, f+".operator", "unknown operator %q (want In, NotIn, Exists or DoesNotExist)", r.Operator)
			}
			if r.Key == "" {
				return nil, invalid(msg, f+".key", "empty key")
			}
			out.MatchExpressions[i] = policy.Requirement{Key: r.Key, Operator: r.Operator, Values: r.Values}
		}
	}
	return out, nil
}

func parsePrefixes(msg, field string, ss []string) ([]netip.Prefix, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, invalid(msg, idx(field, i), "bad CIDR %q", s)
		}
		out[i] = p
	}
	return out, nil
}

// FamilyFromProto decodes a family, rejecting UNSPECIFIED and unknown values.
func FamilyFromProto(f pb.Family) (policy.Family, error) {
	switch f {
	case pb.Family_FAMILY_IPV4:
		return policy.IPv4, nil
	case pb.Family_FAMILY_IPV6:
		return policy.IPv6, nil
	case pb.Family_FAMILY_UNSPECIFIED:
		return "", errors.New("family unspecified")
	}
	return "", fmt.Errorf("unknown family value %d", int32(f))
}

// CodeFromProto decodes a decision code, rejecting UNSPECIFIED and unknown values.
func CodeFromProto(c pb.DecisionCode) (policy.Code, error) {
	switch c {
	case pb.DecisionCode_DECISION_CODE_DECIDED:
		return policy.Decided, nil
	case pb.DecisionCode_DECISION_CODE_SKIP:
		return policy.Skip, nil
	case pb.DecisionCode_DECISION_CODE_NO_FIT:
		return policy.NoFit, nil
	case pb.DecisionCode_DECISION_CODE_UNSPECIFIED:
		return 0, errors.New("decision code unspecified")
	}
	return 0, fmt.Errorf("unknown decision code value %d", int32(c))
}

// CauseFromProto decodes a decision cause. UNSPECIFIED (a plugin of contract 1.0) is valid;
// a value this contract does not know is rejected.
func CauseFromProto(c pb.DecisionCause) (policy.Cause, error) {
	if c < 0 || policy.Cause(c) > policy.MaxCause {
		return 0, fmt.Errorf("unknown decision cause value %d", int32(c))
	}
	return policy.Cause(c), nil
}

// PodDecisionFromProto decodes and validates a plugin's pod decision (host side).
func PodDecisionFromProto(m *pb.PodDecision) (policy.PodDecision, error) {
	if m == nil {
		return policy.PodDecision{}, invalid(msgPodDecision, "", "missing message")
	}
	code, err := CodeFromProto(m.Code)
	if err != nil {
		return policy.PodDecision{}, invalid(msgPodDecision, "code", "%v", err)
	}
	cause, err := CauseFromProto(m.Cause)
	if err != nil {
		return policy.PodDecision{}, invalid(msgPodDecision, "cause", "%v", err)
	}
	out := policy.PodDecision{Code: code, Cause: cause, Reason: m.Reason, Source: m.Source}
	if out.IPv4, err = candidatesFromProto("ipv4", m.Ipv4); err != nil {
		return policy.PodDecision{}, err
	}
	if out.IPv6, err = candidatesFromProto("ipv6", m.Ipv6); err != nil {
		return policy.PodDecision{}, err
	}
	if out.Rejected, err = rejectionsFromProto(m.Rejected); err != nil {
		return policy.PodDecision{}, err
	}
	return out, nil
}

func candidatesFromProto(field string, cs []*pb.Candidate) ([]policy.Candidate, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	out := make([]policy.Candidate, len(cs))
	for i, c := range cs {
		// The field name is built only for an error: this runs for every candidate of
		// every decision.
		if c == nil {
			return nil, invalid(msgPodDecision, idx(field, i), "missing message")
		}
		if c.Pool == "" {
			return nil, invalid(msgPodDecision, idx(field, i)+".pool", "empty pool name")
		}
		out[i] = policy.Candidate{Pool: c.Pool}
	}
	return out, nil
}

// NodeRequestFromProto decodes and validates a node request (plugin side).
func NodeRequestFromProto(m *pb.NodeRequest) (*policy.NodeRequest, error) {
	if m == nil {
		return nil, invalid(msgNodeRequest, "", "missing message")
	}
	out := &policy.NodeRequest{Node: policy.Node{Name: m.GetNode().GetName(), Labels: mapFromProto(m.GetNode().GetLabels())}}
	if len(m.Configs) > 0 {
		out.Configs = make([]policy.CIDRConfigView, len(m.Configs))
		for i, c := range m.Configs {
			f := idx("configs", i)
			if c == nil {
				return nil, invalid(msgNodeRequest, f, "missing message")
			}
			sel, err := selectorFromProto(msgNodeRequest, f+".node_selector", c.NodeSelector)
			if err != nil {
				return nil, err
			}
			v := policy.CIDRConfigView{Name: c.Name, FreeBlocks: c.FreeBlocks}
			if sel != nil {
				v.NodeSelector = *sel
			}
			if v.IPv4, err = cidrSpecFromProto(f+".ipv4", c.Ipv4, false); err != nil {
				return nil, err
			}
			if v.IPv6, err = cidrSpecFromProto(f+".ipv6", c.Ipv6, true); err != nil {
				return nil, err
			}
			out.Configs[i] = v
		}
	}
	return out, nil
}

func cidrSpecFromProto(field string, m *pb.CIDRSpec, v6 bool) (*policy.CIDRSpec, error) {
	if m == nil {
		return nil, nil
	}
	p, err := netip.ParsePrefix(m.Cidr)
	if err != nil {
		return nil, invalid(msgNodeRequest, field+".cidr", "bad CIDR %q", m.Cidr)
	}
	if p.Addr().Is6() != v6 || p.Addr().Is4In6() {
		return nil, invalid(msgNodeRequest, field+".cidr", "CIDR %q is of the wrong family", m.Cidr)
	}
	if m.PerNodeMaskSize < int32(p.Bits()) || int(m.PerNodeMaskSize) > p.Addr().BitLen() {
		return nil, invalid(msgNodeRequest, field+".per_node_mask_size", "%d outside /%d../%d", m.PerNodeMaskSize, p.Bits(), p.Addr().BitLen())
	}
	return &policy.CIDRSpec{CIDR: p, PerNodeMaskSize: int(m.PerNodeMaskSize)}, nil
}

// NodeDecisionFromProto decodes and validates a plugin's node decision (host side).
func NodeDecisionFromProto(m *pb.NodeDecision) (policy.NodeDecision, error) {
	if m == nil {
		return policy.NodeDecision{}, invalid(msgNodeDecision, "", "missing message")
	}
	code, err := CodeFromProto(m.Code)
	if err != nil {
		return policy.NodeDecision{}, invalid(msgNodeDecision, "code", "%v", err)
	}
	cause, err := CauseFromProto(m.Cause)
	if err != nil {
		return policy.NodeDecision{}, invalid(msgNodeDecision, "cause", "%v", err)
	}
	for i, c := range m.Configs {
		if c == "" {
			return policy.NodeDecision{}, invalid(msgNodeDecision, idx("configs", i), "empty config name")
		}
	}
	return policy.NodeDecision{Code: code, Cause: cause, Reason: m.Reason, Configs: m.Configs}, nil
}
