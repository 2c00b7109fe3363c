// Package operator is allot's cluster operator: one leader per cluster (a Lease) hands per-node
// CIDR blocks to nodes.
//
//   - Multi-pool (Cilium style): each AllotNode's spec.ipam.pools.requested is fulfilled with
//     blocks of the pool's maskSize carved from the IPPool's CIDRs, written to
//     spec.ipam.pools.allocated; blocks the agent removes from allocated are taken back.
//     Pools and CIDRs may be added at run time. Removing an in-use CIDR or deleting an in-use
//     pool is refused: an admission policy (deploy/crds) refuses it at apply time from
//     status.inUseCIDRs, the finalizer allot.io/pool-in-use holds a deletion, and the
//     operator never stops treating an in-use CIDR as taken (condition CIDRRemovalRefused).
//   - ClusterCIDRConfig (Google Distributed Cloud's, after KEP-2593): each Node gets
//     Node.spec.podCIDR(s) from the config a pool policy (node-labels by default) picks; a node
//     no config serves gets the Node condition AllotPodCIDRAssigned=False and an Event, and is
//     served when a config appears.
//
// A block is never handed out twice: on becoming leader the operator lists every AllotNode and
// Node from the API server (not a cache) and rebuilds its state before handing anything out;
// writes carry the object's resourceVersion, so a write based on a stale read fails; one set
// of taken blocks spans all pools and configs.
package operator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/allot-ipam/allot/core/eni"
	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Defaults.
const (
	DefaultNamespace     = "kube-system"
	DefaultLeaseName     = "allot-operator"
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultWorkers: reconciles at once per controller. A node's first blocks are one
	// AllotNode spec write (its status waits: statusWait), a round trip that takes seconds
	// while thousands of agents starting together keep the API server busy: 8 workers wrote
	// 5 nodes/s then, 32 wrote 15-30 (test/scale at 5,000 nodes, where the same 32 had
	// been slower when a node cost two writes).
	DefaultWorkers     = 32
	DefaultStatusDelay = time.Second
	// DefaultQPS and DefaultBurst are the API client's rate when RESTConfig sets none
	// (client-go's own default, 5 and 10, would spread 5,000 nodes' first blocks over
	// twenty minutes). Once the agents' start is over, a cluster booting together is a
	// spec write per node: 200 writes/s bounded it at 5,000 nodes (test/scale), 400 let the
	// API server's CPU bound it (about 280 nodes/s on two cores). The API server's priority
	// and fairness, not this limiter, protects it: the chart's FlowSchema puts the operator
	// in workload-high (Cilium's operator defaults to 100 and 200, Helm value
	// k8sClientRateLimit.operator, for a cluster of any size; Kubernetes' scalability jobs
	// run kube-controller-manager at --kube-api-qps=100).
	DefaultQPS   = 400
	DefaultBurst = 800
	// EventsNamespace is where Events about cluster-scoped objects go.
	EventsNamespace = "default"
	fieldManager    = "allot-operator"
)

