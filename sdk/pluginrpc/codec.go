package pluginrpc

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec fastCodec falls back to
	"google.golang.org/grpc/mem"

	"github.com/allot-ipam/allot/sdk/policy"
	rpc "github.com/allot-ipam/allot/sdk/proto/pluginv1/pluginv1grpc"
	"github.com/allot-ipam/allot/sdk/wire"
)

// The per-decision hot path (SelectPodPools) skips the generated message tree and protobuf
// reflection on both sides: the host encodes the request with wire.AppendPodRequest and
// decodes the answer with wire.DecodePodDecision; the plugin decodes the request with
// wire.DecodePodRequest straight into sdk/policy types and encodes the answer with
// wire.AppendPodDecision. The bytes on the wire are the schema's bytes, so a host or plugin
// built with an older SDK (generated code, proto.Marshal) interoperates either way. Every
// other message goes through the standard protobuf codec.

// encodedPodRequest is a PodRequest already in protobuf form, sent as is.
type encodedPodRequest []byte

// encodedPodDecision is a PodDecision already in protobuf form, sent as is.
type encodedPodDecision []byte

// podRequestIn receives a PodRequest: the codec decodes it in place and keeps a validation
// error for the handler, which answers it as an ErrInvalid status as before (a codec error
// would become an opaque Internal error).
type podRequestIn struct {
	req     *policy.PodRequest
	refs    refsIn // pool references (poolrefs.go)
	err     error
	slotBuf [24]slot // refs.slots' first backing array, allocated with the rest
}

// podDecisionIn receives a PodDecision, likewise.
type podDecisionIn struct {
	d    policy.PodDecision
	held bool // the plugin holds the pools the request sent with ids (poolrefs.go)
	err  error
}

// fastCodec handles the types above and delegates everything else to the registered
// "proto" codec. Its name is "proto", so the content type does not change.
type fastCodec struct{ std encoding.CodecV2 }

func newFastCodec() fastCodec { return fastCodec{std: encoding.GetCodecV2("proto")} }

func (fastCodec) Name() string { return "proto" }

func (c fastCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch v := v.(type) {
	case encodedPodRequest:
		return mem.BufferSlice{mem.SliceBuffer(v)}, nil
	case encodedPodDecision:
		return mem.BufferSlice{mem.SliceBuffer(v)}, nil
	}
	return c.std.Marshal(v)
}

func (c fastCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch v := v.(type) {
	case *podRequestIn:
		b := contiguous(data)
		v.req, v.err = wire.DecodePodRequest(b)
		if v.err == nil {
			if v.refs, v.err = scanRefs(b, v.slotBuf[:0]); v.err != nil {
				v.err = fmt.Errorf("%w: pod request: %w", wire.ErrInvalid, v.err)
			}
		}
		return nil
	case *podDecisionIn:
		b := contiguous(data)
		v.d, v.err = wire.DecodePodDecision(b)
		v.held = scanHeld(b)
		return nil
	}
	return c.std.Unmarshal(data, v)
}

// contiguous returns the message as one slice, copying only if gRPC received it in pieces.
// The decoders copy what they keep, so the buffers may be reused once they return.
func contiguous(data mem.BufferSlice) []byte {
	if len(data) == 1 {
		return data[0].ReadOnlyData()
	}
	return data.Materialize()
}

var _ encoding.CodecV2 = fastCodec{}

// forceFast is the client call option of the hot path.
var forceFast = grpc.ForceCodecV2(newFastCodec())

// serverCodec is the server option that lets the plugin side decode requests by hand; a
// server serving the fast pool-policy service (registerFastPoolPolicy) must have it.
func serverCodec() grpc.ServerOption { return grpc.ForceServerCodecV2(newFastCodec()) }

// encodePodRequest encodes req with pool references, sizing the buffer from the last request
// so a call allocates one buffer (gRPC owns it once sent).
func (c *PoolPolicyClient) encodePodRequest(req *policy.PodRequest) (encodedPodRequest, sent, error) {
	b, s, err := c.pools.encode(make([]byte, 0, c.lastReqSize.Load()+64), req)
	if err != nil {
		return nil, sent{}, fmt.Errorf("%w: pod request: %w", wire.ErrInvalid, err)
	}
	c.lastReqSize.Store(int64(len(b)))
	return encodedPodRequest(b), s, nil
}

// fastPoolPolicyDesc is PoolPolicy_ServiceDesc with SelectPodPools served through
// fastCodec. Same service and method names: hosts see no difference.
var fastPoolPolicyDesc = func() grpc.ServiceDesc {
	d := rpc.PoolPolicy_ServiceDesc
	d.Methods = append([]grpc.MethodDesc(nil), d.Methods...)
	for i := range d.Methods {
		if d.Methods[i].MethodName == "SelectPodPools" {
			d.Methods[i].Handler = fastSelectPodPoolsHandler
		}
	}
	return d
}()

func fastSelectPodPoolsHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(podRequestIn)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(*poolPolicyServer)
	if interceptor == nil {
		return s.selectPodPoolsFast(ctx, in)
	}
	if isRecoverUnary(interceptor) {
		// The Serve helpers' only interceptor: recovering here does what it does without
		// the call info and closure it costs per call.
		return s.selectPodPoolsRecovered(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rpc.PoolPolicy_SelectPodPools_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return s.selectPodPoolsFast(ctx, req.(*podRequestIn))
	})
}

func (s *poolPolicyServer) selectPodPoolsRecovered(ctx context.Context, in *podRequestIn) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, panicked(rpc.PoolPolicy_SelectPodPools_FullMethodName, r)
		}
	}()
	return s.selectPodPoolsFast(ctx, in)
}

func (s *poolPolicyServer) selectPodPoolsFast(ctx context.Context, in *podRequestIn) (any, error) {
	if in.err != nil {
		return nil, toStatus(in.err)
	}
	if err := s.pools.resolve(in.req, in.refs); err != nil {
		return nil, toStatus(err)
	}
	d, err := s.impl.SelectPodPools(ctx, in.req)
	if err != nil {
		return nil, toStatus(err)
	}
	out := wire.AppendPodDecision(make([]byte, 0, 64), d)
	if in.refs.ids {
		out = appendHeld(out)
	}
	return encodedPodDecision(out), nil
}

// registerFastPoolPolicy is RegisterPoolPolicy for a server created with serverCodec().
func registerFastPoolPolicy(s grpc.ServiceRegistrar, impl policy.PoolPolicy, info Info) {
	s.RegisterService(&fastPoolPolicyDesc, &poolPolicyServer{impl: impl})
	rpc.RegisterMetaServer(s, newMetaServer(KindPoolPolicy, info))
}
