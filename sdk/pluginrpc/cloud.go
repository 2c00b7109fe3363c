package pluginrpc

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/allot-ipam/allot/sdk/cloud"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	rpc "github.com/allot-ipam/allot/sdk/proto/pluginv1/pluginv1grpc"
	"github.com/allot-ipam/allot/sdk/wire"
)

type cloudBackendPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl cloud.CloudBackend
	info Info
}

func (p *cloudBackendPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	RegisterCloudBackend(s, p.impl, p.info)
	return nil
}

func (p *cloudBackendPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return NewCloudBackendClient(cc), nil
}

// RegisterCloudBackend registers impl (and Meta) on a gRPC server.
func RegisterCloudBackend(s grpc.ServiceRegistrar, impl cloud.CloudBackend, info Info) {
	rpc.RegisterCloudBackendServer(s, &cloudBackendServer{impl: impl})
	rpc.RegisterMetaServer(s, newMetaServer(KindCloudBackend, info))
}

type cloudBackendServer struct {
	rpc.UnimplementedCloudBackendServer
	impl cloud.CloudBackend
}

func (s *cloudBackendServer) Inventory(ctx context.Context, m *pb.InventoryRequest) (*pb.NodeInventory, error) {
	node, err := wire.NodeRefFromProto(m.GetNode())
	if err != nil {
		return nil, toStatus(err)
	}
	inv, err := s.impl.Inventory(ctx, node)
	if err != nil {
		return nil, toStatus(err)
	}
	return wire.NodeInventoryToProto(inv), nil
}

func (s *cloudBackendServer) Allocate(ctx context.Context, m *pb.AllocateRequest) (*pb.AllocateResult, error) {
	req, err := wire.AllocateRequestFromProto(m)
	if err != nil {
		return nil, toStatus(err)
	}
	res, err := s.impl.Allocate(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return wire.AllocateResultToProto(res), nil
}

func (s *cloudBackendServer) CreateInterface(ctx context.Context, m *pb.CreateInterfaceRequest) (*pb.Interface, error) {
	req, err := wire.CreateInterfaceRequestFromProto(m)
	if err != nil {
		return nil, toStatus(err)
	}
	ifc, err := s.impl.CreateInterface(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return wire.InterfaceToProto(ifc), nil
}

func (s *cloudBackendServer) Release(ctx context.Context, m *pb.ReleaseRequest) (*pb.ReleaseResult, error) {
	req, err := wire.ReleaseRequestFromProto(m)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.impl.Release(ctx, req); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ReleaseResult{}, nil
}

// CloudBackendClient is a cloud.CloudBackend that calls a plugin over gRPC.
type CloudBackendClient struct {
	metaClient
	c rpc.CloudBackendClient
}

var (
	_ cloud.CloudBackend = (*CloudBackendClient)(nil)
	_ Describer          = (*CloudBackendClient)(nil)
)

// NewCloudBackendClient returns a cloud backend that calls the plugin behind cc.
func NewCloudBackendClient(cc grpc.ClientConnInterface) *CloudBackendClient {
	return &CloudBackendClient{metaClient: newMetaClient(cc), c: rpc.NewCloudBackendClient(cc)}
}

// Inventory implements cloud.CloudBackend.
func (c *CloudBackendClient) Inventory(ctx context.Context, node cloud.NodeRef) (cloud.NodeInventory, error) {
	m, err := c.c.Inventory(ctx, &pb.InventoryRequest{Node: wire.NodeRefToProto(node)})
	if err != nil {
		return cloud.NodeInventory{}, fromStatus(ctx, "cloud-backend Inventory", err)
	}
	return wire.NodeInventoryFromProto(m)
}

// Allocate implements cloud.CloudBackend.
func (c *CloudBackendClient) Allocate(ctx context.Context, req cloud.AllocateRequest) (cloud.AllocateResult, error) {
	m, err := c.c.Allocate(ctx, wire.AllocateRequestToProto(req))
	if err != nil {
		return cloud.AllocateResult{}, fromStatus(ctx, "cloud-backend Allocate", err)
	}
	return wire.AllocateResultFromProto(req, m)
}

// CreateInterface implements cloud.CloudBackend.
func (c *CloudBackendClient) CreateInterface(ctx context.Context, req cloud.CreateInterfaceRequest) (cloud.Interface, error) {
	m, err := c.c.CreateInterface(ctx, wire.CreateInterfaceRequestToProto(req))
	if err != nil {
		return cloud.Interface{}, fromStatus(ctx, "cloud-backend CreateInterface", err)
	}
	return wire.InterfaceFromProto(m)
}

// Release implements cloud.CloudBackend.
func (c *CloudBackendClient) Release(ctx context.Context, req cloud.ReleaseRequest) error {
	_, err := c.c.Release(ctx, wire.ReleaseRequestToProto(req))
	return fromStatus(ctx, "cloud-backend Release", err)
}
