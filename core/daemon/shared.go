package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/allot-ipam/allot/core/agent"
	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/explain"
	"github.com/allot-ipam/allot/core/registry"
	"github.com/allot-ipam/allot/core/sharedpool"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Shared pools in agent mode: requests of the networks listed in cluster.sharedPools.networks
// go to the agent's shared-pool allocator, all others to the node's ipam.Manager.

// sharedOptions returns the agent's shared-pool options, nil when no network is shared.
func sharedOptions(cfg *config.Config, builtins *registry.Registry, plugins *Plugins) (*agent.SharedOptions, error) {
	if len(cfg.Cluster.SharedPools.Networks) == 0 {
		return nil, nil
	}
	name := builtins.Roles.SharedPolicy
	def, err := builtins.NewPolicy(name, cfg.Policy.Config[name])
	if err != nil {
		return nil, fmt.Errorf("policy.config.%s: %w", name, err)
	}
	def = explain.Named(name, def) // allotctl explain names it as it names a chain's policies
	kv := cfg.Cluster.SharedPools.KubevirtStaticIP
	return &agent.SharedOptions{
		// A network with its own chain in policy.networks uses it; the others get the
		// registry's shared policy, spiderpool-priority for allotd (the agent's default
		// chain, cilium-annotations, knows nothing of shared pools).
		Policy: func(network string) policy.PoolPolicy {
			if _, ok := cfg.Policy.Networks[network]; ok {
				return plugins.PolicyFor(network)
			}
			return def
		},
		PolicyTimeout:   cfg.Policy.Timeout,
		DisableKubeVirt: kv != nil && !*kv,
	}, nil
}

// sharedRouter is the api.Service of an agent with shared pools.
type sharedRouter struct {
	ipam     api.Service
	shared   *sharedpool.Allocator
	isShared func(network string) bool
}

var _ api.Service = (*sharedRouter)(nil)

// serviceFor returns the API service: the manager alone, or the router when shared pools
// are on.
func serviceFor(cfg *config.Config, m api.Service, ag *agent.Agent) api.Service {
	if ag == nil || ag.Shared() == nil {
		return m
	}
	return &sharedRouter{ipam: m, shared: ag.Shared(), isShared: cfg.Cluster.SharedPools.SharedNetwork}
}

// AllocateDryRun routes a dry run (allotctl explain --dry-run) as Allocate routes the ADD.
func (r *sharedRouter) AllocateDryRun(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	var svc any = r.ipam
	if r.isShared(req.Network) {
		svc = r.shared
	}
	dr, ok := svc.(explain.DryRunner)
	if !ok {
		return nil, api.Errorf(api.CodeInternal, "network %q: no dry run for its allocator", req.Network)
	}
	return dr.AllocateDryRun(ctx, req)
}

func (r *sharedRouter) Allocate(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	if r.isShared(req.Network) {
		return r.shared.Allocate(ctx, req)
	}
	return r.ipam.Allocate(ctx, req)
}

// Release: by network; an older allot-cni sends none, and then both allocators are asked
// (each frees only what the owner holds in it).
func (r *sharedRouter) Release(ctx context.Context, req *api.ReleaseRequest) error {
	switch {
	case r.isShared(req.Network):
		return r.shared.Release(ctx, req)
	case req.Network != "":
		return r.ipam.Release(ctx, req)
	}
	return errors.Join(r.ipam.Release(ctx, req), r.shared.Release(ctx, req))
}

func (r *sharedRouter) Check(ctx context.Context, req *api.CheckRequest) (*api.Allocation, error) {
	switch {
	case r.isShared(req.Network):
		return r.shared.Check(ctx, req)
	case req.Network != "":
		return r.ipam.Check(ctx, req)
	}
	al, err := r.ipam.Check(ctx, req)
	if api.CodeOf(err) == api.CodeNotFound {
		return r.shared.Check(ctx, req)
	}
	return al, err
}

func (r *sharedRouter) GC(ctx context.Context, req *api.GCRequest) (*api.GCResponse, error) {
	if r.isShared(req.Network) {
		return r.shared.GC(ctx, req)
	}
	return r.ipam.GC(ctx, req)
}

// Status is the manager's, with the shared pools added; not ready until the shared pools
// have been read.
func (r *sharedRouter) Status(ctx context.Context) (*api.Status, error) {
	st, err := r.ipam.Status(ctx)
	if err != nil {
		return st, err
	}
	ps, _ := r.shared.Pools(ctx)
	st.Pools = append(st.Pools, ps...)
	if al, err := r.shared.Allocations(ctx); err == nil {
		st.Allocations += len(al)
	}
	if !r.shared.Synced() {
		st.Ready = false
		st.Message = "shared pools: not read from the API server yet"
	}
	return st, nil
}

func (r *sharedRouter) Pools(ctx context.Context) ([]api.PoolStatus, error) {
	ps, err := r.ipam.Pools(ctx)
	if err != nil {
		return ps, err
	}
	sp, _ := r.shared.Pools(ctx)
	return append(ps, sp...), nil
}

func (r *sharedRouter) Allocations(ctx context.Context) ([]api.Allocation, error) {
	al, err := r.ipam.Allocations(ctx)
	if err != nil {
		return al, err
	}
	sa, _ := r.shared.Allocations(ctx)
	al = append(al, sa...)
	slices.SortStableFunc(al, func(x, y api.Allocation) int { return strings.Compare(x.Owner.String(), y.Owner.String()) })
	return al, nil
}

func (r *sharedRouter) Plugins(ctx context.Context) ([]api.PluginStatus, error) {
	return r.ipam.Plugins(ctx)
}
