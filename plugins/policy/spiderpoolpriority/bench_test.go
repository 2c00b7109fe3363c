package spiderpoolpriority

import (
	"context"
	"fmt"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

// benchRequest is a realistic cluster: 20 pools (16 IPv4, 4 IPv6) spread over 4 zones by node
// affinity, some namespace-bound, one pod-bound, one Multus-bound, a few full or disabled.
func benchRequest() *policy.PodRequest {
	var pools []policy.PoolView
	for i := range 16 {
		p := v4(fmt.Sprintf("pool-%02d", i), subnet(fmt.Sprintf("subnet-%d", i%2)))
		p.Default = i%4 == 0
		switch i % 4 {
		case 1:
			p.NodeAffinity = &policy.LabelSelector{MatchLabels: map[string]string{"zone": fmt.Sprintf("z%d", i%3)}}
		case 2:
			p.NamespaceName = []string{"team-a", "team-b"}
		case 3:
			p.NodeName = []string{"n1", "n2"}
		}
		if i == 5 {
			p.PodAffinity = &policy.LabelSelector{MatchExpressions: []policy.Requirement{{Key: "app", Operator: policy.OpIn, Values: []string{"web", "api"}}}}
		}
		if i == 7 {
			p.Free = 0
		}
		if i == 9 {
			p.Disabled = true
		}
		if i == 11 {
			p.MultusName = []string{"kube-system/macvlan"}
		}
		pools = append(pools, p)
	}
	for i := range 4 {
		p := v6(fmt.Sprintf("pool-v6-%d", i))
		p.Default = i <= 1
		p.NodeAffinity = &policy.LabelSelector{MatchLabels: map[string]string{"zone": fmt.Sprintf("z%d", i)}}
		pools = append(pools, p)
	}
	return request(pools)
}

func benchmark(b *testing.B, req *policy.PodRequest) {
	p := New()
	ctx := context.Background()
	d, err := p.SelectPodPools(ctx, req)
	if err != nil || d.Code != policy.Decided {
		b.Fatalf("setup: %v %v %q", d.Code, err, d.Reason)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = p.SelectPodPools(ctx, req)
	}
}

// BenchmarkDecision: cluster default pools, 20 pools with affinities (the common path).
func BenchmarkDecision(b *testing.B) {
	benchmark(b, benchRequest())
}

// BenchmarkDecisionIPPoolsAnnotation: the pod names its pools per interface with a pattern.
func BenchmarkDecisionIPPoolsAnnotation(b *testing.B) {
	req := benchRequest()
	req.Pod.Annotations[AnnoIPPools] = `[{"interface":"eth0","ipv4":["pool-0*"],"ipv6":["pool-v6-1"]},{"interface":"net1","ipv4":["pool-12"]}]`
	benchmark(b, req)
}

// BenchmarkDecisionCNIDefaults: CNI config defaults, no annotation to parse.
func BenchmarkDecisionCNIDefaults(b *testing.B) {
	req := benchRequest()
	req.CNI.DefaultIPv4Pools = []string{"pool-03", "pool-01", "pool-02", "pool-00"}
	req.CNI.DefaultIPv6Pools = []string{"pool-v6-1"}
	benchmark(b, req)
}
