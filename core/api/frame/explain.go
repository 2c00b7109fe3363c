package frame

import (
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/apiv1"
)

// The explain call (allotctl explain) in the framed protocol: OpExplain carries an
// ExplainRequest and is answered with an ExplainResponse.

// AppendExplainRequest appends r's encoding.
func AppendExplainRequest(b []byte, r *api.ExplainRequest) []byte {
	m := &apiv1.ExplainRequest{Pod: podPB(r.Pod)}
	if r.Owner != (api.Owner{}) {
		m.Owner = ownerPB(r.Owner)
	}
	if d := r.DryRun; d != nil {
		q := &d.Request
		m.DryRun = &apiv1.DryRun{
			Request: &apiv1.AllocateRequest{Owner: ownerPB(q.Owner), Network: q.Network, Pod: podPB(q.Pod),
				Pools: q.Pools, Ips: q.IPs, DefaultIpv4Pools: q.DefaultIPv4Pools, DefaultIpv6Pools: q.DefaultIPv6Pools},
			Labels: d.Labels, Annotations: d.Annotations, OwnerKind: d.OwnerKind, OwnerName: d.OwnerName,
		}
	}
	return appendVT(b, m)
}

// DecodeExplainRequest decodes an explain request.
func DecodeExplainRequest(b []byte, r *api.ExplainRequest) error {
	var m apiv1.ExplainRequest
	if err := unmarshal("explain", b, &m); err != nil {
		return err
	}
	var t text
	*r = api.ExplainRequest{Pod: t.pod(m.Pod), Owner: t.owner(m.Owner)}
	if d := m.DryRun; d != nil {
		r.DryRun = &api.DryRun{Labels: t.strMap(d.Labels), Annotations: t.strMap(d.Annotations),
			OwnerKind: t.s(d.OwnerKind), OwnerName: t.s(d.OwnerName)}
		if q := d.Request; q != nil {
			r.DryRun.Request = api.AllocateRequest{Owner: t.owner(q.Owner), Network: t.s(q.Network), Pod: t.pod(q.Pod),
				Pools: t.list(q.Pools), IPs: t.list(q.Ips),
				DefaultIPv4Pools: t.list(q.DefaultIpv4Pools), DefaultIPv6Pools: t.list(q.DefaultIpv6Pools)}
		}
	}
	return checked("explain", b, &m, &t)
}

// AppendExplainResponse appends r's encoding.
func AppendExplainResponse(b []byte, r *api.ExplainResponse) []byte {
	m := &apiv1.ExplainResponse{Explanations: make([]*apiv1.Explanation, len(r.Explanations))}
	for i := range r.Explanations {
		m.Explanations[i] = explanationPB(&r.Explanations[i])
	}
	return appendVT(b, m)
}

// DecodeExplainResponse decodes an explain answer.
func DecodeExplainResponse(b []byte, r *api.ExplainResponse) error {
	var m apiv1.ExplainResponse
	if err := unmarshal("explainResponse", b, &m); err != nil {
		return err
	}
	var t text
	r.Explanations = make([]api.Explanation, len(m.Explanations))
	for i, e := range m.Explanations {
		t.explanation(e, &r.Explanations[i])
	}
	return checked("explainResponse", b, &m, &t)
}

func explanationPB(e *api.Explanation) *apiv1.Explanation {
	m := &apiv1.Explanation{Owner: ownerPB(e.Owner), Network: e.Network, Pod: podPB(e.Pod), DryRun: e.DryRun,
		Service: e.Service}
	if !e.Time.IsZero() {
		m.TimeUnixNano = e.Time.UnixNano()
	}
	for _, p := range e.Policies {
		m.Policies = append(m.Policies, &apiv1.PolicyStep{Policy: p.Policy, Code: p.Code, Cause: p.Cause,
			Reason: p.Reason, Source: p.Source, Ipv4: p.IPv4, Ipv6: p.IPv6, Error: p.Error, Fallback: p.Fallback})
	}
	for _, v := range e.Pools {
		m.Pools = append(m.Pools, &apiv1.PoolVerdict{Pool: v.Pool, Family: v.Family, Verdict: v.Verdict, By: v.By,
			Cause: v.Cause, Reason: v.Reason, Free: v.Free, Total: v.Total})
	}
	for _, a := range e.Addresses {
		m.Addresses = append(m.Addresses, &apiv1.ChosenAddress{Address: a.Address, Pool: a.Pool, Family: a.Family,
			Block: a.Block, Gateway: a.Gateway})
	}
	if e.Error != nil {
		m.Error = &apiv1.Error{Code: string(e.Error.Code), Message: e.Error.Message, Field: e.Error.Field}
	}
	return m
}

func (t *text) explanation(m *apiv1.Explanation, e *api.Explanation) {
	*e = api.Explanation{Owner: t.owner(m.Owner), Network: t.s(m.Network), Pod: t.pod(m.Pod), DryRun: m.DryRun,
		Service: t.s(m.Service)}
	if m.TimeUnixNano != 0 {
		e.Time = time.Unix(0, m.TimeUnixNano)
	}
	for _, p := range m.Policies {
		e.Policies = append(e.Policies, api.PolicyStep{Policy: t.s(p.Policy), Code: t.s(p.Code), Cause: t.s(p.Cause),
			Reason: t.s(p.Reason), Source: t.s(p.Source), IPv4: t.list(p.Ipv4), IPv6: t.list(p.Ipv6),
			Error: t.s(p.Error), Fallback: p.Fallback})
	}
	for _, v := range m.Pools {
		e.Pools = append(e.Pools, api.PoolVerdict{Pool: t.s(v.Pool), Family: t.s(v.Family), Verdict: t.s(v.Verdict),
			By: t.s(v.By), Cause: t.s(v.Cause), Reason: t.s(v.Reason), Free: v.Free, Total: v.Total})
	}
	for _, a := range m.Addresses {
		e.Addresses = append(e.Addresses, api.ChosenAddress{Address: t.s(a.Address), Pool: t.s(a.Pool),
			Family: t.s(a.Family), Block: t.s(a.Block), Gateway: t.s(a.Gateway)})
	}
	if m.Error != nil {
		e.Error = &api.Error{Code: api.ErrorCode(t.s(m.Error.Code)), Message: t.s(m.Error.Message), Field: t.s(m.Error.Field)}
	}
}

// strMap checks a map's keys and values for UTF-8; nil stays nil.
func (t *text) strMap(m map[string]string) map[string]string {
	for k, v := range m {
		t.s(k)
		t.s(v)
	}
	if len(m) == 0 {
		return nil
	}
	return m
}
