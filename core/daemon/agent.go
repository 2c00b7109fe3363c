package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/allot-ipam/allot/core/agent"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/enihost"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/noderoutes"
	"github.com/allot-ipam/allot/core/registry"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

var klogOnce sync.Once

// RouteKlog sends client-go's logs (reflectors, leader election) and controller-runtime's
// (the agent's informer cache) through allotd's slog logger instead of klog's own stderr
// format; without the latter, controller-runtime prints a stack trace 30 s after start. Once
// per process: both loggers are global.
func RouteKlog(log *slog.Logger) {
	klogOnce.Do(func() {
		klog.SetSlogLogger(log.With("component", "client-go"))
		ctrllog.SetLogger(logr.FromSlogHandler(log.With("component", "controller-runtime").Handler()))
	})
}

// AgentDaemon is allotd in agent mode: the standalone daemon's local API, CNI path and
// durable store, with pools that are the blocks the operator hands this node (core/agent).
type AgentDaemon struct {
	*Daemon
	agent *agent.Agent
	// owners reads the agent's Pod and DaemonSet at stop (cni.uninstall auto), and follower
	// watches the DaemonSet from start (reads at stop may be refused: see dsFollower).
	owners   ownerReader
	follower *dsFollower
	meta     metadataReader
	// routes keeps routes to the other nodes' blocks (cluster.autoDirectNodeRoutes).
	routes *noderoutes.Controller
	rtr    *noderoutes.Reconciler
	// eniHost keeps the host's ENI routing (cluster.eni.hostRouting; core/enihost).
	eniHost *enihost.Controller
	// kick is signalled when the manager's blocks may have changed (datapath pod CIDRs).
	kick chan struct{}

	bringUpCancel context.CancelFunc
	bringUpDone   chan struct{}
}

// Agent exposes the node agent (tests).
func (d *AgentDaemon) Agent() *agent.Agent { return d.agent }

