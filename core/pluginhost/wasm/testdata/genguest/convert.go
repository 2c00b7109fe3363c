package main

import (
	"fmt"
	"net/netip"

	pb "github.com/allot-ipam/allot/core/pluginhost/wasm/testdata/genguest/pluginv1lite"
	"github.com/allot-ipam/allot/sdk/policy"
)

// The conversions sdk/wire makes between generated messages and sdk/policy types, for the
// generated types of this probe (the validation a guest needs: families, CIDRs, operators).

func podRequestFromProto(m *pb.PodRequest) (*policy.PodRequest, error) {
	p, ns, n, c := m.GetPod(), m.GetNamespace(), m.GetNode(), m.GetCni()
	out := &policy.PodRequest{
		Pod: policy.Pod{Namespace: p.GetNamespace(), Name: p.GetName(), UID: p.GetUid(),
			Labels: mapFromProto(p.GetLabels()), Annotations: mapFromProto(p.GetAnnotations()),
			OwnerKind: p.GetOwnerKind(), OwnerName: p.GetOwnerName()},
		Namespace: policy.Namespace{Name: ns.GetName(), Labels: mapFromProto(ns.GetLabels()),
			Annotations: mapFromProto(ns.GetAnnotations())},
		Node: policy.Node{Name: n.GetName(), Labels: mapFromProto(n.GetLabels())},
		CNI: policy.CNIRequest{IfName: c.GetIfName(), Network: c.GetNetwork(), MultusName: c.GetMultusName(),
			Pools: c.GetPools(), DefaultIPv4Pools: c.GetDefaultIpv4Pools(), DefaultIPv6Pools: c.GetDefaultIpv6Pools()},
	}
	if len(m.Pools) > 0 {
		out.Pools = make([]policy.PoolView, len(m.Pools))
		for i, pv := range m.Pools {
			if err := poolViewFromProto(pv, &out.Pools[i]); err != nil {
				return nil, fmt.Errorf("pools[%d]: %w", i, err)
			}
		}
	}
	return out, nil
}

func poolViewFromProto(m *pb.PoolView, out *policy.PoolView) error {
	fam, err := familyFromProto(m.GetFamily())
	if err != nil {
		return err
	}
	cidrs := make([]netip.Prefix, len(m.Cidrs))
	for i, s := range m.Cidrs {
		if cidrs[i], err = netip.ParsePrefix(s); err != nil {
			return fmt.Errorf("cidrs[%d]: bad CIDR %q", i, s)
		}
	}
	*out = policy.PoolView{Name: m.Name, Family: fam, CIDRs: cidrs, Subnet: m.Subnet, Total: m.Total, Free: m.Free,
		Default: m.Default, Disabled: m.Disabled, Terminating: m.Terminating, Excluded: m.Excluded,
		Reserved: m.Reserved, AllExcluded: m.AllExcluded, AllReserved: m.AllReserved, NodeName: m.NodeName,
		NamespaceName: m.NamespaceName, MultusName: m.MultusName}
	for _, s := range []struct {
		in  *pb.LabelSelector
		out **policy.LabelSelector
	}{{m.NodeAffinity, &out.NodeAffinity}, {m.NamespaceAffinity, &out.NamespaceAffinity}, {m.PodAffinity, &out.PodAffinity}} {
		if *s.out, err = selectorFromProto(s.in); err != nil {
			return err
		}
	}
	return nil
}

func familyFromProto(f pb.Family) (policy.Family, error) {
	switch f {
	case pb.Family_FAMILY_IPV4:
		return policy.IPv4, nil
	case pb.Family_FAMILY_IPV6:
		return policy.IPv6, nil
	}
	return "", fmt.Errorf("family: %d is not a family", f)
}

func selectorFromProto(m *pb.LabelSelector) (*policy.LabelSelector, error) {
	if m == nil {
		return nil, nil
	}
	out := &policy.LabelSelector{MatchLabels: mapFromProto(m.MatchLabels)}
	for _, r := range m.MatchExpressions {
		switch r.GetOperator() {
		case policy.OpIn, policy.OpNotIn, policy.OpExists, policy.OpDoesNotExist:
		default:
			return nil, fmt.Errorf("unknown operator %q", r.GetOperator())
		}
		out.MatchExpressions = append(out.MatchExpressions,
			policy.Requirement{Key: r.GetKey(), Operator: r.GetOperator(), Values: r.GetValues()})
	}
	return out, nil
}

func mapFromProto(ps []*pb.StringPair) map[string]string {
	if len(ps) == 0 {
		return nil
	}
	m := make(map[string]string, len(ps))
	for _, p := range ps {
		m[p.GetKey()] = p.GetValue()
	}
	return m
}

func podDecisionToProto(d policy.PodDecision) *pb.PodDecision {
	out := &pb.PodDecision{Reason: d.Reason, Source: d.Source, Cause: pb.DecisionCause(d.Cause)}
	switch d.Code {
	case policy.Decided:
		out.Code = pb.DecisionCode_DECISION_CODE_DECIDED
	case policy.Skip:
		out.Code = pb.DecisionCode_DECISION_CODE_SKIP
	case policy.NoFit:
		out.Code = pb.DecisionCode_DECISION_CODE_NO_FIT
	}
	for _, c := range d.IPv4 {
		out.Ipv4 = append(out.Ipv4, &pb.Candidate{Pool: c.Pool})
	}
	for _, c := range d.IPv6 {
		out.Ipv6 = append(out.Ipv6, &pb.Candidate{Pool: c.Pool})
	}
	return out
}