// Options configure Run.
type Options struct {
	// RESTConfig reaches the API server (required).
	RESTConfig *rest.Config
	// Namespace holds the leader-election Lease (default kube-system); LeaseName names it
	// (default allot-operator).
	Namespace string
	LeaseName string
	// Identity is this replica's name in the Lease (default: hostname plus a random suffix).
	Identity string
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Registry receives the operator's metrics (default: a private registry).
	Registry prometheus.Registerer

	// DisableMultiPool turns off the IPPool/AllotNode controller (on by default).
	DisableMultiPool bool
	// AutoCreatePools are created, each time this replica starts leading, when no IPPool of
	// their name exists; an existing one is left as it is (Cilium's
	// autoCreateCiliumPodIPPools). Only name and spec are used.
	AutoCreatePools []allotv1.IPPool
	// ClusterCIDRConfig turns on the Node controller that writes Node.spec.podCIDRs from
	// ClusterCIDRConfigs (off by default: it marks every Node no config serves).
	ClusterCIDRConfig bool
	// ClusterPodCIDRs is the cluster-wide pod CIDR (cluster.podCIDRs, Google Distributed
	// Cloud's clusterNetwork.pods.cidrBlocks): a ClusterCIDRConfig CIDR of a family listed here
	// must lie inside one of these, or the config serves no node (webhook and Ready condition).
	ClusterPodCIDRs []netip.Prefix
	// NodePolicy chooses a node's ClusterCIDRConfig; required with ClusterCIDRConfig. The
	// operator knows no policy by name: the composition root (cmd/allotd through
	// core/daemon) passes the built-in node-labels policy.
	NodePolicy policy.PoolPolicy
	// ENI, if set, turns on ENI mode: the ENI engine hands cloud addresses to AllotNodes
	// (eni.go).
	ENI *ENIOptions

	// Leader election timing (defaults 15 s, 10 s, 2 s, as kube-controller-manager).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Workers is the number of concurrent reconciles per controller (default 32).
	Workers int
	// StatusDelay batches pool and config status writes (default 1 s).
	StatusDelay time.Duration
	// SharedPools configures SharedIPPool status, address garbage collection and the
	// admission webhook (shared*.go, webhook*.go).
	SharedPools SharedPoolOptions
	// OnLeader, when set, is called each time this replica has rebuilt its state as leader
	// (tests use it).
	OnLeader func()
}

