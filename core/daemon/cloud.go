package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"os"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/cloudpool"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/registry"
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
	builtins := map[string]cloud.CloudBackend{}
	for i, cp := range d.cfg.Cloud.Pools {
		backend, err := d.cloudBackend(ctx, cp.Backend, builtins)
		if err != nil {
			return nil, fmt.Errorf("cloud.pools[%d].backend: %w", i, err)
		}
		req := cloudpool.Request{Name: cp.Name, Node: node, Family: cloud.Family(cp.Family), Want: cp.Addresses, Interface: cp.Interface}
		if cp.Gateway != "" {
			req.Gateway = netip.MustParseAddr(cp.Gateway) // validated with the config
		}
		res, err := cloudpool.Fill(ctx, backend, req, d.log.With("component", "cloudpool"))
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

// cloudBackend resolves a backend name: a loaded plugin first, then a built-in (built once
// and shared by the pools that name it).
func (d *Daemon) cloudBackend(ctx context.Context, name string, built map[string]cloud.CloudBackend) (cloud.CloudBackend, error) {
	if l := d.plugins.Loaded(name); l != nil {
		if l.CloudBackend == nil {
			return nil, fmt.Errorf("plugin %q is a %s, not a cloud-backend", name, l.Kind)
		}
		return l.CloudBackend, nil
	}
	if b, ok := built[name]; ok {
		return b, nil
	}
	newBackend, ok := registry.Lookup(d.builtins.Clouds, name)
	if !ok {
		return nil, fmt.Errorf("%q is neither a loaded cloud-backend plugin nor a built-in backend (%s)", name, registry.Names(d.builtins.Clouds))
	}
	b, err := newBackend(ctx, d.cfg.Cloud.Backends[name], d.log.With("component", "cloud", "backend", name))
	if err != nil {
		return nil, fmt.Errorf("cloud.backends.%s: %w", name, err)
	}
	built[name] = b
	return b, nil
}