// NewAgent prepares allotd in agent mode. As in standalone mode, every allocation in the
// store is restored before the API socket exists; the blocks they belong to are learned from
// the node's AllotNode once the agent runs, and an ADD arriving before then waits for them.
func NewAgent(ctx context.Context, cfg *config.Config, builtins *registry.Registry, log *slog.Logger) (_ *AgentDaemon, err error) {
	if err := builtins.Validate(); err != nil {
		return nil, err
	}
	cfg = agentConfig(cfg, builtins.Roles.AgentPolicy, log)
	RouteKlog(log)
	d := newBase(cfg, log)
	d.builtins = builtins
	defer func() {
		if err != nil {
			d.close(context.Background())
		}
	}()
	restCfg, err := RESTConfig(cfg.Cluster.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if cfg.StoreOnCorruption() == config.OnCorruptionRebuild {
		if d.listPods, err = apiPodLister(restCfg, cfg.Cluster.NodeName); err != nil {
			return nil, err
		}
	}
	if err := d.openBase(ctx); err != nil {
		return nil, err
	}
	kick := make(chan struct{}, 1)
	eniHost := newENIHost(cfg.Cluster.ENI, d.reg, log)
	if cfg.Cluster.ENI.Enabled() && restCfg.QPS == 0 {
		// ENI mode writes status.ipam.used as pods come and go (debounced): more than
		// client-go's default 5 requests/s when a node starts many pods at once.
		restCfg.QPS, restCfg.Burst = 20, 40
	}
	shared, err := sharedOptions(cfg, builtins, d.plugins)
	if err != nil {
		return nil, err
	}
	ag, err := agent.New(agentOptions(cfg, restCfg, d, shared, log))
	if err != nil {
		return nil, err
	}
	return d.agentDaemon(ctx, cfg, restCfg, ag, eniHost, kick, log)
}

// agentDaemon completes the daemon around the agent ag: the IPAM manager restored from the
// node store, the datapath, the controllers of the options on, and the API listener.
func (d *Daemon) agentDaemon(ctx context.Context, cfg *config.Config, restCfg *rest.Config, ag *agent.Agent, eniHost *enihost.Controller, kick chan struct{}, log *slog.Logger) (_ *AgentDaemon, err error) {
	d.manager, err = newAgentManager(ctx, d, cfg, ag, eniHost, kick, log)
	if err != nil {
		return nil, err
	}
	// The node's blocks as last read from the API server, so that CNI is served at once even
	// if the API server does not answer now (core/agent/local.go); the first sync reconciles.
	if _, err := ag.Restore(ctx, d.manager); err != nil {
		return nil, err
	}
	d.readyNote = func() string {
		if ag.ServingLocal() {
			return "serving from the node store: the API server has not answered since start"
		}
		return ""
	}
	// The datapath is built (and its configuration checked) now, and applied once the
	// node's blocks are known: until then, rules an earlier agent left stay in force.
	if d.datapath, err = d.newDatapath(nil); err != nil {
		return nil, err
	}
	d.deferDatapath = true
	d.datapathAtStop.Store(stopKeep)
	if eniHost != nil {
		eniHost.State = ag.ENIHostState
	}
	ad := &AgentDaemon{Daemon: d, agent: ag, kick: kick, eniHost: eniHost}
	if err := ad.watchOwnership(cfg, restCfg, log); err != nil {
		return nil, err
	}
	if err := ad.newNodeRoutes(cfg, restCfg, log); err != nil {
		return nil, err
	}
	why := startingReason(cfg.Cluster.IPAM)
	d.starting.Store(&why)
	if d.apiLn, err = listenAPI(cfg, log); err != nil {
		return nil, err
	}
	d.apiSrv = d.newAPIServer(serviceFor(cfg, d.manager, ag))
	return ad, nil
}

// newENIHost is the controller of the host's ENI routing (nil when off), with the check of
// the primary ENI's accept_ra once the node has IPv6 prefixes (metric on reg).
func newENIHost(e config.ClusterENI, reg prometheus.Registerer, log *slog.Logger) *enihost.Controller {
	if !e.HostRoutingEnabled() {
		return nil
	}
	dirs := e.NetnsDirs
	if len(dirs) == 0 {
		dirs = enihost.DefaultNetnsDirs
	}
	hlog := log.With("component", "enihost")
	return &enihost.Controller{Host: &enihost.Host{Log: hlog, MTU: e.MTU}, Log: hlog,
		NetnsFiles: func() ([]string, error) { return enihost.NetnsFiles(dirs) },
		AcceptRA:   enihost.NewAcceptRAWatch(reg, hlog)}
}

// agentOptions configure the agent from the cluster section.
func agentOptions(cfg *config.Config, restCfg *rest.Config, d *Daemon, shared *agent.SharedOptions, log *slog.Logger) agent.Options {
	return agent.Options{
		NodeName:        cfg.Cluster.NodeName,
		RESTConfig:      restCfg,
		PreAllocation:   cfg.Cluster.PreAllocation,
		Debounce:        cfg.Cluster.RequestDebounce,
		ReleaseDelay:    cfg.Cluster.ReleaseDelay,
		ReclaimGrace:    cfg.Cluster.ReclaimGrace,
		ReclaimInterval: cfg.Cluster.ReclaimInterval,
		Resync:          cfg.Cluster.Resync,
		Registerer:      d.reg,
		Logger:          log.With("component", "agent"),
		ENI:             agentENI(cfg.Cluster.ENI),
		Shared:          shared,
		PodCIDRs:        agentPodCIDRMode(cfg.Cluster),
		Store:           d.store,
	}
}

// newAgentManager builds the IPAM manager of agent mode: blocks come from the agent, and
// every change of demand wakes the agent, the ENI host routing and the datapath (kick).
func newAgentManager(ctx context.Context, d *Daemon, cfg *config.Config, ag *agent.Agent, eniHost *enihost.Controller, kick chan struct{}, log *slog.Logger) (*ipam.Manager, error) {
	return ipam.New(ctx, ipam.Options{
		Store:         d.store,
		Policy:        d.plugins.PolicyFor,
		PolicyTimeout: cfg.Policy.Timeout,
		PluginStatus:  d.plugins.Status,
		Metrics:       ipam.NewMetrics(d.reg),
		Logger:        log.With("component", "ipam"),
		Version:       Version,
		Mode:          cfg.Mode,
		// Multi-pool blocks carry their pods' gateway (a bridge's address); ENI
		// addresses come as host blocks presented with their subnet's router instead.
		Dynamic: &ipam.DynamicOptions{Node: cfg.Cluster.NodeName, Wait: cfg.Cluster.PendingTimeout, BlockGateway: !cfg.Cluster.ENI.Enabled(),
			Ready: ag.NodeRead(), RefreshPools: ag.RefreshPools},
		PodContext: ag.PodContext,
		OnChange: func() {
			ag.Trigger()
			if eniHost != nil {
				eniHost.Trigger() // a pod came or went: its route and rules follow
			}
			select {
			case kick <- struct{}{}:
			default:
			}
		},
	})
}

// watchOwnership, with cni.uninstall auto, reads who owns the agent's Pod, so that a stop
// knows whether the DaemonSet is going away.
func (ad *AgentDaemon) watchOwnership(cfg *config.Config, restCfg *rest.Config, log *slog.Logger) (err error) {
	if cfg.CNI.Uninstall == config.UninstallAuto {
		if ad.meta, err = newOwnerReader(restCfg); err != nil {
			return err
		}
		ad.owners = ad.meta
		if cfg.CNI.PodName != "" && cfg.CNI.PodNamespace != "" {
			ad.follower = newDSFollower()
		}
		if cfg.CNI.PodName == "" || cfg.CNI.PodNamespace == "" {
			log.Warn("cni.uninstall auto: the agent's own Pod is unknown (set POD_NAME and POD_NAMESPACE from the downward API); it will keep the network configuration, binaries and datapath at every stop")
		}
	}
	return nil
}

// newNodeRoutes, with cluster.autoDirectNodeRoutes, builds the controller of the routes to
// the other nodes' blocks.
func (ad *AgentDaemon) newNodeRoutes(cfg *config.Config, restCfg *rest.Config, log *slog.Logger) (err error) {
	if cfg.Cluster.AutoDirectNodeRoutes {
		ad.rtr = &noderoutes.Reconciler{Log: log.With("component", "noderoutes")}
		if ad.routes, err = noderoutes.NewController(noderoutes.Options{
			RESTConfig: restCfg, NodeName: cfg.Cluster.NodeName, Reconciler: ad.rtr, Log: log.With("component", "noderoutes"),
		}); err != nil {
			return err
		}
	}
	return nil
}

// startingReason is what /readyz says until the agent's first sync.
func startingReason(mode string) string {
	if mode == config.IPAMKubernetes {
		return "agent: waiting for the Node's spec.podCIDRs (informer caches, first sync)"
	}
	return "agent: waiting for the node's AllotNode (informer caches, first sync)"
}

// agentPodCIDRMode is the agent's kubernetes mode (pools from Node.spec.podCIDRs), nil when
// off.
func agentPodCIDRMode(c config.Cluster) *agent.PodCIDROptions {
	if c.IPAM != config.IPAMKubernetes {
		return nil
	}
	return &agent.PodCIDROptions{}
}

// agentENI is the agent's ENI mode from cluster.eni, nil when off.
func agentENI(e config.ClusterENI) *agent.ENIOptions {
	if !e.Enabled() {
		return nil
	}
	n := e.Node
	i32 := func(v *int) *int32 {
		if v == nil {
			return nil
		}
		x := int32(*v)
		return &x
	}
	return &agent.ENIOptions{
		Pool:       e.Pool,
		HostRoutes: e.HostRoutes,
		Spec: v1alpha1.NodeENISpec{
			InstanceID: n.InstanceID, InstanceType: n.InstanceType, Zone: n.Zone,
			PreAllocate: i32(n.PreAllocate), MinAllocate: i32(n.MinAllocate), MaxAllocate: i32(n.MaxAllocate),
			MaxAboveWatermark: i32(n.MaxAboveWatermark), FirstInterfaceIndex: i32(n.FirstInterfaceIndex),
			SubnetIDs: n.SubnetIDs, SubnetTags: n.SubnetTags, SecurityGroups: n.SecurityGroups, SecurityGroupTags: n.SecurityGroupTags,
			PrefixDelegation: n.PrefixDelegation, IPv6PrefixDelegation: n.IPv6PrefixDelegation,
		},
	}
}

// agentConfig returns cfg with agent-mode defaults: the pool policy chain is the registry's
// agent policy (allotd's: Cilium's pod annotation, namespace annotation, pool "default")
// unless the file chose one; the standalone default "static" would find no pool, since
// cluster pools are never "default pools of the CNI config".
func agentConfig(cfg *config.Config, agentPolicy string, log *slog.Logger) *config.Config {
	c := *cfg
	if slices.Equal(c.Policy.Default.Policies, config.Defaults().Policy.Default.Policies) && c.Policy.Default.Fallback == "" {
		c.Policy.Default = config.Chain{Policies: []string{agentPolicy}}
		log.Info("agent mode: default pool policy chain", "policy", agentPolicy)
	}
	return &c
}

// RESTConfig builds the API server client configuration from a kubeconfig path, or the
// in-cluster configuration when the path is empty.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("cluster.kubeconfig: not set and not running in a cluster: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("cluster.kubeconfig: %w", err)
	}
	return c, nil
}

