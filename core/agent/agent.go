// Package agent is allotd's node agent in a cluster (agent mode).
//
// The node's pools are the blocks the operator hands it through its AllotNode object
// (spec.ipam.pools.allocated). The agent:
//
//   - mirrors those blocks into the ipam manager (dynamic pools: ipam.Manager.AddCIDR and
//     RemoveCIDR), and registers every IPPool so the pool policy can choose a pool the node
//     has no block of yet;
//   - completes each CNI ADD's policy input with the pod and its namespace from an informer
//     cache restricted to this node's pods (PodContext), so the default chain
//     (cilium-annotations) sees the pod annotation, then the namespace annotation;
//   - keeps, per pool and family, neededIPs = roundUp(inUse + pending + preAlloc, preAlloc)
//     in spec.ipam.pools.requested, written at most once per debounce (100 ms by default,
//     where Cilium waits 15 s), with conflict retries on the resourceVersion and backoff;
//   - gives back blocks it no longer needs: a block with no address in use that is not needed
//     to cover neededIPs, after the release delay, is first removed from the local allocator
//     (so nothing can be handed out from it afterwards) and only then from
//     spec.ipam.pools.allocated — the agent is the one that removes blocks, as in Cilium's
//     multi-pool IPAM;
//   - publishes its usage in status.ipam;
//   - reclaims addresses of pods that no longer exist (reclaim.go).
//
// The API server may go away at any time, and be away when the agent starts: informers
// reconnect by themselves, writes are retried with backoff, and CNI requests for pools whose
// blocks the node already holds are served from local state meanwhile, after a restart from
// the blocks the node store kept (local.go). With PodCIDRs set the node's pool is its Node's
// spec.podCIDRs instead of AllotNode blocks (podcidrs.go).
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/explain"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/sharedpool"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/internal/sharedread"
	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options configure an Agent.
type Options struct {
	// NodeName is the node this agent serves; its AllotNode has the same name.
	NodeName string
	// RESTConfig reaches the API server.
	RESTConfig *rest.Config
	// PreAllocation maps pool names to the addresses per family kept ready (default pool 8).
	PreAllocation map[string]int
	// Debounce gathers changes before a write of the node object.
	Debounce time.Duration
	// ReleaseDelay: how long a block stays releasable before it is given back.
	ReleaseDelay time.Duration
	// ReclaimGrace and ReclaimInterval: see reclaim.go.
	ReclaimGrace    time.Duration
	ReclaimInterval time.Duration
	// Resync rewrites the node object regularly even without a change.
	Resync time.Duration
	// Registerer, if set, receives the agent's metrics.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Now is the clock (tests).
	Now func() time.Time
	// ENI, if set, turns on ENI mode: the node's pool is the cloud addresses the operator
	// puts in spec.ipam.pool (eni.go) instead of multi-pool blocks.
	ENI *ENIOptions
	// Shared, if set, serves shared-pool networks too (shared.go).
	Shared *SharedOptions
	// PodCIDRs, if set, turns on kubernetes mode: the node's pool is its Node's
	// spec.podCIDRs (podcidrs.go) instead of AllotNode blocks.
	PodCIDRs *PodCIDROptions
	// Store, if set, keeps the node's blocks so that a restart while the API server is
	// unreachable serves from them (local.go).
	Store *store.Store
}

// Agent is the node agent.
type Agent struct {
	opts  Options
	log   *slog.Logger
	cache cache.Cache
	live  client.Client // uncached: writes, and reads that must be current
	loop  *loop
	m     atomic.Pointer[ipam.Manager]

	synced atomic.Bool
	// created: when this agent created its AllotNode (unix ns), until its cache shows it.
	created atomic.Int64
	// owner: the AllotNode's owner for its create's retries (nodeOwner).
	owner atomic.Pointer[ownerRead]
	// statusAt: when a status write that changes no count in use is due (statusDue; the
	// sync loop's alone).
	statusAt time.Time

	reclaim chan struct{}
	// restored: the pools were restored from the node store (Restore); local: they are
	// served, the API server being unreachable; reconciled: a sync has since made them the
	// node's blocks as the API server has them (local.go).
	restored, local, reconciled atomic.Bool
	// nodeRead is closed once the node's blocks from its AllotNode are in the manager.
	nodeRead     chan struct{}
	nodeReadOnce sync.Once
	// onDemand: the pod, namespace and Node informers, started with the first ADD (ondemand.go).
	onDemand onDemand
	// livePools: IPPools read from the API server for ADDs, ahead of the informer (livepools.go).
	livePools livePools

	mu sync.Mutex
	// releasing are blocks removed from the local allocator that the node object may still
	// list; they are not added back while it does.
	releasing map[blockKey]bool
	idle      idleTracker
	// stale: owners whose pod looked gone, and since when (reclaim.go).
	stale map[api.Owner]time.Time
	// problems to report in logs once, by text.
	reported map[string]bool
	// saved are the blocks last written to the node store (savedOnce: since start).
	saved     []store.Block
	savedOnce bool

	metrics *metrics
	shared  *sharedpool.Allocator
}

