package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/allot-ipam/allot/core/sharedpool"
	"github.com/allot-ipam/allot/sdk/policy"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Shared pools (Spiderpool style). With Options.Shared set, the agent also serves CNI networks
// whose addresses come from SharedIPPools: its informer cache additionally watches
// SharedIPPool, ReservedIP and AddressClaim cluster-wide (they feed the allocator's index), and
// a sharedpool.Allocator answers for those networks (the daemon routes by network). Pods'
// AllotEndpoints are not cached: the allocator reads the one pod it serves directly.

// SharedOptions configure the agent's shared-pool allocator.
type SharedOptions struct {
	// Policy returns the pool policy of a network (sharedpool.Options.Policy: required).
	Policy func(network string) policy.PoolPolicy
	// PolicyTimeout bounds a policy decision.
	PolicyTimeout time.Duration
	// QPS and Burst of the allocator's own API client (defaults 100 and 200): a burst of
	// pods on a node makes about two writes each, and client-go's default of 5 QPS would
	// make them queue behind each other.
	QPS   float32
	Burst int
	// DisableKubeVirt treats virt-launcher pods as any pod (sharedpool.Options).
	DisableKubeVirt bool
}

// sharedCacheObjects adds the shared kinds to the informer cache's objects.
func sharedCacheObjects(byObject map[client.Object]cache.ByObject) {
	for _, o := range sharedpool.CacheObjects() {
		byObject[o] = cache.ByObject{}
	}
}

// newShared builds the shared-pool allocator with its own API client.
func (a *Agent) newShared() (*sharedpool.Allocator, error) {
	so := a.opts.Shared
	cfg := rest.CopyConfig(a.opts.RESTConfig)
	if cfg.Timeout == 0 {
		cfg.Timeout = 15 * time.Second
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "allotd-agent/" + a.opts.NodeName + "/shared"
	}
	if so.QPS > 0 {
		cfg.QPS, cfg.Burst = so.QPS, so.Burst
	} else if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 100, 200
	}
	if cfg.Burst < int(cfg.QPS) {
		cfg.Burst = int(cfg.QPS)
	}
	c, err := client.New(cfg, client.Options{Scheme: a.live.Scheme(), Mapper: a.live.RESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("agent: shared pools client: %w", err)
	}
	return sharedpool.New(sharedpool.Options{
		Node:            a.opts.NodeName,
		Client:          c,
		Policy:          so.Policy,
		PolicyTimeout:   so.PolicyTimeout,
		PodContext:      a.PodContext,
		Registerer:      a.opts.Registerer,
		Logger:          a.log.With("component", "shared-pools"),
		Now:             a.opts.Now,
		DisableKubeVirt: so.DisableKubeVirt,
	})
}

// Shared returns the shared-pool allocator, nil when shared pools are off.
func (a *Agent) Shared() *sharedpool.Allocator { return a.shared }

// watchShared connects the allocator's index to the informers (before the cache starts).
func (a *Agent) watchShared(ctx context.Context) error {
	if a.shared == nil {
		return nil
	}
	return a.shared.Watch(ctx, a.cache)
}
