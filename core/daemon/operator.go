package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/eni"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/allot-ipam/allot/core/pluginhost"
	"github.com/allot-ipam/allot/core/registry"
	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OperatorDaemon is allotd in operator mode: core/operator (leader-elected on a Lease) plus
// /healthz, /readyz and /metrics.
type OperatorDaemon struct {
	cfg *config.Config
	// builtins are the composition root's built-in plugins (the node policy, cloud backends).
	builtins *registry.Registry
	log      *slog.Logger
	reg      *prometheus.Registry
	opts     operator.Options
	httpLn   net.Listener
	// metrics serves /metrics off loopback when http.metricsAddress is set.
	metrics *metricsServer
	leader  atomic.Bool
	ready   atomic.Bool
	// closeBackend stops the ENI mode's cloud backend plugin, if one was started.
	closeBackend func(context.Context) error
}

// NewOperator prepares allotd in operator mode.
func NewOperator(cfg *config.Config, builtins *registry.Registry, log *slog.Logger) (*OperatorDaemon, error) {
	if err := builtins.Validate(); err != nil {
		return nil, err
	}
	restCfg, err := RESTConfig(cfg.Cluster.Kubeconfig)
	if err != nil {
		return nil, err
	}
	RouteKlog(log)
	d := &OperatorDaemon{cfg: cfg, builtins: builtins, log: log, reg: prometheus.NewRegistry()}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	le := cfg.Cluster.LeaderElection
	podCIDRs, err := cfg.Cluster.PodCIDRPrefixes()
	if err != nil {
		return nil, err
	}
	d.opts = operator.Options{
		RESTConfig:        restCfg,
		Namespace:         le.Namespace,
		LeaseName:         le.Name,
		Identity:          le.Identity,
		Logger:            log,
		Registry:          d.reg,
		DisableMultiPool:  cfg.Cluster.DisableMultiPool,
		AutoCreatePools:   autoCreatePools(cfg.Cluster.AutoCreatePools),
		ClusterCIDRConfig: cfg.Cluster.ClusterCIDRConfig,
		ClusterPodCIDRs:   podCIDRs,
		LeaseDuration:     le.LeaseDuration,
		RenewDeadline:     le.RenewDeadline,
		RetryPeriod:       le.RetryPeriod,
		Workers:           cfg.Cluster.Workers,
		OnLeader:          func() { d.leader.Store(true) },
		SharedPools:       sharedPoolOperatorOptions(cfg.Cluster.SharedPools),
	}
	if cfg.Cluster.ClusterCIDRConfig {
		name := builtins.Roles.NodePolicy
		if d.opts.NodePolicy, err = builtins.NewPolicy(name, cfg.Policy.Config[name]); err != nil {
			return nil, fmt.Errorf("policy.config.%s: %w", name, err)
		}
	}
	if cfg.Cluster.ENI.Enabled() {
		if err := d.setupENI(); err != nil {
			return nil, err
		}
	}
	if a := cfg.HTTP.Address; a != "" {
		if d.httpLn, err = net.Listen("tcp", a); err != nil {
			d.closeENIBackend()
			return nil, fmt.Errorf("http.address: %w", err)
		}
	}
	if d.metrics, err = listenMetrics(cfg.HTTP.MetricsAddress, d.reg); err != nil {
		if d.httpLn != nil {
			_ = d.httpLn.Close()
		}
		d.closeENIBackend()
		return nil, err
	}
	return d, nil
}

