package operator

import (
	"context"
	"log/slog"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/sdk/policy"
)

// SubnetCut grows pool's IPv4 allocation in the AllotSubnet subnet to n addresses as the
// SpiderSubnet controller does, through a client of its own (as another operator replica
// would), and returns the pool's allocation.
func SubnetCut(ctx context.Context, cfg *rest.Config, subnet, pool string, n uint64) ([]string, error) {
	c, err := client.New(cfg, client.Options{Scheme: allotk8s.NewScheme()})
	if err != nil {
		return nil, err
	}
	s := &subnetCtl{c: c, r: c, log: slog.New(slog.DiscardHandler)}
	set, err := s.grow(ctx, poolWant{Pool: pool, Subnet: subnet, Family: policy.IPv4, Interface: "eth0", Size: n}, "Deployment/default/"+pool)
	if err != nil {
		return nil, err
	}
	return set.Strings(), nil
}
