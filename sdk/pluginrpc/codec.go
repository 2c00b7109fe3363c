package pluginrpc

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
)

// encodedPodRequest is a PodRequest already in protobuf form (wire.AppendPodRequest): the
// client sends it with rawCodec instead of building the generated message tree and
// marshalling it by reflection, which was the largest part of the host's CPU per call. The
// bytes on the wire are a valid PodRequest, so plugins of any SDK version read them.
type encodedPodRequest []byte

// rawCodec marshals encodedPodRequest as is and everything else as the standard protobuf
// codec does. Its name is "proto", so the content type does not change.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(encodedPodRequest); ok {
		return b, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("pluginrpc: cannot marshal %T", v)
	}
	return proto.Marshal(m)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("pluginrpc: cannot unmarshal into %T", v)
	}
	return proto.Unmarshal(data, m)
}

var _ encoding.Codec = rawCodec{}

// forceRaw is the call option that sends an encodedPodRequest.
var forceRaw = grpc.ForceCodec(rawCodec{})

// encodePodRequest encodes req, sizing the buffer from the last request so a call allocates
// one buffer (gRPC owns it once sent).
func (c *PoolPolicyClient) encodePodRequest(req *policy.PodRequest) (encodedPodRequest, error) {
	buf := make([]byte, 0, c.lastReqSize.Load()+256)
	b, err := wire.AppendPodRequest(buf, req)
	if err != nil {
		return nil, fmt.Errorf("%w: pod request: %w", wire.ErrInvalid, err)
	}
	c.lastReqSize.Store(int64(len(b)))
	return encodedPodRequest(b), nil
}
