package pluginrpc

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	rpc "github.com/allot-ipam/allot/sdk/proto/pluginv1/pluginv1grpc"
	"github.com/allot-ipam/allot/sdk/wire"
)

// TestFastServerServesOlderHosts: a host built with an older SDK (generated client,
// proto.Marshal of the message tree) talks to the hand-written server path: same request
// seen by the policy, same answer, validation errors as before. A request larger than one
// gRPC buffer (many pools) is decoded from several pieces.
func TestFastServerServesOlderHosts(t *testing.T) {
	var seen *policy.PodRequest
	impl := fakePolicy{pod: func(_ context.Context, r *policy.PodRequest) (policy.PodDecision, error) {
		seen = r
		return policy.PodDecision{Code: policy.Decided, Reason: "r", IPv4: []policy.Candidate{{Pool: r.Pools[0].Name}},
			IPv6: []policy.Candidate{{Pool: "v6"}}, Source: "s"}, nil
	}}
	srv := poolPolicyServers[1]
	old := rpc.NewPoolPolicyClient(srv.conn(t, impl))
	ctx := context.Background()
	for _, n := range []int{1, 20, 2000} {
		req := benchRequest(n)
		m, err := old.SelectPodPools(ctx, wire.PodRequestToProto(req))
		if err != nil {
			t.Fatalf("%d pools: %v", n, err)
		}
		want := wire.PodDecisionToProto(policy.PodDecision{Code: policy.Decided, Reason: "r",
			IPv4: []policy.Candidate{{Pool: "pool-00"}}, IPv6: []policy.Candidate{{Pool: "v6"}}, Source: "s"})
		if m.String() != want.String() {
			t.Errorf("%d pools: answer %v, want %v", n, m, want)
		}
		if !reflect.DeepEqual(seen, req) {
			t.Errorf("%d pools: policy saw a different request", n)
		}
	}

	_, err := old.SelectPodPools(ctx, &pb.PodRequest{Pools: []*pb.PoolView{{Name: "a"}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "pools[0].family: family unspecified") {
		t.Errorf("invalid request: %v, want InvalidArgument naming pools[0].family", err)
	}
}

// TestFastClientRejectsBadDecision: the host's hand-written decoder validates a plugin's
// answer (here from a generated server, as an older plugin would send it).
func TestFastClientRejectsBadDecision(t *testing.T) {
	impl := fakePolicy{pod: func(context.Context, *policy.PodRequest) (policy.PodDecision, error) {
		return policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: "a"}, {}}}, nil
	}}
	for _, srv := range poolPolicyServers {
		c := NewPoolPolicyClient(srv.conn(t, impl))
		_, err := c.SelectPodPools(context.Background(), benchRequest(2))
		if !errors.Is(err, wire.ErrInvalid) || !strings.Contains(err.Error(), "ipv4[1].pool: empty pool name") {
			t.Errorf("%s: %v, want ErrInvalid naming ipv4[1].pool", srv.name, err)
		}
	}
}

// TestIsRecoverUnary: the fast handler recognises the Serve helpers' interceptor (else it
// would take the slower general path without anyone noticing), and no other.
func TestIsRecoverUnary(t *testing.T) {
	other := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	if !isRecoverUnary(recoverUnary) || isRecoverUnary(other) {
		t.Errorf("isRecoverUnary: recoverUnary %v, another interceptor %v", isRecoverUnary(recoverUnary), isRecoverUnary(other))
	}
}
