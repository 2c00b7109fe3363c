package pluginrpc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	rpc "github.com/allot-ipam/allot/sdk/proto/pluginv1/pluginv1grpc"
	"github.com/allot-ipam/allot/sdk/wire"
)

// poolPolicyPlugin is the go-plugin definition of the pool-policy kind. impl is set on the
// plugin side only.
type poolPolicyPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl policy.PoolPolicy
	info Info
}

// GRPCServer registers the fast service: serve creates s with serverCodec().
func (p *poolPolicyPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	registerFastPoolPolicy(s, p.impl, p.info)
	return nil
}

func (p *poolPolicyPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return NewPoolPolicyClient(cc), nil
}

// RegisterPoolPolicy registers impl (and Meta) on a gRPC server. ServePoolPolicy does this
// for go-plugin; tests and other hosts may use it directly.
func RegisterPoolPolicy(s grpc.ServiceRegistrar, impl policy.PoolPolicy, info Info) {
	rpc.RegisterPoolPolicyServer(s, &poolPolicyServer{impl: impl})
	rpc.RegisterMetaServer(s, newMetaServer(KindPoolPolicy, info))
}

type poolPolicyServer struct {
	rpc.UnimplementedPoolPolicyServer
	impl  policy.PoolPolicy
	pools pluginPools // served by the fast path only
}

func (s *poolPolicyServer) SelectPodPools(ctx context.Context, m *pb.PodRequest) (*pb.PodDecision, error) {
	req, err := wire.PodRequestFromProto(m)
	if err != nil {
		return nil, toStatus(err)
	}
	d, err := s.impl.SelectPodPools(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return wire.PodDecisionToProto(d), nil
}

func (s *poolPolicyServer) SelectNodeCIDRConfig(ctx context.Context, m *pb.NodeRequest) (*pb.NodeDecision, error) {
	req, err := wire.NodeRequestFromProto(m)
	if err != nil {
		return nil, toStatus(err)
	}
	d, err := s.impl.SelectNodeCIDRConfig(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return wire.NodeDecisionToProto(d), nil
}

// PoolPolicyClient is a policy.PoolPolicy that calls a plugin over gRPC.
type PoolPolicyClient struct {
	metaClient
	cc grpc.ClientConnInterface
	c  rpc.PoolPolicyClient
	// lastReqSize sizes the next request buffer.
	lastReqSize atomic.Int64
	// pools are the pool records the plugin holds (poolrefs.go).
	pools hostPools
}

var (
	_ policy.PoolPolicy = (*PoolPolicyClient)(nil)
	_ Describer         = (*PoolPolicyClient)(nil)
)

// NewPoolPolicyClient returns a pool policy that calls the plugin behind cc.
func NewPoolPolicyClient(cc grpc.ClientConnInterface) *PoolPolicyClient {
	return &PoolPolicyClient{metaClient: newMetaClient(cc), cc: cc, c: rpc.NewPoolPolicyClient(cc)}
}

// SelectPodPools implements policy.PoolPolicy.
func (c *PoolPolicyClient) SelectPodPools(ctx context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	if req == nil {
		return policy.PodDecision{}, fmt.Errorf("%w: pod request is nil", wire.ErrInvalid)
	}
	d, err := c.selectPodPools(ctx, req)
	if errors.Is(err, errPoolRefUnknown) {
		// Another request told the plugin to forget a pool this one referred to: send it
		// again in full.
		c.pools.reset()
		d, err = c.selectPodPools(ctx, req)
	}
	return d, err
}

func (c *PoolPolicyClient) selectPodPools(ctx context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	raw, s, err := c.encodePodRequest(req)
	if err != nil {
		return policy.PodDecision{}, err
	}
	var out podDecisionIn
	if err := c.cc.Invoke(ctx, rpc.PoolPolicy_SelectPodPools_FullMethodName, raw, &out, forceFast); err != nil {
		return policy.PodDecision{}, fromStatus(ctx, "pool-policy SelectPodPools", err)
	}
	c.pools.answered(s, out.held)
	return out.d, out.err
}

// SelectNodeCIDRConfig implements policy.PoolPolicy.
func (c *PoolPolicyClient) SelectNodeCIDRConfig(ctx context.Context, req *policy.NodeRequest) (policy.NodeDecision, error) {
	m, err := c.c.SelectNodeCIDRConfig(ctx, wire.NodeRequestToProto(req))
	if err != nil {
		return policy.NodeDecision{}, fromStatus(ctx, "pool-policy SelectNodeCIDRConfig", err)
	}
	return wire.NodeDecisionFromProto(m)
}