// New prepares the agent: clients and informer cache (not started).
func New(opts Options) (*Agent, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	live, c, err := newClients(opts)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		opts:      opts,
		log:       opts.Logger,
		cache:     c,
		live:      live,
		loop:      newLoop(opts.Debounce, opts.Resync),
		reclaim:   make(chan struct{}, 1),
		nodeRead:  make(chan struct{}),
		onDemand:  onDemand{running: make(chan struct{})},
		livePools: livePools{last: sharedread.Reads[struct{}, bool]{Window: liveNegative}},
		releasing: map[blockKey]bool{},
		stale:     map[api.Owner]time.Time{},
		reported:  map[string]bool{},
		metrics:   newMetrics(opts.Registerer),
	}
	if opts.Shared != nil {
		if a.shared, err = a.newShared(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// withDefaults checks the required options and fills the others left at zero.
func (o Options) withDefaults() (Options, error) {
	if o.NodeName == "" {
		return o, errors.New("agent: node name is required")
	}
	if o.RESTConfig == nil {
		return o, errors.New("agent: RESTConfig is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Debounce <= 0 {
		o.Debounce = 100 * time.Millisecond
	}
	if o.ReclaimGrace <= 0 {
		o.ReclaimGrace = 30 * time.Second
	}
	if o.ReclaimInterval <= 0 {
		o.ReclaimInterval = time.Minute
	}
	if o.Resync <= 0 {
		o.Resync = 5 * time.Minute
	}
	return o, nil
}

// newClients builds the agent's client of the API server and its informer cache of this
// node's objects.
func newClients(opts Options) (client.Client, cache.Cache, error) {
	scheme := k8s.Scheme()
	cfg := rest.CopyConfig(opts.RESTConfig)
	if cfg.Timeout == 0 {
		// A request to an API server that went away must not hang a CNI call or the loop.
		cfg.Timeout = 15 * time.Second
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "allotd-agent/" + opts.NodeName
	}
	// A static mapping of the agent's kinds: building the client and the informer cache must
	// not need the API server, which may be down when the agent (re)starts (k8s.RESTMapper).
	mapper, err := k8s.RESTMapper(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: %w", err)
	}
	live, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper})
	if err != nil {
		return nil, nil, fmt.Errorf("agent: client: %w", err)
	}
	byName := fields.OneTermEqualSelector("metadata.name", opts.NodeName)
	byObject := map[client.Object]cache.ByObject{
		// Only this node's pods: a node's agent never lists the cluster's pods.
		&corev1.Pod{}:         {Field: fields.OneTermEqualSelector("spec.nodeName", opts.NodeName)},
		&v1alpha1.AllotNode{}: {Field: byName},
		&corev1.Node{}:        {Field: byName},
		&corev1.Namespace{}:   {},
		&v1alpha1.IPPool{}:    {},
	}
	if opts.Shared != nil {
		sharedCacheObjects(byObject)
	}
	c, err := cache.New(rest.CopyConfig(opts.RESTConfig), cache.Options{
		Scheme:           scheme,
		Mapper:           mapper,
		ByObject:         byObject,
		DefaultTransform: cache.TransformStripManagedFields(),
		// A read of a type without an informer fails instead of starting one silently.
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("agent: cache: %w", err)
	}
	return live, c, nil
}

// Trigger asks for a sync of the node object soon (ipam.Options.OnChange). Never blocks.
func (a *Agent) Trigger() { a.loop.Trigger() }

// Synced reports whether the informer cache has synced at least once.
func (a *Agent) Synced() bool { return a.synced.Load() }

// NodeRead is closed once a sync pass has read the node's AllotNode and put its blocks (or
// ENI addresses) into the manager: from then on the manager's pools are the node's.
func (a *Agent) NodeRead() <-chan struct{} { return a.nodeRead }

func (a *Agent) markNodeRead() { a.nodeReadOnce.Do(func() { close(a.nodeRead) }) }

// Run starts the informers and the sync and reclaim loops, and returns when ctx ends.
func (a *Agent) Run(ctx context.Context, m *ipam.Manager) error {
	a.m.Store(m)
	// The pod, namespace and Node informers start with the first ADD (ondemand.go).
	informers := []client.Object{&v1alpha1.AllotNode{}, &v1alpha1.IPPool{}, &corev1.Node{}}
	for _, obj := range informers {
		if a.isOnDemand(obj) {
			continue
		}
		inf, err := a.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("agent: informer for %T: %w", obj, err)
		}
		h, ok := a.handlerFor(obj)
		if !ok {
			continue // read at ADD time only
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("agent: event handler for %T: %w", obj, err)
		}
	}
	if err := a.watchShared(ctx); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- a.cache.Start(ctx) }()
	a.onDemand.ctx = ctx
	close(a.onDemand.running)
	go a.serveLocalWhileUnreachable(ctx)
	a.log.Info("agent starting; waiting for the informer caches", "node", a.opts.NodeName)
	if !a.cache.WaitForCacheSync(ctx) {
		select {
		case err := <-errc:
			return fmt.Errorf("agent: informer cache: %w", err)
		default:
			return ctx.Err()
		}
	}
	a.synced.Store(true)
	a.log.Info("agent caches synced", "node", a.opts.NodeName)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.loop.run(ctx, a.loggedSync()) }()
	go func() { defer wg.Done(); a.reclaimLoop(ctx) }()
	wg.Wait()
	return nil
}

