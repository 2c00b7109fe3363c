package agent

import (
	"context"
	"sync"
	"time"

	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/sharedread"
	"github.com/allot-ipam/allot/sdk/policy"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// IPPools read live.
//
// The agent learns IPPools from its informer. A pod that names a pool created a moment
// before (its annotation, its namespace's default, the CNI config) may reach the agent
// before the watch delivers the pool: the policy answers `names pool "X", which does not
// exist`, the kubelet records FailedCreatePodSandbox and retries. So when the policy finds
// no pool the request names or selects (ipam.DynamicOptions.RefreshPools), the agent reads
// the IPPools from the API server itself, registers those its manager does not have yet as
// the sync does (clusterPools: families, disable, gateway and routes, selection), and keeps
// the ones its informer lacks in the node's demand until the informer delivers them. The
// node's AllotNode then asks for their blocks and the ADD waits for one, as it does for any
// pool the node has no block of.
//
// The read is a LIST of IPPools, not a GET of one name: the host never parses a policy's
// reason for a name (policy.PodDecision.Cause is all it acts on), and a pool may be chosen
// by its selectors with no name in the request at all. IPPools are few, and the API server
// answers the LIST from its watch cache (consistent reads from cache, Kubernetes 1.31+).
// A pool that really does not exist must not turn ADDs into polling: an ADD reads at most
// once, ADDs that fail while a read is in flight share it, and for liveNegative after a read
// began none reads again (they fail at once, naming the pool, as before).

const (
	// liveNegative is how long a live read of the IPPools answers later ADDs that find no
	// pool (the negative cache).
	liveNegative = time.Second
	// liveKeep bounds how long a pool read live stays in the node's demand without its
	// informer delivering it (a pool deleted before the watch caught up).
	liveKeep = time.Minute
	// liveTimeout bounds the read within the ADD's context, as liveGet does.
	liveTimeout = 5 * time.Second
)

// livePools are the IPPools read from the API server that the informer had not delivered.
type livePools struct {
	// reg serializes registering pools in the manager (clusterPools and a live read): a
	// sync that listed the cache before a live read must not drop what the read registers.
	reg sync.Mutex

	mu    sync.Mutex
	pools map[string]livePool
	// last is the last LIST, in flight or done, shared by the ADDs that fail meanwhile; its
	// result tells whether it registered a pool the manager did not have. Its window is
	// liveNegative (tests change it).
	last sharedread.Reads[struct{}, bool]
}

type livePool struct {
	pool v1alpha1.IPPool
	at   time.Time
}

// RefreshPools is ipam.DynamicOptions.RefreshPools: it reads the IPPools from the API server
// (or shares a read in flight or younger than liveNegative) and reports whether a pool new to
// the manager was registered.
func (a *Agent) RefreshPools(ctx context.Context) bool {
	if a.opts.ENI != nil || a.opts.PodCIDRs != nil || !a.synced.Load() || a.ServingLocal() {
		return false // the node's pools come from elsewhere, or the API server is away
	}
	added, _ := a.livePools.last.Get(ctx, struct{}{}, func() bool { return a.readPools(ctx) })
	return added
}

// readPools lists the IPPools from the API server and registers those the manager lacks.
func (a *Agent) readPools(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, liveTimeout)
	defer cancel()
	var list v1alpha1.IPPoolList
	if err := a.live.List(ctx, &list); err != nil {
		a.metrics.liveReads.WithLabelValues("error").Inc()
		a.log.Warn("reading the IPPools from the API server for an ADD that found no pool", "err", err)
		return false
	}
	lp := &a.livePools
	lp.reg.Lock()
	defer lp.reg.Unlock()
	m := a.m.Load()
	known := map[poolFamily]bool{}
	for _, u := range m.Usage() {
		known[poolFamily{u.Name, u.Family}] = true
	}
	var added []string
	for i := range list.Items {
		p := &list.Items[i]
		f := familiesOf(p)
		if (!f.v4 || known[poolFamily{p.Name, policy.IPv4}]) && (!f.v6 || known[poolFamily{p.Name, policy.IPv6}]) {
			continue
		}
		var cached v1alpha1.IPPool
		if err := a.cache.Get(ctx, types.NamespacedName{Name: p.Name}, &cached); apierrors.IsNotFound(err) {
			lp.mu.Lock()
			if lp.pools == nil {
				lp.pools = map[string]livePool{}
			}
			lp.pools[p.Name] = livePool{pool: *p, at: time.Now()}
			lp.mu.Unlock()
		}
		a.registerPool(m, p, f)
		added = append(added, p.Name)
	}
	if len(added) == 0 {
		a.metrics.liveReads.WithLabelValues("none").Inc()
		return false
	}
	a.metrics.liveReads.WithLabelValues("found").Inc()
	a.log.Info("IPPools read from the API server before the agent's watch delivered them", "pools", added)
	a.loop.Trigger() // the node's requests now include them
	return true
}

type poolFamily struct {
	name string
	fam  policy.Family
}

// withLivePools adds to the informer's pools those read live that it has not delivered, and
// forgets live pools it has delivered or that are older than liveKeep. Called with reg held.
func (a *Agent) withLivePools(cached []v1alpha1.IPPool) []v1alpha1.IPPool {
	lp := &a.livePools
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if len(lp.pools) == 0 {
		return cached
	}
	for _, p := range cached {
		delete(lp.pools, p.Name)
	}
	now := time.Now()
	for name, l := range lp.pools {
		if now.Sub(l.at) > liveKeep {
			delete(lp.pools, name)
			continue
		}
		cached = append(cached, l.pool)
	}
	return cached
}

// registerPool registers the families f of IPPool p as local pools with their disable flag,
// routing and selection (clusterPools, readPools).
func (a *Agent) registerPool(m *ipam.Manager, p *v1alpha1.IPPool, f families) {
	for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
		if !f.has(fam) {
			continue
		}
		if err := m.EnsurePool(p.Name, fam); err != nil {
			a.log.Warn("registering pool", "pool", p.Name, "family", fam, "err", err)
		} else if err := m.SetPoolDisabled(p.Name, fam, p.Spec.Disable); err != nil {
			a.log.Warn("marking pool disabled", "pool", p.Name, "family", fam, "err", err)
		}
		spec := p.Spec.IPv4
		if fam == policy.IPv6 {
			spec = p.Spec.IPv6
		}
		// Set before the blocks are added (syncBlocks runs after this): the block
		// holding the pool's gateway must reserve it from the start.
		r, err := PoolRouting(fam, spec)
		if err != nil {
			// The CRD's rules let this through (a broadcast gateway, a route of the other
			// family): the pool keeps the per-block default, and the operator's Ready
			// condition on the IPPool says why.
			a.reportOnce("routing "+p.Name+string(fam)+err.Error(), "IPPool gateway/routes refused; using the block's gateway", "pool", p.Name, "err", err)
			r = ipam.PoolRouting{}
		}
		if err := m.SetPoolRouting(p.Name, fam, r); err != nil {
			a.log.Warn("setting pool routing", "pool", p.Name, "family", fam, "err", err)
		}
		// The selection fields (Cilium's podSelector / namespaceSelector are
		// podAffinity / namespaceAffinity) reach the pool policy through the views.
		if err := m.SetPoolSelection(p.Name, fam, poolSelection(p)); err != nil {
			a.log.Warn("setting pool selection", "pool", p.Name, "family", fam, "err", err)
		}
	}
}

func familiesOf(p *v1alpha1.IPPool) families {
	return families{v4: p.Spec.IPv4 != nil, v6: p.Spec.IPv6 != nil}
}