func (o *Options) defaults() error {
	if o.RESTConfig == nil {
		return errors.New("operator: RESTConfig: must be set")
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.LeaseName == "" {
		o.LeaseName = DefaultLeaseName
	}
	if o.Identity == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		o.Identity = host + "_" + hex.EncodeToString(b)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.ClusterCIDRConfig && o.NodePolicy == nil {
		return errors.New("operator: NodePolicy: must be set with ClusterCIDRConfig")
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = DefaultRenewDeadline
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = DefaultRetryPeriod
	}
	if !(o.RetryPeriod < o.RenewDeadline && o.RenewDeadline < o.LeaseDuration) {
		return fmt.Errorf("operator: leader election: need RetryPeriod (%v) < RenewDeadline (%v) < LeaseDuration (%v)",
			o.RetryPeriod, o.RenewDeadline, o.LeaseDuration)
	}
	o.RESTConfig = withClientRate(o.RESTConfig)
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.StatusDelay <= 0 {
		o.StatusDelay = DefaultStatusDelay
	}
	if err := o.SharedPools.defaults(); err != nil {
		return err
	}
	if o.DisableMultiPool && !o.ClusterCIDRConfig && o.ENI == nil {
		return errors.New("operator: DisableMultiPool and not ClusterCIDRConfig: nothing to do")
	}
	if o.ENI != nil {
		if err := o.ENI.validate(); err != nil {
			return err
		}
	}
	return nil
}

// withClientRate is cfg with DefaultQPS and DefaultBurst when it sets no rate.
func withClientRate(cfg *rest.Config) *rest.Config {
	if cfg.QPS != 0 {
		return cfg
	}
	out := rest.CopyConfig(cfg)
	out.QPS, out.Burst = DefaultQPS, DefaultBurst
	return out
}

var setCRLogger sync.Once

// Run campaigns for the Lease and, while leader, hands out blocks. It returns nil when ctx is
// cancelled (releasing the Lease), and an error only for bad options. Losing the Lease (the
// API server unreachable past RenewDeadline, or another replica took over) ends this term:
// Run drops its state and campaigns again, rebuilding everything from the API server when it
// leads again.
func Run(ctx context.Context, opts Options) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return err
	}
	if opts.ENI != nil {
		e := *opts.ENI
		e.metrics = eni.NewMetrics(opts.Registry)
		opts.ENI = &e
	}
	log := opts.Logger.With("component", "operator", "identity", opts.Identity)
	setCRLogger.Do(func() { ctrllog.SetLogger(logr.FromSlogHandler(opts.Logger.Handler())) })
	// The admission webhook serves on every replica for the whole run, not per term.
	stopWebhook, err := startWebhook(ctx, &opts, log)
	if err != nil {
		return err
	}
	defer stopWebhook()
	backoff := opts.RetryPeriod
	for {
		start := time.Now()
		err := runTerm(ctx, &opts, m, log)
		m.leader.Set(0)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > time.Minute {
			backoff = opts.RetryPeriod
		}
		log.Warn("operator term ended; campaigning again", "err", err, "retryIn", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// runTerm runs one manager: campaign, lead until the Lease is lost or ctx ends.
func runTerm(ctx context.Context, o *Options, m *metrics, log *slog.Logger) error {
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, o.Namespace, o.LeaseName,
		resourcelock.ResourceLockConfig{Identity: o.Identity}, o.RESTConfig, o.RenewDeadline)
	if err != nil {
		return fmt.Errorf("operator: lease lock: %w", err)
	}
	fence := newFencer(o, lock, m) // leader election renews through it
	skip := true
	// A term that ends must not linger: its runnables work with the cancelled context, so
	// none of them can still write, and a stuck one must not hold the next campaign (or the
	// daemon's shutdown) for controller-runtime's default 30s.
	grace := 10 * time.Second
	mgr, err := ctrl.NewManager(o.RESTConfig, manager.Options{
		GracefulShutdownTimeout:             &grace,
		Scheme:                              allotk8s.Scheme(),
		Logger:                              logr.FromSlogHandler(log.Handler()),
		LeaderElection:                      true,
		LeaderElectionResourceLockInterface: fence,
		LeaderElectionReleaseOnCancel:       true,
		LeaseDuration:                       &o.LeaseDuration,
		RenewDeadline:                       &o.RenewDeadline,
		RetryPeriod:                         &o.RetryPeriod,
		Metrics:                             metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:              "0",
		Controller:                          ctrlconfig.Controller{SkipNameValidation: &skip},
		Cache:                               cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: sharedCacheByObject()},
		Client:                              client.Options{FieldOwner: fieldManager},
		// Static mappings: a term starting as the API server returns builds its cache
		// without discovery (allotk8s.RESTMapper).
		MapperProvider: func(c *rest.Config, _ *http.Client) (meta.RESTMapper, error) { return allotk8s.RESTMapper(c) },
	})
	if err != nil {
		return fmt.Errorf("operator: manager: %w", err)
	}
	t := &term{
		opts:   o,
		log:    log,
		m:      m,
		st:     newState(),
		client: mgr.GetClient(),
		reader: mgr.GetAPIReader(),
		event:  eventRecorder(mgr.GetEventRecorder("allot-operator")),
		fence:  fence.check,
		status: newStatusBatch(o.StatusDelay),
	}
	op, err := compose(t)
	if err != nil {
		return err
	}
	if err := op.setup(mgr); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// term is what one term's reconcilers are built from: the manager's clients, the leader's
// block state, status batching, the Event function and the fence. Each reconciler copies
// the parts it needs; none keeps the term.
type term struct {
	opts   *Options
	log    *slog.Logger
	m      *metrics
	st     *state
	client client.Client
	reader client.Reader
	event  eventFunc
	fence  func(context.Context) error
	status *statusBatch
}

// reconciler is one controller of a term: a value holding its own dependencies and state,
// registered with the term's manager by Setup (controller-runtime's SetupWithManager).
type reconciler interface {
	Setup(mgr manager.Manager) error
}

// rebuilder is a reconciler that owns part of the leader's allocator state: Rebuild reads
// what the API server (not a cache) says is held and reserves it, once per term, before any
// reconcile of the term runs (operator.rebuild calls every one, in order).
type rebuilder interface {
	Rebuild(ctx context.Context) error
}

// operator is one term's composer: the reconcilers it registers with the manager, one per
// resource, and the leader hooks it runs before any of them reconciles.
type operator struct {
	opts        *Options
	log         *slog.Logger
	m           *metrics
	st          *state
	reconcilers []reconciler
	rebuilders  []rebuilder
}

// compose lists the term's reconcilers the options turn on.
func compose(t *term) (*operator, error) {
	o := t.opts
	var rs []reconciler
	if !o.DisableMultiPool {
		rs = append(rs, newMultiPool(t)...)
	}
	if o.ClusterCIDRConfig {
		rs = append(rs, newClusterCIDR(t)...)
	}
	if o.ENI != nil {
		e, err := newENIReconciler(t)
		if err != nil {
			return nil, fmt.Errorf("operator: ENI controllers: %w", err)
		}
		rs = append(rs, e)
	}
	shared, err := newShared(t)
	if err != nil {
		return nil, err
	}
	rs = append(rs, shared...)
	// The configured pools exist before any node asks for blocks.
	rbs := []rebuilder{poolCreator{client: t.client, log: t.log, pools: o.AutoCreatePools}}
	for _, r := range rs {
		if rb, ok := r.(rebuilder); ok {
			rbs = append(rbs, rb)
		}
	}
	return &operator{opts: o, log: t.log, m: t.m, st: t.st, reconcilers: rs, rebuilders: rbs}, nil
}

func (op *operator) setup(mgr manager.Manager) error {
	if err := mgr.Add(manager.RunnableFunc(op.lead)); err != nil {
		return err
	}
	for _, r := range op.reconcilers {
		if err := r.Setup(mgr); err != nil {
			return fmt.Errorf("operator: %T: %w", r, err)
		}
	}
	return nil
}

// lead runs once this replica holds the Lease: rebuild the state from the API server, then
// let the reconcilers (which wait on st.ready) hand out blocks.
func (op *operator) lead(ctx context.Context) error {
	start := time.Now()
	op.log.Info("became leader; rebuilding allocation state")
	for {
		err := op.rebuild(ctx)
		if err == nil {
			break
		}
		op.log.Warn("rebuild failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(op.opts.RetryPeriod):
		}
	}
	op.m.convergeS.Observe(time.Since(start).Seconds())
	op.m.leader.Set(1)
	// Counted before the reconcilers start (they change the maps under st.mu).
	nAllot, nNodes, nBlocks := len(op.st.allot), len(op.st.nodes), op.st.set.Len()
	close(op.st.ready)
	op.log.Info("allocation state rebuilt", "took", time.Since(start), "allotNodes", nAllot, "nodes", nNodes, "blocks", nBlocks)
	if op.opts.OnLeader != nil {
		op.opts.OnLeader()
	}
	<-ctx.Done()
	return nil
}

// rebuild runs every leader hook from an empty state: an attempt that failed half way is
// retried from nothing, never on top of the blocks it had reserved.
func (op *operator) rebuild(ctx context.Context) error {
	op.st.reset()
	for _, rb := range op.rebuilders {
		if err := rb.Rebuild(ctx); err != nil {
			return err
		}
	}
	return nil
}

// eventRecorder records an Event (namespace default for cluster-scoped objects), its note
// cut to the API's 1 kB limit.
func eventRecorder(rec events.EventRecorder) eventFunc {
	return func(obj runtime.Object, typ, reason, action, format string, args ...any) {
		note := fmt.Sprintf(format, args...)
		if len(note) > 1000 {
			note = note[:990] + " [...]"
		}
		rec.Eventf(obj, nil, typ, reason, action, "%s", note)
	}
}

// quiet wraps a reconciler so that errors caused by the term ending (context cancelled on
// shutdown or lost Lease) are not logged as reconcile failures.
func quiet(f reconcile.Func) reconcile.Func {
	return func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		res, err := f(ctx, req)
		if err != nil && ctx.Err() != nil {
			return reconcile.Result{}, nil
		}
		return res, err
	}
}

// controllerFor registers a controller of obj named name, fed by obj's events and by set
// (the names other reconcilers re-queue), and runs set while the term leads.
func controllerFor(mgr manager.Manager, name string, obj client.Object, set *dirtySet, workers int,
	f reconcile.Func, opts ...builder.ForOption) error {
	if err := mgr.Add(manager.RunnableFunc(set.run)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named(name).
		For(obj, opts...).
		WatchesRawSource(set.source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(quiet(f))
}