// handlerFor is the event handler of obj's informer; none (false) for the kinds the agent
// only reads when a pod is added.
func (a *Agent) handlerFor(obj client.Object) (toolscache.ResourceEventHandler, bool) {
	h := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.loop.Trigger() },
		UpdateFunc: func(any, any) { a.loop.Trigger() },
		DeleteFunc: func(any) { a.loop.Trigger() },
	}
	switch obj.(type) {
	case *corev1.Node:
		// kubernetes mode: the Node's pod CIDRs are the node's blocks.
		return h, a.opts.PodCIDRs != nil
	case *corev1.Namespace:
		return nil, false
	case *corev1.Pod:
		return toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { a.kickReclaim() }}, true
	case *v1alpha1.IPPool:
		h.UpdateFunc = func(old, cur any) {
			if poolChanged(old, cur) {
				a.loop.Trigger()
			}
		}
	}
	return h, true
}

// poolChanged reports whether an IPPool update changes what the agent reads of it (its spec,
// whose changes bump the generation, and whether it is being deleted). The operator rewrites
// every pool's status (its counters) about once a second while nodes take blocks, and each
// such write reaches every node: a sync per node for each would be thousands of syncs per
// second in a large cluster that change nothing.
func poolChanged(old, cur any) bool {
	o, ok1 := old.(*v1alpha1.IPPool)
	c, ok2 := cur.(*v1alpha1.IPPool)
	if !ok1 || !ok2 {
		return true
	}
	return o.Generation != c.Generation || (o.DeletionTimestamp == nil) != (c.DeletionTimestamp == nil)
}

// loggedSync is sync with its failures logged: the loop retries them with backoff, and an
// agent whose node object cannot be written (API server away, RBAC) must say so. A failure is
// logged at Warn when its text changes, at Debug while it repeats.
func (a *Agent) loggedSync() func(context.Context) (time.Time, error) {
	var last string
	return func(ctx context.Context) (time.Time, error) {
		next, err := a.sync(ctx)
		switch {
		case err == nil:
			if last != "" {
				a.log.Info("node sync succeeds again")
			}
			last = ""
		case ctx.Err() != nil:
		case err.Error() != last:
			last = err.Error()
			a.log.Warn("node sync failed; retrying with backoff", "err", err)
		default:
			a.log.Debug("node sync failed again", "err", err)
		}
		return next, err
	}
}

