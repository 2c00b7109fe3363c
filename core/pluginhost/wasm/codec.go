package wasm

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"github.com/allot-ipam/allot/sdk/proto/protoerr"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file is the only one that knows how requests and decisions are encoded on the way
// into and out of the guest: protobuf messages of sdk/proto/pluginv1, converted and
// validated by sdk/wire, the same as the go-plugin transport uses. Pod requests and
// decisions, the hot path, go through sdk/wire's direct encoder and decoder (cheaper than
// building the message tree); everything else through vtprotobuf's generated
// MarshalVT/UnmarshalVT (no reflection).

// Field numbers of sdk/proto/allot/plugin/v1/policy.proto that poolrefs.go reads.
const (
	fPodReqPools = 5
	fPvFree      = 6
)

// errUTF8 is the cause protoerr.Locate wraps when a string is not UTF-8: UnmarshalVT, unlike
// proto.Unmarshal, does not check proto3 strings.
var errUTF8 = errors.New("a string is not valid UTF-8")

// appendPodRequest appends the PodRequest encoding of r to dst (sdk/wire's shared encoder).
func appendPodRequest(dst []byte, r *policy.PodRequest) ([]byte, error) {
	return wire.AppendPodRequest(dst, r)
}

func appendNodeRequest(dst []byte, req *policy.NodeRequest) ([]byte, error) {
	m := wire.NodeRequestToProto(req)
	at := len(dst)
	dst = append(dst, make([]byte, m.SizeVT())...)
	if _, err := m.MarshalToSizedBufferVT(dst[at:]); err != nil {
		return dst[:at], err
	}
	return dst, nil
}

// vtMessage is a generated message with vtprotobuf's decoder.
type vtMessage interface {
	UnmarshalVT([]byte) error
	ProtoReflect() protoreflect.Message
}

// unmarshal decodes b (a view into guest memory: UnmarshalVT copies every string) into m;
// an error is ErrABI and names the field at fault under root ("pod decision.ipv4[1].pool").
// utf8OK reports whether the decoded message's strings are UTF-8.
func unmarshal(root string, b []byte, m vtMessage, utf8OK func() bool) error {
	err := m.UnmarshalVT(b)
	if err == nil && utf8OK() {
		return nil
	}
	if err == nil {
		err = errUTF8
	}
	return fmt.Errorf("%w: decode %w", ErrABI, protoerr.Locate(root, m.ProtoReflect().Descriptor(), b, err))
}

// decodePodDecision decodes a frame body from the guest and validates it: sdk/wire's
// direct decoder (as proto.Unmarshal and wire.PodDecisionFromProto would, in three
// allocations instead of one per message, string and list, twice).
func decodePodDecision(b []byte) (policy.PodDecision, error) {
	d, err := wire.DecodePodDecision(b)
	if err != nil {
		return policy.PodDecision{}, fmt.Errorf("%w: %w", ErrABI, err)
	}
	return d, nil
}

func decodeNodeDecision(b []byte) (policy.NodeDecision, error) {
	var m pb.NodeDecision
	if err := unmarshal("node decision", b, &m, func() bool { return nodeDecisionUTF8(&m) }); err != nil {
		return policy.NodeDecision{}, err
	}
	d, err := wire.NodeDecisionFromProto(&m)
	if err != nil {
		return policy.NodeDecision{}, fmt.Errorf("%w: %w", ErrABI, err)
	}
	return d, nil
}

func nodeDecisionUTF8(m *pb.NodeDecision) bool {
	if !utf8.ValidString(m.Reason) {
		return false
	}
	for _, c := range m.Configs {
		if !utf8.ValidString(c) {
			return false
		}
	}
	return true
}

// pluginInfo is what allot_plugin_info reports, decoded.
type pluginInfo struct {
	name, version string
}

func decodePluginInfo(b []byte) (pluginInfo, error) {
	var m pb.PluginInfo
	utf8OK := func() bool {
		return utf8.ValidString(m.Name) && utf8.ValidString(m.Version) && utf8.ValidString(m.ContractVersion)
	}
	if err := unmarshal(exportPluginInfo, b, &m, utf8OK); err != nil {
		return pluginInfo{}, err
	}
	if m.Kind != pb.Kind_KIND_POOL_POLICY && m.Kind != pb.Kind_KIND_UNSPECIFIED {
		return pluginInfo{}, fmt.Errorf("%w: %s: kind %s, want %s", ErrABI, exportPluginInfo,
			m.Kind, pb.Kind_KIND_POOL_POLICY)
	}
	return pluginInfo{name: m.Name, version: m.Version}, nil
}
