// Package echo is the transport floor of the process-plugin benchmarks: a gRPC unary echo
// served through go-plugin as a pool-policy plugin is (AutoMTLS, unix socket, the server
// options of sdk/pluginrpc's Serve), with no decoding and no policy on either side. The test
// plugin binary serves it instead of its policy when EnvVar is set, so that the echo and the
// policy run in the same binary.
package echo

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/allot-ipam/allot/sdk/pluginrpc"
)

// EnvVar makes the test plugin serve the echo.
const EnvVar = "ALLOT_TEST_ECHO_PLUGIN"

// Method is the echo's full method name.
const Method = "/allot.test.Echo/Echo"

// Codec moves *[]byte as raw bytes and everything else (go-plugin's own services) as
// protobuf. A host passes it per call (grpc.ForceCodecV2).
type Codec struct{}

func (Codec) Name() string { return "proto" }

func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(*[]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
	}
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if b, ok := v.(*[]byte); ok {
		*b = (*b)[:0]
		for _, d := range data {
			*b = append(*b, d.ReadOnlyData()...)
		}
		return nil
	}
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

// Answer is what the echo answers: the size of a pool decision.
var Answer = []byte("\x08\x01\x1a\x09\x0a\x07pool-00\x2a\x0alabel-ann")

var desc = grpc.ServiceDesc{
	ServiceName: "allot.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			out := Answer
			return &out, nil
		},
	}},
}

// Plugin is the go-plugin definition; the host side dispenses the *grpc.ClientConn.
type Plugin struct{ plugin.NetRPCUnsupportedPlugin }

func (Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&desc, struct{}{})
	return nil
}

func (Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return cc, nil
}

// Serve serves the echo with the server options of pluginrpc's Serve helpers
// (pluginrpc.PluginServerOptions: the fixed flow-control window, the stream workers).
func Serve() {
	pluginrpc.Serve(&plugin.ServeConfig{ // not plugin.Serve: pluginrpc diverts stdout until then
		HandshakeConfig: pluginrpc.Handshake,
		Plugins:         plugin.PluginSet{"echo": Plugin{}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, grpc.ForceServerCodecV2(Codec{}))
			return grpc.NewServer(append(opts, pluginrpc.PluginServerOptions()...)...)
		},
	})
}