// PodContext completes a policy request with the pod, its namespace and the node, from the
// informer cache, falling back to a live read when the cache does not (yet) have them
// (ipam.Options.PodContext).
func (a *Agent) PodContext(ctx context.Context, req *policy.PodRequest) error {
	req.Node.Name = a.opts.NodeName
	a.wantPodInformers()
	req.Node.Labels = a.nodeLabels(ctx)
	if req.Pod.Name == "" {
		return nil // not a Kubernetes pod (cnitool, tests): the policy decides on the rest
	}
	if dry := explain.From(ctx).DryRunPod(); dry != nil {
		req.Pod = *dry // a dry run: the pod as its manifest has it, maybe not created yet
		return a.namespaceContext(ctx, req)
	}
	key := types.NamespacedName{Namespace: req.Pod.Namespace, Name: req.Pod.Name}
	var pod corev1.Pod
	err := a.cachedGet(ctx, key, &pod)
	if err == nil && req.Pod.UID != "" && string(pod.UID) != req.Pod.UID {
		err = fmt.Errorf("cached pod has UID %s", pod.UID) // recreated: ask the API server
	}
	if err != nil {
		if err := a.liveGet(ctx, key, &pod); err != nil {
			if apierrors.IsNotFound(err) {
				return api.Errorf(api.CodeNotFound, "pod %s not found in the API server", key)
			}
			if a.ServingLocal() {
				return a.decideOffline(key, err)
			}
			return api.Errorf(api.CodeUnavailable, "pod %s: not in the informer cache and the API server did not answer: %v", key, err)
		}
	}
	if req.Pod.UID != "" && string(pod.UID) != req.Pod.UID {
		return api.Errorf(api.CodeNotFound, "pod %s has UID %s, but the runtime asked for UID %s (the pod was deleted and recreated)", key, pod.UID, req.Pod.UID)
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != a.opts.NodeName {
		return api.Errorf(api.CodeInvalid, "pod %s is bound to node %s, not to this node %s", key, pod.Spec.NodeName, a.opts.NodeName)
	}
	req.Pod.Labels = pod.Labels
	req.Pod.Annotations = pod.Annotations
	if ref := metav1.GetControllerOf(&pod); ref != nil {
		req.Pod.OwnerKind, req.Pod.OwnerName = ref.Kind, ref.Name
	}
	return a.namespaceContext(ctx, req)
}

// namespaceContext completes a policy request with the pod's namespace.
func (a *Agent) namespaceContext(ctx context.Context, req *policy.PodRequest) error {
	var ns corev1.Namespace
	nsKey := types.NamespacedName{Name: req.Pod.Namespace}
	if err := a.cachedGet(ctx, nsKey, &ns); err != nil {
		if err := a.liveGet(ctx, nsKey, &ns); err != nil {
			if a.ServingLocal() {
				return a.decideOffline(nsKey, err)
			}
			// Deciding without the namespace's annotations could pick the wrong pool for
			// good (the annotation counts only at creation): fail, the runtime retries.
			return api.Errorf(api.CodeUnavailable, "namespace %s: not in the informer cache and the API server did not answer: %v", req.Pod.Namespace, err)
		}
	}
	req.Namespace.Labels = ns.Labels
	req.Namespace.Annotations = ns.Annotations
	return nil
}

// decideOffline lets an ADD go on without the pod's or namespace's metadata while the agent
// serves from the node store and the API server does not answer: the policy decides on the
// request alone (with the default chain, the pool "default"). Refusing would leave every pod
// of the node without a network for the whole outage; the price is that a pod whose pool
// comes from an annotation gets the default pool, which is logged and counted
// (allot_agent_offline_decisions_total). In kubernetes mode the node has one pool and
// nothing is lost.
func (a *Agent) decideOffline(key types.NamespacedName, cause error) error {
	a.metrics.offline.Inc()
	a.log.Warn("API server unreachable and serving from the node store: deciding without the pod's annotations and labels",
		"object", key.String(), "err", cause)
	return nil
}

// nodeLabels are the Node's labels from the informer cache, from the API server while the
// Node informer has not synced (none if neither has them).
func (a *Agent) nodeLabels(ctx context.Context) map[string]string {
	var node corev1.Node
	key := types.NamespacedName{Name: a.opts.NodeName}
	err := a.cachedGet(ctx, key, &node)
	if errors.Is(err, errOnDemandNotSynced) && !a.ServingLocal() {
		err = a.liveGet(ctx, key, &node)
	}
	if err != nil {
		return nil
	}
	return node.Labels
}

// CachedGet reads an object from the agent's informer cache (tests, diagnostics), starting
// the on-demand informers as an ADD does.
func (a *Agent) CachedGet(ctx context.Context, key types.NamespacedName, obj client.Object) error {
	if a.isOnDemand(obj) {
		a.wantPodInformers()
	}
	return a.cachedGet(ctx, key, obj)
}

// cachedGet reads from the informer cache, without waiting for a cache that has not synced
// (nor starting an on-demand informer).
func (a *Agent) cachedGet(ctx context.Context, key types.NamespacedName, obj client.Object) error {
	if !a.synced.Load() {
		return errors.New("informer cache not synced yet")
	}
	if a.isOnDemand(obj) && !a.onDemandSynced() {
		return errOnDemandNotSynced
	}
	return a.cache.Get(ctx, key, obj)
}

func (a *Agent) liveGet(ctx context.Context, key types.NamespacedName, obj client.Object) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return a.live.Get(ctx, key, obj)
}

