package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// OperatorDaemon is allotd in operator mode: core/operator (leader-elected on a Lease) plus
// /healthz, /readyz and /metrics.
type OperatorDaemon struct {
	cfg    *config.Config
	log    *slog.Logger
	reg    *prometheus.Registry
	opts   operator.Options
	httpLn net.Listener
	leader atomic.Bool
	ready  atomic.Bool
}

// NewOperator prepares allotd in operator mode.
func NewOperator(cfg *config.Config, log *slog.Logger) (*OperatorDaemon, error) {
	restCfg, err := RESTConfig(cfg.Cluster.Kubeconfig)
	if err != nil {
		return nil, err
	}
	RouteKlog(log)
	d := &OperatorDaemon{cfg: cfg, log: log, reg: prometheus.NewRegistry()}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	le := cfg.Cluster.LeaderElection
	d.opts = operator.Options{
		RESTConfig:        restCfg,
		Namespace:         le.Namespace,
		LeaseName:         le.Name,
		Identity:          le.Identity,
		Logger:            log,
		Registry:          d.reg,
		DisableMultiPool:  cfg.Cluster.DisableMultiPool,
		ClusterCIDRConfig: cfg.Cluster.ClusterCIDRConfig,
		LeaseDuration:     le.LeaseDuration,
		RenewDeadline:     le.RenewDeadline,
		RetryPeriod:       le.RetryPeriod,
		Workers:           cfg.Cluster.Workers,
		OnLeader:          func() { d.leader.Store(true) },
	}
	if a := cfg.HTTP.Address; a != "" {
		if d.httpLn, err = net.Listen("tcp", a); err != nil {
			return nil, fmt.Errorf("http.address: %w", err)
		}
	}
	return d, nil
}

// HTTPAddr is the address of the health and metrics listener, if any.
func (d *OperatorDaemon) HTTPAddr() string {
	if d.httpLn == nil {
		return ""
	}
	return d.httpLn.Addr().String()
}

// RunOperator runs allotd in operator mode until ctx ends.
func RunOperator(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	d, err := NewOperator(cfg, log)
	if err != nil {
		return err
	}
	return d.Serve(ctx)
}

// Serve runs the operator and the health listener until ctx ends. A replica that is not the
// leader is still ready: it stands by to take over.
func (d *OperatorDaemon) Serve(ctx context.Context) error {
	var srv *http.Server
	errc := make(chan error, 2)
	if d.httpLn != nil {
		srv = &http.Server{Handler: d.healthHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { errc <- serveUntilClosed(srv, d.httpLn) }()
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- operator.Run(octx, d.opts) }()
	d.ready.Store(true)
	d.log.Info("allotd serving", "version", Version, "mode", d.cfg.Mode, "http", d.HTTPAddr(),
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
	if srv != nil {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer scancel()
		err = errors.Join(err, srv.Shutdown(sctx))
	}
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