// setupENI turns on the operator's ENI mode: the cloud backend (a cloud-backend plugin of
// plugins, else a built-in one configured in cloud.backends.<name>) and the engine's
// configuration. Multi-pool is off in ENI mode: the node's pool is its cloud addresses.
func (d *OperatorDaemon) setupENI() error {
	e := d.cfg.Cluster.ENI
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var backend cloud.CloudBackend
	if i := slices.IndexFunc(d.cfg.Plugins, func(p config.Plugin) bool { return p.Name == e.Backend }); i >= 0 {
		l, err := pluginhost.Open(ctx, d.cfg.Plugins[i], d.log)
		if err != nil {
			return fmt.Errorf("cluster.eni.backend: plugins[%d]: %w", i, err)
		}
		if l.CloudBackend == nil {
			_ = l.Close(ctx)
			return fmt.Errorf("cluster.eni.backend: plugin %q is a %s, not a cloud-backend", e.Backend, l.Kind)
		}
		backend, d.closeBackend = l.CloudBackend, l.Close
	} else {
		newBackend, ok := registry.Lookup(d.builtins.Clouds, e.Backend)
		if !ok {
			return fmt.Errorf("cluster.eni.backend: %q is neither a cloud-backend plugin of plugins nor a built-in backend (%s)", e.Backend, registry.Names(d.builtins.Clouds))
		}
		b, err := newBackend(ctx, d.cfg.Cloud.Backends[e.Backend], d.log.With("component", "cloud", "backend", e.Backend))
		if err != nil {
			return fmt.Errorf("cloud.backends.%s: %w", e.Backend, err)
		}
		backend = b
	}
	ecfg := ENIEngineConfig(e)
	if err := ecfg.Validate(); err != nil {
		d.closeENIBackend()
		return fmt.Errorf("cluster.eni: %w", err)
	}
	ncs := map[string]operator.NodeENIConfig{}
	for name, nc := range e.NodeConfigs {
		ncs[name] = operator.NodeENIConfig{SubnetIDs: nc.SubnetIDs, SubnetTags: nc.SubnetTags,
			SecurityGroups: nc.SecurityGroups, SecurityGroupTags: nc.SecurityGroupTags}
	}
	d.opts.ENI = &operator.ENIOptions{Backend: backend, Config: ecfg, NodeConfigs: ncs, NodeConfigLabel: e.NodeConfigLabel,
		GCInterval: e.GCInterval, GCTags: e.GCTags}
	d.opts.DisableMultiPool = true
	// A pass writes several nodes' objects (pool, interfaces, handshake); client-go's
	// default of 5 requests/s would make a pass over 20 nodes last seconds.
	if d.opts.RESTConfig.QPS == 0 {
		d.opts.RESTConfig.QPS, d.opts.RESTConfig.Burst = ENIOperatorQPS, ENIOperatorBurst
	}
	return nil
}

func (d *OperatorDaemon) closeENIBackend() {
	if d.closeBackend != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.closeBackend(ctx); err != nil {
			d.log.Warn("stopping the cloud backend plugin", "err", err)
		}
		d.closeBackend = nil
	}
}

// The operator's API client rate in ENI mode, unless the kubeconfig sets one.
const (
	ENIOperatorQPS   = 100
	ENIOperatorBurst = 200
)

// ENIEngineConfig turns cluster.eni into the engine's configuration over its defaults.
func ENIEngineConfig(e config.ClusterENI) eni.Config {
	c := eni.DefaultConfig()
	if e.PreAllocate != nil {
		c.Params.PreAllocate = *e.PreAllocate
	}
	c.Params.MinAllocate = e.MinAllocate
	c.Params.MaxAllocate = e.MaxAllocate
	c.Params.MaxAboveWatermark = e.MaxAboveWatermark
	c.FirstInterfaceIndex = e.FirstInterfaceIndex
	c.SubnetIDs = e.SubnetIDs
	c.SubnetTags = e.SubnetTags
	c.SecurityGroups = e.SecurityGroups
	c.ExcludeInterfaceTags = e.ExcludeInterfaceTags
	c.ClusterName = e.ClusterName
	if e.Description != "" {
		c.Description = e.Description
	}
	c.Tags = e.Tags
	if e.DeleteOnTermination != nil {
		c.DeleteOnTermination = *e.DeleteOnTermination
	}
	c.PrefixDelegation, c.IPv6PrefixDelegation = e.PrefixDelegation, e.IPv6PrefixDelegation
	if e.Release != nil {
		c.Release = *e.Release
	}
	for _, f := range []struct {
		dst *time.Duration
		v   time.Duration
	}{
		{&c.ReleaseDelay, e.ReleaseDelay}, {&c.MinPassInterval, e.MinPassInterval}, {&c.ResyncInterval, e.ResyncInterval},
	} {
		if f.v > 0 {
			*f.dst = f.v
		}
	}
	if e.Workers > 0 {
		c.Workers = e.Workers
	}
	if e.MaxStepsPerNode > 0 {
		c.MaxStepsPerNode = e.MaxStepsPerNode
	}
	return c
}