// sync is one pass of the node loop: pools, blocks, releases, requests, status. It returns
// when it wants to run again (a block due for release) and its error (retried with backoff).
func (a *Agent) sync(ctx context.Context) (time.Time, error) {
	m := a.m.Load()
	begin := time.Now()
	defer func() { a.metrics.syncDuration.Observe(time.Since(begin).Seconds()) }()
	if a.opts.ENI != nil {
		return time.Time{}, a.syncENI(ctx)
	}
	if a.opts.PodCIDRs != nil {
		return time.Time{}, a.syncPodCIDRs(ctx, m)
	}

	node := &v1alpha1.AllotNode{}
	err := a.cache.Get(ctx, types.NamespacedName{Name: a.opts.NodeName}, node)
	if apierrors.IsNotFound(err) {
		// No AllotNode: no block is the node's. Blocks restored from the node store (an
		// AllotNode deleted during an outage) leave the pools before anything more is
		// handed out from them.
		a.syncBlocks(node, m)
		if err := a.saveBlocks(ctx, m); err != nil {
			return time.Time{}, err
		}
		a.reconcileDone(m)
		if until := a.createdUntil(); time.Now().Before(until) {
			return until, nil // created: the informer brings it (and this sync again)
		}
		return time.Time{}, a.createNode(ctx, m)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("agent: read AllotNode %s: %w", a.opts.NodeName, err)
	}
	a.created.Store(0)

	pools := a.clusterPools(ctx, m)
	a.syncBlocks(node, m)
	if err := a.saveBlocks(ctx, m); err != nil {
		return time.Time{}, err
	}
	a.reconcileDone(m)
	a.markNodeRead()

	ds, next, err := a.releaseIdle(ctx, m, pools)
	if err != nil {
		return next, err
	}
	due, err := a.publish(ctx, m, node, requestedOf(ds))
	if !due.IsZero() && (next.IsZero() || due.Before(next)) {
		next = due
	}
	return next, err
}

// releaseIdle releases the blocks nobody uses that the demand does not need, once they
// stayed so for the release delay: removed from the allocator first, then (by publish)
// from the node object. It returns the demand left and when the next block falls due.
func (a *Agent) releaseIdle(ctx context.Context, m *ipam.Manager, pools map[string]families) ([]demand, time.Time, error) {
	now := a.opts.Now()
	ds := computeDemand(m.Usage(), pools, a.opts.PreAllocation)
	a.mu.Lock()
	due, next := a.idle.update(now, releaseCandidates(ds), a.opts.ReleaseDelay)
	a.mu.Unlock()
	for _, k := range due {
		if err := m.RemoveCIDR(k.pool, k.cidr); err != nil {
			a.log.Debug("block not released", "pool", k.pool, "cidr", k.cidr, "err", err)
			continue
		}
		a.mu.Lock()
		a.releasing[k] = true
		a.idle.forget(k)
		a.mu.Unlock()
		a.metrics.released.Inc()
		a.log.Info("block released locally; removing it from the node object", "pool", k.pool, "cidr", k.cidr)
	}
	if len(due) > 0 {
		ds = computeDemand(m.Usage(), pools, a.opts.PreAllocation)
		// The node store forgets released blocks before the node object does: a restart
		// while the API server is down must not serve a block another node may hold next.
		if err := a.saveBlocks(ctx, m); err != nil {
			return ds, next, err
		}
	}
	return ds, next, nil
}

// releaseCandidates are the blocks the demand ds does not need.
func releaseCandidates(ds []demand) []blockKey {
	var candidates []blockKey
	for _, d := range ds {
		for _, p := range d.release {
			candidates = append(candidates, blockKey{d.pool, p})
		}
	}
	return candidates
}

