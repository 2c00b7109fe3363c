package wasm

import (
	"fmt"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/proto"
)

// This file and encode.go are the only ones that know how requests and decisions are encoded
// on the way into and out of the guest: protobuf messages of sdk/proto/pluginv1, converted
// by sdk/wire, the same as the go-plugin transport uses. Node requests (rare) go through
// the generated messages; pod requests, the hot path, through encode.go's direct encoder.

// marshalOpts: no Deterministic, because the guest decodes labels into Go maps anyway and
// sorting map keys on every request costs time for nothing.
var marshalOpts = proto.MarshalOptions{}

func appendNodeRequest(dst []byte, req *policy.NodeRequest) ([]byte, error) {
	return marshalOpts.MarshalAppend(dst, wire.NodeRequestToProto(req))
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
