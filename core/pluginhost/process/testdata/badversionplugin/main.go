// Command badversionplugin claims a pool-policy contract of another major version.
package main

import (
	"context"
	"os"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/allot-ipam/allot/sdk/pluginrpc"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	rpc "github.com/allot-ipam/allot/sdk/proto/pluginv1/pluginv1grpc"
)

type meta struct{ rpc.UnimplementedMetaServer }

func (meta) GetInfo(context.Context, *pb.GetInfoRequest) (*pb.PluginInfo, error) {
	v := "2.0.0"
	if s := os.Getenv("TEST_CONTRACT_VERSION"); s != "" {
		v = s
	}
	return &pb.PluginInfo{Name: "future", Version: "9.0.0", Kind: pb.Kind_KIND_POOL_POLICY, ContractVersion: v}, nil
}

type metaOnly struct{ plugin.NetRPCUnsupportedPlugin }

func (metaOnly) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	rpc.RegisterMetaServer(s, meta{})
	return nil
}

func (metaOnly) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, nil
}

func main() {
	pluginrpc.Serve(&plugin.ServeConfig{
		HandshakeConfig: pluginrpc.Handshake,
		Plugins:         plugin.PluginSet{string(pluginrpc.KindPoolPolicy): metaOnly{}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}