// publish writes the requests want, and the blocks being released, to the node object's
// spec, and the pools' usage to its status, each only when it changed (the status maybe
// later: statusDue, which it returns while it waits).
func (a *Agent) publish(ctx context.Context, m *ipam.Manager, node *v1alpha1.AllotNode, want []v1alpha1.PoolRequest) (time.Time, error) {
	a.mu.Lock()
	drop := make(map[blockKey]bool, len(a.releasing))
	for k := range a.releasing {
		drop[k] = true
	}
	a.mu.Unlock()
	_, mustDrop := withoutBlocks(node.Spec.IPAM.Pools.Allocated, drop)
	if mustDrop || !equalRequested(node.Spec.IPAM.Pools.Requested, want) {
		if err := a.writeSpec(ctx, want, drop); err != nil {
			return time.Time{}, err
		}
	}
	st := statusOf(m.Usage())
	if equalStatus(node.Status.IPAM, st) {
		a.statusAt = time.Time{}
		return time.Time{}, nil
	}
	if due := a.statusDue(node.Status.IPAM, st); due.After(a.opts.Now()) {
		return due, nil
	}
	a.statusAt = time.Time{}
	return time.Time{}, a.writeStatus(ctx, node, st)
}

// clusterPools registers every IPPool family as a local pool (so the policy can name a pool
// the node has no block of yet) and returns the pools' families. Pools read live for an ADD
// that the informer has not delivered yet count too (livepools.go).
func (a *Agent) clusterPools(ctx context.Context, m *ipam.Manager) map[string]families {
	// Under reg, the cache listed inside: a live read registering a pool the cache lists
	// after this list must not see it dropped below.
	a.livePools.reg.Lock()
	defer a.livePools.reg.Unlock()
	var list v1alpha1.IPPoolList
	out := map[string]families{}
	if err := a.cache.List(ctx, &list); err != nil {
		a.log.Warn("listing IPPools from the cache", "err", err)
		return out
	}
	items := a.withLivePools(list.Items)
	for i := range items {
		p := &items[i]
		f := familiesOf(p)
		out[p.Name] = f
		a.registerPool(m, p, f)
	}
	// Forget local pools whose IPPool is gone (or lost the family) once they hold nothing.
	for _, u := range m.Usage() {
		if f, ok := out[u.Name]; (!ok || !f.has(u.Family)) && len(u.CIDRs) == 0 && u.Pending == 0 {
			_ = m.DropPool(u.Name, u.Family)
		}
	}
	return out
}

// syncBlocks makes the local pools hold exactly the node object's blocks, except blocks
// being released (not added back) and blocks in use that the object lost (kept: forgetting
// them could hand an address out twice).
func (a *Agent) syncBlocks(node *v1alpha1.AllotNode, m *ipam.Manager) {
	blocks, bad := allocatedBlocks(node)
	for _, b := range bad {
		a.reportOnce("bad block "+b, "spec.ipam.pools.allocated holds an entry that is not a masked CIDR; ignored", "entry", b)
	}
	a.applyBlocks(blocks, m)
}

// applyBlocks makes the local pools hold exactly blocks (see syncBlocks). A block in use
// that is no longer the node's is dropped (ipam.Manager.DropCIDR): its holders keep their
// addresses, nothing more is handed out from it, and it is reported (local.go).
func (a *Agent) applyBlocks(blocks []blockKey, m *ipam.Manager) {
	inAPI := make(map[blockKey]bool, len(blocks))
	a.mu.Lock()
	for _, k := range blocks {
		inAPI[k] = true
	}
	// A released block the object no longer lists is done.
	for k := range a.releasing {
		if !inAPI[k] {
			delete(a.releasing, k)
		}
	}
	releasing := make(map[blockKey]bool, len(a.releasing))
	for k := range a.releasing {
		releasing[k] = true
	}
	a.mu.Unlock()

	for _, k := range blocks {
		if releasing[k] {
			continue
		}
		if err := m.AddCIDR(k.pool, k.cidr); err != nil {
			a.reportOnce("add "+k.pool+k.cidr.String(), "block from the node object refused", "pool", k.pool, "cidr", k.cidr, "err", err)
		}
	}
	for _, u := range m.Usage() {
		for _, c := range u.CIDRs {
			k := blockKey{u.Name, c.Prefix}
			if inAPI[k] {
				continue
			}
			err := m.RemoveCIDR(k.pool, k.cidr)
			if errors.Is(err, ipam.ErrBlockInUse) {
				held, derr := m.DropCIDR(k.pool, k.cidr)
				if derr != nil {
					a.reportOnce("lost "+k.pool+k.cidr.String(), "a block in use is no longer the node's and could not be dropped", "pool", k.pool, "cidr", k.cidr, "err", derr)
					continue
				}
				a.metrics.dropped.Inc()
				a.log.Error("a block in use is no longer the node's: nothing more is handed out from it; its pods keep their addresses until their DEL",
					"pool", k.pool, "cidr", k.cidr, "held", fmt.Sprint(held))
				continue
			}
			if err != nil {
				a.reportOnce("lost "+k.pool+k.cidr.String(), "a block that is no longer the node's could not be removed", "pool", k.pool, "cidr", k.cidr, "err", err)
			}
		}
	}
}