// HTTPAddr is the address of the health and metrics listener, if any.
func (d *OperatorDaemon) HTTPAddr() string {
	if d.httpLn == nil {
		return ""
	}
	return d.httpLn.Addr().String()
}

// RunOperator runs allotd in operator mode until ctx ends.
func RunOperator(ctx context.Context, cfg *config.Config, builtins *registry.Registry, log *slog.Logger) error {
	d, err := NewOperator(cfg, builtins, log)
	if err != nil {
		return err
	}
	return d.Serve(ctx)
}

// Serve runs the operator and the health listener until ctx ends. A replica that is not the
// leader is still ready: it stands by to take over.
func (d *OperatorDaemon) Serve(ctx context.Context) error {
	var srv *http.Server
	errc := make(chan error, 3)
	d.metrics.serve(errc)
	if d.httpLn != nil {
		srv = &http.Server{Handler: d.healthHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { errc <- serveUntilClosed(srv, d.httpLn) }()
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- operator.Run(octx, d.opts) }()
	d.ready.Store(true)
	d.log.Info("allotd serving", "version", Version, "mode", d.cfg.Mode, "http", d.HTTPAddr(), "metrics", d.metrics.Addr(),
		"lease", d.opts.Namespace+"/"+d.opts.LeaseName)
	var err error
	select {
	case err = <-done:
		if err != nil {
			err = fmt.Errorf("operator: %w", err)
		}
	case err = <-errc:
		d.log.Error("listener failed; shutting down", "err", err)
		cancel()
		<-done
	}
	d.ready.Store(false)
	d.closeENIBackend()
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer scancel()
	if srv != nil {
		err = errors.Join(err, srv.Shutdown(sctx))
	}
	err = errors.Join(err, d.metrics.shutdown(sctx))
	d.log.Info("allotd stopped")
	return err
}

func (d *OperatorDaemon) healthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !d.ready.Load() {
			http.Error(w, "not ready: starting or shutting down", http.StatusServiceUnavailable)
			return
		}
		if d.leader.Load() {
			_, _ = w.Write([]byte("ready (leader)\n"))
			return
		}
		_, _ = w.Write([]byte("ready (standby)\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg}))
	return mux
}

// sharedPoolOperatorOptions maps cluster.sharedPools.gc and .webhook to the operator's
// shared-pool options.
func sharedPoolOperatorOptions(sp config.SharedPools) operator.SharedPoolOptions {
	o := operator.SharedPoolOptions{GCGrace: sp.GC.Grace, GCInterval: sp.GC.Interval,
		GCTerminatingOnReadyNode:    sp.GC.StatelessTerminatingPodOnReadyNode,
		GCTerminatingOnNotReadyNode: sp.GC.StatelessTerminatingPodOnNotReadyNode}
	if w := sp.Webhook; w.Enabled {
		o.Webhook = operator.WebhookOptions{
			Address: w.Address, CertDir: w.CertDir, Hosts: w.Hosts,
			Register: w.Register, ConfigName: w.ConfigName, URL: w.URL,
			ServiceNamespace: w.Service.Namespace, ServiceName: w.Service.Name, ServicePort: w.Service.Port,
			FailurePolicy: w.FailurePolicy, TimeoutSeconds: w.TimeoutSeconds,
		}
	}
	return o
}

// autoCreatePools maps cluster.autoCreatePools (validated) to the IPPools the operator
// creates when absent.
func autoCreatePools(in []config.AutoCreatePool) []allotv1.IPPool {
	var out []allotv1.IPPool
	fam := func(f *config.AutoCreateFamily) *allotv1.PoolFamily {
		if f == nil {
			return nil
		}
		return &allotv1.PoolFamily{CIDRs: slices.Clone(f.CIDRs), MaskSize: int32(f.MaskSize)}
	}
	for _, p := range in {
		out = append(out, allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: p.Name},
			Spec: allotv1.IPPoolSpec{IPv4: fam(p.IPv4), IPv6: fam(p.IPv6)}})
	}
	return out
}
