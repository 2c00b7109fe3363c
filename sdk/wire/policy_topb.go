package wire

import (
	"net/netip"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
)

// PodRequestToProto encodes a pod request (host side).
func PodRequestToProto(r *policy.PodRequest) *pb.PodRequest {
	if r == nil {
		return nil
	}
	out := &pb.PodRequest{
		Pod: &pb.Pod{
			Namespace:   r.Pod.Namespace,
			Name:        r.Pod.Name,
			Uid:         r.Pod.UID,
			Labels:      mapToProto(r.Pod.Labels),
			Annotations: mapToProto(r.Pod.Annotations),
			OwnerKind:   r.Pod.OwnerKind,
			OwnerName:   r.Pod.OwnerName,
		},
		Namespace: &pb.Namespace{
			Name:        r.Namespace.Name,
			Labels:      mapToProto(r.Namespace.Labels),
			Annotations: mapToProto(r.Namespace.Annotations),
		},
		Node: nodeToProto(r.Node),
		Cni: &pb.CNIRequest{
			IfName:           r.CNI.IfName,
			Network:          r.CNI.Network,
			MultusName:       r.CNI.MultusName,
			Pools:            r.CNI.Pools,
			DefaultIpv4Pools: r.CNI.DefaultIPv4Pools,
			DefaultIpv6Pools: r.CNI.DefaultIPv6Pools,
		},
	}
	if len(r.Pools) > 0 {
		out.Pools = make([]*pb.PoolView, len(r.Pools))
		for i := range r.Pools {
			out.Pools[i] = poolViewToProto(&r.Pools[i])
		}
	}
	return out
}

func nodeToProto(n policy.Node) *pb.Node {
	return &pb.Node{Name: n.Name, Labels: mapToProto(n.Labels)}
}

func poolViewToProto(p *policy.PoolView) *pb.PoolView {
	return &pb.PoolView{
		Name:              p.Name,
		Family:            FamilyToProto(p.Family),
		Cidrs:             prefixesToStrings(p.CIDRs),
		Subnet:            p.Subnet,
		Total:             p.Total,
		Free:              p.Free,
		Default:           p.Default,
		Disabled:          p.Disabled,
		Terminating:       p.Terminating,
		Excluded:          p.Excluded,
		Reserved:          p.Reserved,
		AllExcluded:       p.AllExcluded,
		AllReserved:       p.AllReserved,
		NodeName:          p.NodeName,
		NodeAffinity:      selectorToProto(p.NodeAffinity),
		NamespaceName:     p.NamespaceName,
		NamespaceAffinity: selectorToProto(p.NamespaceAffinity),
		PodAffinity:       selectorToProto(p.PodAffinity),
		MultusName:        p.MultusName,
	}
}

func selectorToProto(s *policy.LabelSelector) *pb.LabelSelector {
	if s == nil {
		return nil
	}
	out := &pb.LabelSelector{MatchLabels: mapToProto(s.MatchLabels)}
	if len(s.MatchExpressions) > 0 {
		out.MatchExpressions = make([]*pb.Requirement, len(s.MatchExpressions))
		for i, r := range s.MatchExpressions {
			out.MatchExpressions[i] = &pb.Requirement{Key: r.Key, Operator: r.Operator, Values: r.Values}
		}
	}
	return out
}

func prefixesToStrings(ps []netip.Prefix) []string {
	if len(ps) == 0 {
		return nil
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// FamilyToProto encodes a family; anything but IPv4/IPv6 becomes FAMILY_UNSPECIFIED, which
// receivers reject.
func FamilyToProto(f policy.Family) pb.Family {
	switch f {
	case policy.IPv4:
		return pb.Family_FAMILY_IPV4
	case policy.IPv6:
		return pb.Family_FAMILY_IPV6
	}
	return pb.Family_FAMILY_UNSPECIFIED
}

// CodeToProto encodes a decision code; an unknown code becomes DECISION_CODE_UNSPECIFIED,
// which receivers reject.
func CodeToProto(c policy.Code) pb.DecisionCode {
	switch c {
	case policy.Decided:
		return pb.DecisionCode_DECISION_CODE_DECIDED
	case policy.Skip:
		return pb.DecisionCode_DECISION_CODE_SKIP
	case policy.NoFit:
		return pb.DecisionCode_DECISION_CODE_NO_FIT
	}
	return pb.DecisionCode_DECISION_CODE_UNSPECIFIED
}

// CauseToProto encodes a decision cause. The enum's values are policy.Cause's, so this is a
// conversion; a value outside the contract goes out as is and the receiver rejects it.
func CauseToProto(c policy.Cause) pb.DecisionCause { return pb.DecisionCause(c) }

// PodDecisionToProto encodes a pod decision (plugin side).
func PodDecisionToProto(d policy.PodDecision) *pb.PodDecision {
	return &pb.PodDecision{
		Code:   CodeToProto(d.Code),
		Cause:  CauseToProto(d.Cause),
		Reason: d.Reason,
		Ipv4:   candidatesToProto(d.IPv4),
		Ipv6:   candidatesToProto(d.IPv6),
		Source: d.Source,
		// Rejected: contract 1.2, optional.
		Rejected: rejectionsToProto(d.Rejected),
	}
}

func candidatesToProto(cs []policy.Candidate) []*pb.Candidate {
	if len(cs) == 0 {
		return nil
	}
	out := make([]*pb.Candidate, len(cs))
	for i, c := range cs {
		out[i] = &pb.Candidate{Pool: c.Pool}
	}
	return out
}

// NodeRequestToProto encodes a node request (host side).
func NodeRequestToProto(r *policy.NodeRequest) *pb.NodeRequest {
	if r == nil {
		return nil
	}
	out := &pb.NodeRequest{Node: nodeToProto(r.Node)}
	if len(r.Configs) > 0 {
		out.Configs = make([]*pb.CIDRConfigView, len(r.Configs))
		for i := range r.Configs {
			c := &r.Configs[i]
			sel := selectorToProto(&c.NodeSelector)
			out.Configs[i] = &pb.CIDRConfigView{
				Name:         c.Name,
				NodeSelector: sel,
				Ipv4:         cidrSpecToProto(c.IPv4),
				Ipv6:         cidrSpecToProto(c.IPv6),
				FreeBlocks:   c.FreeBlocks,
			}
		}
	}
	return out
}

func cidrSpecToProto(s *policy.CIDRSpec) *pb.CIDRSpec {
	if s == nil {
		return nil
	}
	return &pb.CIDRSpec{Cidr: s.CIDR.String(), PerNodeMaskSize: int32(s.PerNodeMaskSize)}
}

// NodeDecisionToProto encodes a node decision (plugin side).
func NodeDecisionToProto(d policy.NodeDecision) *pb.NodeDecision {
	return &pb.NodeDecision{Code: CodeToProto(d.Code), Cause: CauseToProto(d.Cause), Reason: d.Reason, Configs: d.Configs}
}