func (a *Agent) reportOnce(key, msg string, args ...any) {
	a.mu.Lock()
	seen := a.reported[key]
	a.reported[key] = true
	a.mu.Unlock()
	if !seen {
		a.log.Warn(msg, args...)
	}
}

// createWait bounds how long a created AllotNode may take to reach the informer cache before
// the agent creates it again (createdUntil).
const createWait = 30 * time.Second

// createNode creates the node's AllotNode with its first requests.
func (a *Agent) createNode(ctx context.Context, m *ipam.Manager) error {
	pools := a.clusterPools(ctx, m)
	node := &v1alpha1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName}}
	node.Spec.IPAM.Pools.Requested = requestedOf(computeDemand(m.Usage(), pools, a.opts.PreAllocation))
	if err := a.createOwned(ctx, node); err != nil {
		return err
	}
	a.created.Store(time.Now().UnixNano())
	a.log.Info("AllotNode created", "node", a.opts.NodeName, "requested", node.Spec.IPAM.Pools.Requested)
	// The informer brings it back; sync again then.
	return nil
}

// createdUntil is until when a sync that does not find the AllotNode in the cache waits for
// the informer to bring the one it created rather than create it again: at scale the watch
// event lags the create by seconds, and every duplicate create costs the API server a write
// refused with AlreadyExists. Past it (the object was deleted before the cache saw it),
// the agent creates it again.
func (a *Agent) createdUntil() time.Time {
	ns := a.created.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).Add(createWait)
}

// createOwned creates the node's AllotNode, owned by the Node (garbage-collected with it)
// when the Node exists. One that exists already is left as it is.
func (a *Agent) createOwned(ctx context.Context, node *v1alpha1.AllotNode) error {
	refs, err := a.nodeOwner(ctx)
	if err != nil {
		return err
	}
	node.OwnerReferences = refs
	err = a.live.Create(ctx, node)
	a.metrics.writes.WithLabelValues("create", resultOf(err)).Inc()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("agent: create AllotNode %s: %w", a.opts.NodeName, err)
	}
	a.owner.Store(nil) // a later create (the AllotNode was deleted) reads the Node again
	return nil
}

// ownerRead is the AllotNode's owner as read from the Node (none: no Node), and when.
type ownerRead struct {
	refs []metav1.OwnerReference
	at   time.Time
}

// ownerKeep is how long a read of the Node serves the retries of a create: at scale a create
// times out or is refused a few times before one lands, and reading the Node again for each
// retry (its UID does not change) made about four GETs per node in an overloaded start.
const ownerKeep = createWait

// nodeOwner is the owner reference of the node's AllotNode: the Node's, none if there is no
// Node, read once for a create and its retries.
func (a *Agent) nodeOwner(ctx context.Context) ([]metav1.OwnerReference, error) {
	if o := a.owner.Load(); o != nil && time.Since(o.at) < ownerKeep {
		return o.refs, nil
	}
	key := types.NamespacedName{Name: a.opts.NodeName}
	// The Node informer's copy (the Node exists before the kubelet starts the agent); a live
	// read of its metadata (the UID is all the reference needs) while that informer has not
	// synced, or not started (it starts with the first ADD), within the client's timeout: an
	// API server that a cluster's boot keeps busy may take seconds. An AllotNode created
	// without its owner would outlive its Node, so a read that fails fails the create (the
	// loop retries it).
	var n corev1.Node
	err := a.cachedGet(ctx, key, &n)
	meta := n.ObjectMeta
	if err != nil && !apierrors.IsNotFound(err) {
		var pm metav1.PartialObjectMetadata
		pm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
		err = a.live.Get(ctx, key, &pm)
		meta = pm.ObjectMeta
	}
	var refs []metav1.OwnerReference
	switch {
	case err == nil:
		refs = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: meta.Name, UID: meta.UID}}
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("agent: read Node %s (the AllotNode's owner): %w", a.opts.NodeName, err)
	}
	a.owner.Store(&ownerRead{refs: refs, at: time.Now()})
	return refs, nil
}

