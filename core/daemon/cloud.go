package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"os"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/cloudpool"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/sdk/cloud"
)

// fillCloudPools builds the pools whose addresses a cloud backend assigns to this node.
func (d *Daemon) fillCloudPools(ctx context.Context) ([]ipam.PoolSpec, error) {
	if len(d.cfg.Cloud.Pools) == 0 {
		return nil, nil
	}
	n := d.cfg.Cloud.Node
	if n.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("cloud.node.name: not set and the host name is unknown: %w", err)
		}
		n.Name = h
	}
	node := cloud.NodeRef{Name: n.Name, ProviderID: n.ProviderID, InstanceType: n.InstanceType, Zone: n.Zone}
	var out []ipam.PoolSpec
	for i, cp := range d.cfg.Cloud.Pools {
		l := d.plugins.Loaded(cp.Backend)
		if l == nil || l.CloudBackend == nil {
			return nil, fmt.Errorf("cloud.pools[%d].backend: %q is not a loaded cloud-backend plugin", i, cp.Backend)
		}
		req := cloudpool.Request{Name: cp.Name, Node: node, Family: cloud.Family(cp.Family), Want: cp.Addresses, Interface: cp.Interface}
		if cp.Gateway != "" {
			req.Gateway = netip.MustParseAddr(cp.Gateway) // validated with the config
		}
		res, err := cloudpool.Fill(ctx, l.CloudBackend, req, d.log.With("component", "cloudpool"))
		if err != nil {
			return nil, fmt.Errorf("cloud.pools[%d]: %w", i, err)
		}
		spec := ipam.PoolSpec{Allocator: res.Allocator, Default: cp.Default}
		for _, r := range cp.Routes {
			spec.Routes = append(spec.Routes, api.Route{Dst: r.Dst, GW: r.GW})
		}
		out = append(out, spec)
	}
	return out, nil
}
