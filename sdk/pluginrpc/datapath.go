package pluginrpc

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/allot-ipam/allot/sdk/datapath"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	rpc "github.com/allot-ipam/allot/sdk/proto/pluginv1/pluginv1grpc"
	"github.com/allot-ipam/allot/sdk/wire"
)

type datapathPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl datapath.Datapath
	info Info
}

func (p *datapathPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	RegisterDatapath(s, p.impl, p.info)
	return nil
}

func (p *datapathPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return NewDatapathClient(cc), nil
}

// RegisterDatapath registers impl (and Meta) on a gRPC server.
func RegisterDatapath(s grpc.ServiceRegistrar, impl datapath.Datapath, info Info) {
	rpc.RegisterDatapathServer(s, &datapathServer{impl: impl})
	rpc.RegisterMetaServer(s, newMetaServer(KindDatapath, info))
}

type datapathServer struct {
	rpc.UnimplementedDatapathServer
	impl datapath.Datapath
}

func (s *datapathServer) Apply(ctx context.Context, m *pb.ApplyRequest) (*pb.ApplyResult, error) {
	cfg, err := wire.DatapathConfigFromProto(m.GetConfig())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.impl.Apply(ctx, cfg); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ApplyResult{}, nil
}

func (s *datapathServer) Remove(ctx context.Context, _ *pb.RemoveRequest) (*pb.RemoveResult, error) {
	if err := s.impl.Remove(ctx); err != nil {
		return nil, toStatus(err)
	}
	return &pb.RemoveResult{}, nil
}

func (s *datapathServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.DatapathStatus, error) {
	st, err := s.impl.Status(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return wire.DatapathStatusToProto(st), nil
}

// DatapathClient is a datapath.Datapath that calls a plugin over gRPC.
type DatapathClient struct {
	metaClient
	c rpc.DatapathClient
}

var (
	_ datapath.Datapath = (*DatapathClient)(nil)
	_ Describer         = (*DatapathClient)(nil)
)

// NewDatapathClient returns a datapath that calls the plugin behind cc.
func NewDatapathClient(cc grpc.ClientConnInterface) *DatapathClient {
	return &DatapathClient{metaClient: newMetaClient(cc), c: rpc.NewDatapathClient(cc)}
}

// Apply implements datapath.Datapath.
func (c *DatapathClient) Apply(ctx context.Context, cfg datapath.Config) error {
	_, err := c.c.Apply(ctx, &pb.ApplyRequest{Config: wire.DatapathConfigToProto(cfg)})
	return fromStatus(ctx, "datapath Apply", err)
}

// Remove implements datapath.Datapath.
func (c *DatapathClient) Remove(ctx context.Context) error {
	_, err := c.c.Remove(ctx, &pb.RemoveRequest{})
	return fromStatus(ctx, "datapath Remove", err)
}

// Status implements datapath.Datapath.
func (c *DatapathClient) Status(ctx context.Context) (datapath.Status, error) {
	m, err := c.c.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return datapath.Status{}, fromStatus(ctx, "datapath Status", err)
	}
	return wire.DatapathStatusFromProto(m)
}