// writeSpec writes requested and drops released blocks from allocated, on the current
// object, retrying on resourceVersion conflicts.
func (a *Agent) writeSpec(ctx context.Context, want []v1alpha1.PoolRequest, drop map[blockKey]bool) error {
	key := types.NamespacedName{Name: a.opts.NodeName}
	var dropped []blockKey
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var cur v1alpha1.AllotNode
		if err := a.live.Get(ctx, key, &cur); err != nil {
			return err
		}
		alloc, changed := withoutBlocks(cur.Spec.IPAM.Pools.Allocated, drop)
		if !changed && equalRequested(cur.Spec.IPAM.Pools.Requested, want) {
			return nil
		}
		cur.Spec.IPAM.Pools.Allocated = alloc
		cur.Spec.IPAM.Pools.Requested = want
		err := a.live.Update(ctx, &cur)
		a.metrics.writes.WithLabelValues("spec", resultOf(err)).Inc()
		if err == nil {
			dropped = dropped[:0]
			for k := range drop {
				dropped = append(dropped, k)
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("agent: update AllotNode %s: %w", a.opts.NodeName, err)
	}
	slices.SortFunc(dropped, compareBlockKey)
	for _, k := range dropped {
		a.log.Info("block given back", "pool", k.pool, "cidr", k.cidr)
	}
	a.log.Debug("AllotNode requests written", "requested", want)
	return nil
}

// writeStatus replaces status.ipam.pools (the agent's part of the status) of cached, the AllotNode
// as the informer has it: an update of the status on cached's resourceVersion, the
// operator's fields (conditions, summary) as cached has them; if the object changed since
// (a Conflict: the operator wrote meanwhile), a merge patch of status.ipam.pools alone, which
// leaves the operator's fields alone and cannot conflict. The update comes first because
// the API server serves it for less: a merge patch costs it the update plus encoding the
// stored object to JSON, applying the patch and decoding the result (at 2,000 nodes the
// agents' status patches were 14% of its CPU during the start, the operator's status
// updates 9%), and the informer's copy is usually current.
func (a *Agent) writeStatus(ctx context.Context, cached *v1alpha1.AllotNode, st v1alpha1.NodeIPAMStatus) error {
	upd := cached.DeepCopy()
	upd.Status.IPAM.Pools = st.Pools // as the patch: status.ipam.pools alone
	err := a.live.Status().Update(ctx, upd)
	if !apierrors.IsConflict(err) {
		a.metrics.writes.WithLabelValues("status", resultOf(err)).Inc()
		if err != nil {
			return fmt.Errorf("agent: update AllotNode %s status: %w", a.opts.NodeName, err)
		}
		return nil
	}
	a.metrics.writes.WithLabelValues("status", "conflict").Inc()
	return a.patchStatus(ctx, st)
}

// patchStatus replaces status.ipam.pools with a merge patch.
func (a *Agent) patchStatus(ctx context.Context, st v1alpha1.NodeIPAMStatus) error {
	node := &v1alpha1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName}}
	pools := st.Pools
	if pools == nil {
		pools = []v1alpha1.PoolUsage{} // "pools": [] clears the list; null would too, but say it plainly
	}
	raw, err := json.Marshal(map[string]any{"status": map[string]any{"ipam": map[string]any{"pools": pools}}})
	if err != nil {
		return err
	}
	err = a.live.Status().Patch(ctx, node, client.RawPatch(types.MergePatchType, raw))
	a.metrics.writes.WithLabelValues("status", resultOf(err)).Inc()
	if err != nil {
		return fmt.Errorf("agent: update AllotNode %s status: %w", a.opts.NodeName, err)
	}
	return nil
}

func resultOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsConflict(err):
		return "conflict"
	default:
		return "error"
	}
}

// Blocks returns the blocks the node holds, per pool, for tests and allotctl.
func Blocks(node *v1alpha1.AllotNode) map[string][]netip.Prefix {
	out := map[string][]netip.Prefix{}
	bs, _ := allocatedBlocks(node)
	for _, b := range bs {
		out[b.pool] = append(out[b.pool], b.cidr)
	}
	return out
}
