package wasm

import (
	"fmt"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/proto"
)

// This file is the only one that knows how requests and decisions are encoded on the way
// into and out of the guest: protobuf messages of sdk/proto/pluginv1, converted by
// sdk/wire, the same as the go-plugin transport uses.

// marshalOpts: no Deterministic, because the guest decodes labels into Go maps anyway and
// sorting map keys on every request costs time for nothing.
var marshalOpts = proto.MarshalOptions{}

func appendPodRequest(dst []byte, req *policy.PodRequest) ([]byte, error) {
	return marshalOpts.MarshalAppend(dst, wire.PodRequestToProto(req))
}

func appendNodeRequest(dst []byte, req *policy.NodeRequest) ([]byte, error) {
	return marshalOpts.MarshalAppend(dst, wire.NodeRequestToProto(req))
}

// decodePodDecision decodes a frame body. b may be a view into guest memory: proto.Unmarshal
// copies every string it keeps, so the result does not alias b.
func decodePodDecision(b []byte) (policy.PodDecision, error) {
	var m pb.PodDecision
	if err := proto.Unmarshal(b, &m); err != nil {
		return policy.PodDecision{}, fmt.Errorf("%w: decode pod decision: %v", ErrABI, err)
	}
	d, err := wire.PodDecisionFromProto(&m)
	if err != nil {
		return policy.PodDecision{}, fmt.Errorf("%w: %w", ErrABI, err)
	}
	return d, nil
}

func decodeNodeDecision(b []byte) (policy.NodeDecision, error) {
	var m pb.NodeDecision
	if err := proto.Unmarshal(b, &m); err != nil {
		return policy.NodeDecision{}, fmt.Errorf("%w: decode node decision: %v", ErrABI, err)
	}
	d, err := wire.NodeDecisionFromProto(&m)
	if err != nil {
		return policy.NodeDecision{}, fmt.Errorf("%w: %w", ErrABI, err)
	}
	return d, nil
}

// pluginInfo is what allot_plugin_info reports, decoded.
type pluginInfo struct {
	name, version string
}

func decodePluginInfo(b []byte) (pluginInfo, error) {
	var m pb.PluginInfo
	if err := proto.Unmarshal(b, &m); err != nil {
		return pluginInfo{}, fmt.Errorf("%w: decode %s: %v", ErrABI, exportPluginInfo, err)
	}
	if m.Kind != pb.Kind_KIND_POOL_POLICY && m.Kind != pb.Kind_KIND_UNSPECIFIED {
		return pluginInfo{}, fmt.Errorf("%w: %s: kind %s, want %s", ErrABI, exportPluginInfo,
			m.Kind, pb.Kind_KIND_POOL_POLICY)
	}
	return pluginInfo{name: m.Name, version: m.Version}, nil
}
