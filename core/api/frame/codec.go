package frame

import (
	"fmt"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/apiv1"
	"github.com/allot-ipam/allot/sdk/proto/protoerr"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Payloads are the generated messages of core/api/proto/allot/api/v1/api.proto, encoded by
// the code protoc-gen-go-vtproto generated (no reflection on the CNI path). Zero values are
// left out, repeated fields repeat, unknown fields are skipped, so fields can be added
// without breaking older peers. The release answer is empty.

// vtMessage is what protoc-gen-go-vtproto generates for every message.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
	UnmarshalVT([]byte) error
	ProtoReflect() protoreflect.Message
}

// appendVT appends m's encoding to b.
func appendVT(b []byte, m vtMessage) []byte {
	n := m.SizeVT()
	at := len(b)
	b = append(b, make([]byte, n)...)
	// Marshalling into a buffer of SizeVT bytes fails only for a message changed meanwhile.
	if _, err := m.MarshalToSizedBufferVT(b[at:]); err != nil {
		panic(fmt.Sprintf("frame: marshal %T: %v", m, err))
	}
	return b
}

// unmarshal decodes b into m; an error names the field at fault under root
// ("allocate.owner.ifName: wire type 0, want bytes").
func unmarshal(root string, b []byte, m vtMessage) error {
	if err := m.UnmarshalVT(b); err != nil {
		return protoerr.Locate(root, m.ProtoReflect().Descriptor(), b, err)
	}
	return nil
}

// checked turns a failed UTF-8 check of the conversion into an error naming the field.
func checked(root string, b []byte, m vtMessage, t *text) error {
	if !t.bad {
		return nil
	}
	return protoerr.Locate(root, m.ProtoReflect().Descriptor(), b, fmt.Errorf("a string is not valid UTF-8"))
}

// AppendAllocateRequest appends r's encoding.
func AppendAllocateRequest(b []byte, r *api.AllocateRequest) []byte {
	return appendAllocateRequestWire(b, r)
}

// AppendReleaseRequest appends r's encoding.
func AppendReleaseRequest(b []byte, r *api.ReleaseRequest) []byte {
	return appendVT(b, &apiv1.ReleaseRequest{Owner: ownerPB(r.Owner), Network: r.Network, Pod: podPB(r.Pod)})
}

// AppendCheckRequest appends r's encoding.
func AppendCheckRequest(b []byte, r *api.CheckRequest) []byte {
	return appendVT(b, &apiv1.CheckRequest{Owner: ownerPB(r.Owner), Network: r.Network, Pod: podPB(r.Pod)})
}

// AppendGCRequest appends r's encoding.
func AppendGCRequest(b []byte, r *api.GCRequest) []byte {
	return appendVT(b, &apiv1.GCRequest{Network: r.Network, Valid: ownersPB(r.Valid)})
}

// AppendGCResponse appends r's encoding.
func AppendGCResponse(b []byte, r *api.GCResponse) []byte {
	return appendVT(b, &apiv1.GCResponse{Released: ownersPB(r.Released)})
}

// AppendAllocation appends a's encoding.
func AppendAllocation(b []byte, a *api.Allocation) []byte { return appendAllocationWire(b, a) }

// AppendError appends e's encoding.
func AppendError(b []byte, e *api.Error) []byte {
	return appendVT(b, &apiv1.Error{Code: string(e.Code), Message: e.Message, Field: e.Field})
}

// AppendStatus appends s's encoding.
func AppendStatus(b []byte, s *api.Status) []byte {
	return appendVT(b, &apiv1.Status{Ready: s.Ready, Message: s.Message, Version: s.Version, Mode: s.Mode,
		Uptime: s.Uptime, Pools: poolStatusPB(s.Pools), Allocations: int64(s.Allocations)})
}

// AppendPools appends the encoding of a pool list.
func AppendPools(b []byte, ps []api.PoolStatus) []byte {
	return appendVT(b, &apiv1.PoolList{Pools: poolStatusPB(ps)})
}

// AppendAllocations appends the encoding of an allocation list.
func AppendAllocations(b []byte, as []api.Allocation) []byte {
	m := &apiv1.AllocationList{Allocations: make([]*apiv1.Allocation, len(as))}
	for i := range as {
		m.Allocations[i] = allocationPB(&as[i])
	}
	return appendVT(b, m)
}

// AppendPlugins appends the encoding of a plugin list.
func AppendPlugins(b []byte, ps []api.PluginStatus) []byte {
	return appendVT(b, &apiv1.PluginList{Plugins: pluginStatusPB(ps)})
}