// Serve runs the agent and answers on the API socket until ctx ends. The daemon reports
// ready, applies its datapath and writes the network configuration once the node's blocks
// are known (bringUp); at stop it decides whether to uninstall (atStop).
func (d *AgentDaemon) Serve(ctx context.Context) error {
	actx, cancel := context.WithCancel(ctx)
	bctx, bcancel := context.WithCancel(ctx)
	d.bringUpCancel, d.bringUpDone = bcancel, make(chan struct{})
	d.beforeClose = d.atStop
	var wg sync.WaitGroup
	var agentErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.agent.Run(actx, d.manager); err != nil && !errors.Is(err, context.Canceled) {
			agentErr = err
			d.log.Error("agent stopped", "err", err)
		}
	}()
	go func() {
		defer close(d.bringUpDone)
		d.bringUp(bctx)
	}()
	if d.routes != nil {
		wg.Go(func() {
			if err := d.routes.Run(actx); err != nil {
				d.log.Error("node routes stopped", "err", err)
			}
		})
	}
	// The watch outlives ctx (cancelled at SIGTERM): the stop decision reads it.
	fctx, fcancel := context.WithCancel(context.WithoutCancel(ctx))
	if d.follower != nil {
		wg.Go(func() {
			d.follower.follow(fctx, d.owners, d.meta.c, d.cfg.CNI.PodNamespace, d.cfg.CNI.PodName, d.log.With("component", "cni"))
		})
	}
	err := d.Daemon.Serve(ctx)
	cancel()
	fcancel()
	wg.Wait()
	return errors.Join(err, agentErr)
}

