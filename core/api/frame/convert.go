package frame

import (
	"time"
	"unicode/utf8"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/apiv1"
)

// Conversion between core/api's Go types and their generated messages (core/api/apiv1).
// To the messages nothing fails; from them, strings are checked for UTF-8 (proto3 requires
// it and the generated decoder leaves it out), the one check the schema implies.

func ownerPB(o api.Owner) *apiv1.Owner {
	return &apiv1.Owner{ContainerId: o.ContainerID, IfName: o.IfName}
}

func podPB(p api.PodRef) *apiv1.PodRef {
	if p == (api.PodRef{}) {
		return nil
	}
	return &apiv1.PodRef{Namespace: p.Namespace, Name: p.Name, Uid: p.UID}
}

func ownersPB(os []api.Owner) []*apiv1.Owner {
	out := make([]*apiv1.Owner, len(os))
	for i, o := range os {
		out[i] = ownerPB(o)
	}
	return out
}

func allocationPB(a *api.Allocation) *apiv1.Allocation {
	m := &apiv1.Allocation{Owner: ownerPB(a.Owner), Network: a.Network, Pod: podPB(a.Pod),
		Ips: make([]*apiv1.IPConfig, len(a.IPs)), Routes: make([]*apiv1.Route, len(a.Routes))}
	for i, ip := range a.IPs {
		m.Ips[i] = &apiv1.IPConfig{Address: ip.Address, Gateway: ip.Gateway, Pool: ip.Pool}
	}
	for i, r := range a.Routes {
		m.Routes[i] = &apiv1.Route{Dst: r.Dst, Gw: r.GW}
	}
	if !a.Created.IsZero() {
		m.CreatedUnixNano = a.Created.UnixNano()
	}
	return m
}

func poolStatusPB(ps []api.PoolStatus) []*apiv1.PoolStatus {
	out := make([]*apiv1.PoolStatus, len(ps))
	for i, p := range ps {
		out[i] = &apiv1.PoolStatus{Name: p.Name, Family: p.Family, Cidrs: p.CIDRs, Usable: p.Usable,
			Used: p.Used, Free: p.Free, Utilization: p.Utilization, Default: p.Default}
	}
	return out
}

func pluginStatusPB(ps []api.PluginStatus) []*apiv1.PluginStatus {
	out := make([]*apiv1.PluginStatus, len(ps))
	for i, p := range ps {
		out[i] = &apiv1.PluginStatus{Name: p.Name, Kind: p.Kind, Transport: p.Transport, Version: p.Version,
			Contract: p.Contract, Healthy: p.Healthy, Restarts: int64(p.Restarts), LastError: p.LastError}
	}
	return out
}

// text collects strings from a decoded message, remembering whether one was not UTF-8; the
// caller then asks protoerr which field it was.
type text struct{ bad bool }

func (t *text) s(v string) string {
	if !t.bad && !utf8.ValidString(v) {
		t.bad = true
	}
	return v
}

func (t *text) list(vs []string) []string {
	for _, v := range vs {
		t.s(v)
	}
	return vs
}

func (t *text) owner(m *apiv1.Owner) api.Owner {
	if m == nil {
		return api.Owner{}
	}
	return api.Owner{ContainerID: t.s(m.ContainerId), IfName: t.s(m.IfName)}
}

func (t *text) pod(m *apiv1.PodRef) api.PodRef {
	if m == nil {
		return api.PodRef{}
	}
	return api.PodRef{Namespace: t.s(m.Namespace), Name: t.s(m.Name), UID: t.s(m.Uid)}
}

// owners keeps "none" as an empty list, as the JSON API sends it.
func (t *text) owners(ms []*apiv1.Owner) []api.Owner {
	out := make([]api.Owner, len(ms))
	for i, m := range ms {
		out[i] = t.owner(m)
	}
	return out
}

func (t *text) allocation(m *apiv1.Allocation, a *api.Allocation) {
	a.Owner, a.Network, a.Pod = t.owner(m.Owner), t.s(m.Network), t.pod(m.Pod)
	// JSON answers always carry "ips"; keep the two protocols alike.
	a.IPs = make([]api.IPConfig, len(m.Ips))
	for i, ip := range m.Ips {
		a.IPs[i] = api.IPConfig{Address: t.s(ip.Address), Gateway: t.s(ip.Gateway), Pool: t.s(ip.Pool)}
	}
	if len(m.Routes) > 0 {
		a.Routes = make([]api.Route, len(m.Routes))
		for i, r := range m.Routes {
			a.Routes[i] = api.Route{Dst: t.s(r.Dst), GW: t.s(r.Gw)}
		}
	}
	if m.CreatedUnixNano != 0 {
		a.Created = time.Unix(0, m.CreatedUnixNano)
	}
}

func (t *text) poolStatus(ms []*apiv1.PoolStatus) []api.PoolStatus {
	out := make([]api.PoolStatus, len(ms))
	for i, m := range ms {
		out[i] = api.PoolStatus{Name: t.s(m.Name), Family: t.s(m.Family), CIDRs: t.list(m.Cidrs), Usable: m.Usable,
			Used: m.Used, Free: m.Free, Utilization: m.Utilization, Default: m.Default}
	}
	return out
}

func (t *text) pluginStatus(ms []*apiv1.PluginStatus) []api.PluginStatus {
	out := make([]api.PluginStatus, len(ms))
	for i, m := range ms {
		out[i] = api.PluginStatus{Name: t.s(m.Name), Kind: t.s(m.Kind), Transport: t.s(m.Transport),
			Version: t.s(m.Version), Contract: t.s(m.Contract), Healthy: m.Healthy, Restarts: int(m.Restarts),
			LastError: t.s(m.LastError)}
	}
	return out
}
