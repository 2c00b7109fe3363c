package pluginrpc

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"github.com/allot-ipam/allot/sdk/wire"
)

func benchRequest(n int) *policy.PodRequest {
	req := &policy.PodRequest{
		Pod:       policy.Pod{Namespace: "default", Name: "web-0", UID: "uid", Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"}},
		Namespace: policy.Namespace{Name: "default", Labels: map[string]string{"kubernetes.io/metadata.name": "default"}},
		Node:      policy.Node{Name: "node-1", Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}},
		CNI:       policy.CNIRequest{IfName: "eth0", Network: "allot"},
	}
	for i := range n {
		cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16)
		req.Pools = append(req.Pools, policy.PoolView{
			Name: fmt.Sprintf("pool-%02d", i), Family: policy.IPv4, CIDRs: []netip.Prefix{cidr},
			Total: 65534, Free: 1000, Default: i%3 == 0,
			NodeAffinity: &policy.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": "z1"}},
		})
	}
	return req
}

// BenchmarkWireEncodeDecode: the conversion and protobuf cost of one 20-pool decision,
// both directions, without any transport.
func BenchmarkWireEncodeDecode(b *testing.B) {
	req := benchRequest(20)
	dec := policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: "pool-00"}, {Pool: "pool-03"}}}
	b.ReportAllocs()
	for b.Loop() {
		raw, _ := proto.Marshal(wire.PodRequestToProto(req))
		var m pb.PodRequest
		_ = proto.Unmarshal(raw, &m)
		if _, err := wire.PodRequestFromProto(&m); err != nil {
			b.Fatal(err)
		}
		raw, _ = proto.Marshal(wire.PodDecisionToProto(dec))
		var d pb.PodDecision
		_ = proto.Unmarshal(raw, &d)
		if _, err := wire.PodDecisionFromProto(&d); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPoolPolicyInProcessGRPC: one decision through gRPC in one process (bufconn, no
// TLS): the CPU cost of the go-plugin path minus process hops and TLS.
func BenchmarkPoolPolicyInProcessGRPC(b *testing.B) {
	impl := fakePolicy{pod: func(context.Context, *policy.PodRequest) (policy.PodDecision, error) {
		return policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: "pool-00"}}}, nil
	}}
	cc := connect(b, func(s *grpc.Server) { RegisterPoolPolicy(s, impl, Info{Name: "bench"}) })
	c := NewPoolPolicyClient(cc)
	req := benchRequest(20)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.SelectPodPools(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