// stopBringUp ends bringUp and the datapath's loops before anything is closed.
func (d *AgentDaemon) stopBringUp() {
	if d.bringUpCancel == nil {
		return
	}
	d.bringUpCancel()
	<-d.bringUpDone
}

// bringUp waits for the node's blocks, applies the datapath with them, writes the network
// configuration, reports ready, then keeps the datapath's pod CIDRs in line with the blocks
// until ctx ends. A datapath that cannot be applied, or a configuration that cannot be
// written, stops the daemon, as a bad datapath does at start in standalone mode.
func (d *AgentDaemon) bringUp(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-d.agent.NodeRead():
	}
	fail := func(err error) {
		select {
		case d.fatal <- err:
		default:
		}
	}
	if _, err := d.datapath.SetPodCIDRs(ctx, d.cfg.Datapath.MasqueradedPodCIDRs(agentPodCIDRs(d.manager.Usage()))); err != nil {
		fail(err)
		return
	}
	if err := d.datapath.Start(ctx); err != nil {
		fail(err)
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { d.datapath.Run(ctx) })
	if d.eniHost != nil {
		// Before the network configuration is written: pods restored from the store get
		// their routes back first (a restart keeps them anyway).
		wg.Go(func() { d.eniHost.Run(ctx) })
	}
	defer wg.Wait()
	if err := d.writeConfig(); err != nil {
		fail(err)
		return
	}
	d.starting.Store(nil)
	d.log.Info("agent ready", "node", d.cfg.Cluster.NodeName, "pod_cidrs", d.datapath.PodCIDRs())
	d.followBlocks(ctx)
}

// followBlocks re-applies the datapath when the node's blocks change (the manager's
// OnChange), retrying with backoff when an apply fails (the previous pod CIDRs stay in
// force meanwhile).
func (d *AgentDaemon) followBlocks(ctx context.Context) {
	const minBackoff, maxBackoff = time.Second, 30 * time.Second
	backoff := minBackoff
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		case <-retry:
		}
		retry = nil
		if _, err := d.datapath.SetPodCIDRs(ctx, d.cfg.Datapath.MasqueradedPodCIDRs(agentPodCIDRs(d.manager.Usage()))); err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Error("datapath: keeping the previous pod CIDRs", "err", err, "retry_in", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
	}
}