// DecodeAllocateRequest decodes an allocate request.
func DecodeAllocateRequest(b []byte, r *api.AllocateRequest) error {
	if decodeAllocateRequestWire(b, r) {
		return nil
	}
	var m apiv1.AllocateRequest
	if err := unmarshal("allocate", b, &m); err != nil {
		return err
	}
	var t text
	*r = api.AllocateRequest{Owner: t.owner(m.Owner), Network: t.s(m.Network), Pod: t.pod(m.Pod),
		Pools: t.list(m.Pools), IPs: t.list(m.Ips),
		DefaultIPv4Pools: t.list(m.DefaultIpv4Pools), DefaultIPv6Pools: t.list(m.DefaultIpv6Pools)}
	return checked("allocate", b, &m, &t)
}

// DecodeReleaseRequest decodes a release request.
func DecodeReleaseRequest(b []byte, r *api.ReleaseRequest) error {
	var m apiv1.ReleaseRequest
	if err := unmarshal("release", b, &m); err != nil {
		return err
	}
	var t text
	*r = api.ReleaseRequest{Owner: t.owner(m.Owner), Network: t.s(m.Network), Pod: t.pod(m.Pod)}
	return checked("release", b, &m, &t)
}

// DecodeCheckRequest decodes a check request.
func DecodeCheckRequest(b []byte, r *api.CheckRequest) error {
	var m apiv1.CheckRequest
	if err := unmarshal("check", b, &m); err != nil {
		return err
	}
	var t text
	*r = api.CheckRequest{Owner: t.owner(m.Owner), Network: t.s(m.Network), Pod: t.pod(m.Pod)}
	return checked("check", b, &m, &t)
}

// DecodeGCRequest decodes a GC request; "nothing is valid" is an empty list, as allot-cni
// sends it in JSON.
func DecodeGCRequest(b []byte, r *api.GCRequest) error {
	var m apiv1.GCRequest
	if err := unmarshal("gc", b, &m); err != nil {
		return err
	}
	var t text
	*r = api.GCRequest{Network: t.s(m.Network), Valid: t.owners(m.Valid)}
	return checked("gc", b, &m, &t)
}

// DecodeGCResponse decodes a GC answer.
func DecodeGCResponse(b []byte, r *api.GCResponse) error {
	var m apiv1.GCResponse
	if err := unmarshal("gcResponse", b, &m); err != nil {
		return err
	}
	var t text
	*r = api.GCResponse{Released: t.owners(m.Released)}
	return checked("gcResponse", b, &m, &t)
}

// DecodeAllocation decodes an allocation.
func DecodeAllocation(b []byte, a *api.Allocation) error {
	if decodeAllocationWire(b, a) {
		return nil
	}
	var m apiv1.Allocation
	if err := unmarshal("allocation", b, &m); err != nil {
		return err
	}
	var t text
	*a = api.Allocation{}
	t.allocation(&m, a)
	return checked("allocation", b, &m, &t)
}

// DecodeError decodes an error answer.
func DecodeError(b []byte) (*api.Error, error) {
	var m apiv1.Error
	if err := unmarshal("error", b, &m); err != nil {
		return &api.Error{}, err
	}
	var t text
	e := &api.Error{Code: api.ErrorCode(t.s(m.Code)), Message: t.s(m.Message), Field: t.s(m.Field)}
	if err := checked("error", b, &m, &t); err != nil {
		return e, err
	}
	if e.Code == "" {
		return e, fmt.Errorf("error.code: missing")
	}
	return e, nil
}

// DecodeStatus decodes a status answer.
func DecodeStatus(b []byte, s *api.Status) error {
	var m apiv1.Status
	if err := unmarshal("status", b, &m); err != nil {
		return err
	}
	var t text
	*s = api.Status{Ready: m.Ready, Message: t.s(m.Message), Version: t.s(m.Version), Mode: t.s(m.Mode),
		Uptime: t.s(m.Uptime), Pools: t.poolStatus(m.Pools), Allocations: int(m.Allocations)}
	return checked("status", b, &m, &t)
}

// DecodePools decodes a pool list.
func DecodePools(b []byte) ([]api.PoolStatus, error) {
	var m apiv1.PoolList
	if err := unmarshal("pools", b, &m); err != nil {
		return nil, err
	}
	var t text
	out := t.poolStatus(m.Pools)
	return out, checked("pools", b, &m, &t)
}

// DecodeAllocations decodes an allocation list.
func DecodeAllocations(b []byte) ([]api.Allocation, error) {
	var m apiv1.AllocationList
	if err := unmarshal("allocations", b, &m); err != nil {
		return nil, err
	}
	var t text
	out := make([]api.Allocation, len(m.Allocations))
	for i, a := range m.Allocations {
		t.allocation(a, &out[i])
	}
	return out, checked("allocations", b, &m, &t)
}

// DecodePlugins decodes a plugin list.
func DecodePlugins(b []byte) ([]api.PluginStatus, error) {
	var m apiv1.PluginList
	if err := unmarshal("plugins", b, &m); err != nil {
		return nil, err
	}
	var t text
	out := t.pluginStatus(m.Plugins)
	return out, checked("plugins", b, &m, &t)
}
