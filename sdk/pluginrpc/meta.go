package pluginrpc

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	rpc "github.com/allot-ipam/allot/sdk/proto/pluginv1/pluginv1grpc"
)

// Describer is implemented by every client this package dispenses.
type Describer interface {
	// PluginInfo asks the plugin who it is and which contract it speaks.
	PluginInfo(ctx context.Context) (RemoteInfo, error)
	// Ping checks the plugin's gRPC health service (served by go-plugin), bounded by ctx,
	// unlike go-plugin's own Ping which cannot time out.
	Ping(ctx context.Context) error
}

type metaServer struct {
	rpc.UnimplementedMetaServer
	info *pb.PluginInfo
}

func newMetaServer(kind Kind, info Info) *metaServer {
	return &metaServer{info: &pb.PluginInfo{
		Name: info.Name, Version: info.Version, Kind: kindToProto(kind), ContractVersion: kind.ContractVersion(),
	}}
}

func (s *metaServer) GetInfo(context.Context, *pb.GetInfoRequest) (*pb.PluginInfo, error) {
	return s.info, nil
}

type metaClient struct {
	c      rpc.MetaClient
	health healthpb.HealthClient
}

func newMetaClient(cc grpc.ClientConnInterface) metaClient {
	return metaClient{c: rpc.NewMetaClient(cc), health: healthpb.NewHealthClient(cc)}
}

// Ping implements Describer.
func (m metaClient) Ping(ctx context.Context) error {
	resp, err := m.health.Check(ctx, &healthpb.HealthCheckRequest{Service: plugin.GRPCServiceName})
	if err != nil {
		return fromStatus(ctx, "health check", err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health check: plugin reports %s", resp.Status)
	}
	return nil
}

// PluginInfo implements Describer.
func (m metaClient) PluginInfo(ctx context.Context) (RemoteInfo, error) {
	resp, err := m.c.GetInfo(ctx, &pb.GetInfoRequest{})
	if err != nil {
		return RemoteInfo{}, fromStatus(ctx, "meta GetInfo", err)
	}
	return RemoteInfo{
		Name: resp.Name, Version: resp.Version, Kind: kindFromProto(resp.Kind), ContractVersion: resp.ContractVersion,
	}, nil
}

func kindToProto(k Kind) pb.Kind {
	switch k {
	case KindPoolPolicy:
		return pb.Kind_KIND_POOL_POLICY
	case KindCloudBackend:
		return pb.Kind_KIND_CLOUD_BACKEND
	case KindDatapath:
		return pb.Kind_KIND_DATAPATH
	}
	return pb.Kind_KIND_UNSPECIFIED
}

// kindFromProto maps unknown values to "" (the host then refuses the plugin by kind).
func kindFromProto(k pb.Kind) Kind {
	switch k {
	case pb.Kind_KIND_POOL_POLICY:
		return KindPoolPolicy
	case pb.Kind_KIND_CLOUD_BACKEND:
		return KindCloudBackend
	case pb.Kind_KIND_DATAPATH:
		return KindDatapath
	}
	return ""
}
