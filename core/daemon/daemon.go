// Package daemon wires allotd together in standalone mode: store, pools, pool policies,
// the local API on a unix socket, and the health and metrics listener.
//
// Start-up order matters: the store is opened and every allocation restored before the API
// socket exists, so allot-cni never talks to a daemon that could hand out an address it has
// not yet read back. Shutdown is the reverse: stop accepting, finish in-flight requests,
// then close the store (which drains its pending commits).
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/server"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/datapathctl"
	"github.com/allot-ipam/allot/core/explain"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/registry"
	"github.com/allot-ipam/allot/core/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Version is set at build time with -ldflags "-X .../core/daemon.Version=...".
var Version = "dev"

// shutdownGrace bounds how long in-flight requests may take once shutdown begins.
const shutdownGrace = 10 * time.Second

// Daemon is a running allotd.
type Daemon struct {
	cfg      *config.Config
	builtins *registry.Registry
	log      *slog.Logger
	reg      *prometheus.Registry
	store    *store.Store
	manager  *ipam.Manager
	plugins  *Plugins
	datapath *datapathctl.Controller
	ready    atomic.Bool
	// starting, when set, says why the daemon is not ready yet although it serves (an
	// agent before its first AllotNode read); /readyz answers 503 with it.
	starting atomic.Pointer[string]
	// readyNote, if set, qualifies a ready answer of /readyz (an agent serving from its node
	// store while the API server is unreachable is ready: CNI works).
	readyNote func() string
	// datapathAtStop is what close does with the datapath (stopRemove by default).
	datapathAtStop atomic.Int32
	// deferDatapath: the agent starts the datapath itself, once it knows the node's blocks.
	deferDatapath bool
	// beforeClose, if set, runs when shutdown begins, before anything is closed (the
	// agent's uninstall decision).
	beforeClose func(ctx context.Context)
	// fatal receives an error that must stop the daemon (an agent's first datapath apply).
	fatal chan error
	// listPods, set in agent mode with store.onCorruption rebuild, lists what the node's
	// pods hold according to the API server (storeopen.go).
	listPods podLister

	apiLn   net.Listener
	apiSrv  *server.Server
	httpLn  net.Listener
	httpSrv *http.Server
	metrics *metricsServer
}

// New prepares the daemon: opens the store, restores allocations, loads plugins and opens
// the listeners. Serve starts answering. builtins are the built-in plugins the configuration
// may name (the composition root's, plugins/builtin.Registry for allotd).
func New(ctx context.Context, cfg *config.Config, builtins *registry.Registry, log *slog.Logger) (_ *Daemon, err error) {
	d := newBase(cfg, log)
	d.builtins = builtins
	defer func() {
		if err != nil {
			d.close(context.Background())
		}
	}()
	if err := d.openBase(ctx); err != nil {
		return nil, err
	}
	pools, err := poolSpecs(cfg)
	if err != nil {
		return nil, err
	}
	cloudPools, err := d.fillCloudPools(ctx)
	if err != nil {
		return nil, err
	}
	pools = append(pools, cloudPools...)
	d.manager, err = ipam.New(ctx, ipam.Options{
		Pools:         pools,
		Store:         d.store,
		Policy:        d.plugins.PolicyFor,
		PolicyTimeout: cfg.Policy.Timeout,
		PluginStatus:  d.plugins.Status,
		Metrics:       ipam.NewMetrics(d.reg),
		Logger:        log.With("component", "ipam"),
		Version:       Version,
		Mode:          cfg.Mode,
	})
	if err != nil {
		return nil, err
	}
	if d.datapath, err = d.startDatapath(ctx, pools); err != nil {
		return nil, err
	}
	if d.apiLn, err = listenAPI(cfg, log); err != nil {
		return nil, err
	}
	d.apiSrv = d.newAPIServer(d.manager)
	return d, nil
}

// listenAPI opens the local API's socket for root and, with socketGroup, that group.
func listenAPI(cfg *config.Config, log *slog.Logger) (net.Listener, error) {
	a := server.Access{Log: log.With("component", "api")}
	sg, err := cfg.ResolveSocketGroup()
	if err != nil {
		return nil, err
	}
	if sg != nil {
		a.Group = &server.Group{ID: sg.GID, Name: sg.Name}
	}
	return server.ListenAccess(cfg.Socket, a)
}

// newAPIServer is the local API server for svc with the admission limits of the api section
// and their metrics.
func (d *Daemon) newAPIServer(svc api.Service) *server.Server {
	a := d.cfg.API
	// Every ADD is traced and its explanation kept per pod interface (allotctl explain).
	svc = explain.NewService(svc, explain.NewRecorder(explain.DefaultCapacity))
	return server.NewWithOptions(svc, d.log.With("component", "api"), server.Options{
		Limits:  server.Limits{MaxInFlight: a.MaxInFlight, MaxQueued: a.MaxQueued, QueueWait: a.QueueWait},
		Metrics: server.NewMetrics(d.reg),
	})
}

// What close does with the datapath.
const (
	// stopRemove removes what this process applied (standalone mode).
	stopRemove int32 = iota
	// stopKeep leaves the rules in force for the next process (an agent's rolling update).
	stopKeep
	// stopUninstall removes every rule and program, whoever applied them.
	stopUninstall
)

// newBase is the part of a daemon every node role shares: its metrics registry.
func newBase(cfg *config.Config, log *slog.Logger) *Daemon {
	tuneGC()
	d := &Daemon{cfg: cfg, log: log, reg: prometheus.NewRegistry(), fatal: make(chan error, 1)}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return d
}

// openBase opens what every node role needs before its pools: the health listener, the
// store (so no allocation is unknown when pools appear) and the plugins.
func (d *Daemon) openBase(ctx context.Context) (err error) {
	if err := d.builtins.Validate(); err != nil {
		return err
	}
	if d.httpLn, err = d.listenHTTP(); err != nil {
		return err
	}
	if d.metrics, err = listenMetrics(d.cfg.HTTP.MetricsAddress, d.reg); err != nil {
		return err
	}
	if d.store, err = d.openStore(ctx); err != nil {
		return err
	}
	d.reg.MustRegister(newStoreCollector(d.store))
	if d.plugins, err = LoadPlugins(ctx, d.cfg, d.builtins, d.log.With("component", "plugins")); err != nil {
		return err
	}
	return nil
}

// Manager exposes the IPAM manager (tests, benchmarks).
func (d *Daemon) Manager() *ipam.Manager { return d.manager }

// HTTPAddr is the address of the health and metrics listener, if any.
func (d *Daemon) HTTPAddr() string {
	if d.httpLn == nil {
		return ""
	}
	return d.httpLn.Addr().String()
}

// Serve answers on the API socket and the health listener until ctx is done, then shuts
// down gracefully.
func (d *Daemon) Serve(ctx context.Context) error {
	errc := make(chan error, 3)
	go func() { errc <- serveUntilClosed(d.apiSrv, d.apiLn) }()
	d.metrics.serve(errc)
	if d.httpLn != nil {
		d.httpSrv = &http.Server{Handler: d.healthHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { errc <- serveUntilClosed(d.httpSrv, d.httpLn) }()
	}
	if d.datapath != nil && !d.deferDatapath {
		go d.datapath.Run(ctx)
	}
	d.ready.Store(true)
	d.log.Info("allotd serving", "version", Version, "mode", d.cfg.Mode, "socket", d.cfg.Socket, "http", d.HTTPAddr(), "metrics", d.metrics.Addr(), "store", d.cfg.Store.Path)

	var err error
	select {
	case <-ctx.Done():
		d.log.Info("shutting down")
	case err = <-errc:
		d.log.Error("listener failed; shutting down", "err", err)
	case err = <-d.fatal:
		d.log.Error("shutting down", "err", err)
	}
	d.ready.Store(false)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if d.beforeClose != nil {
		d.beforeClose(sctx)
	}
	return errors.Join(err, d.close(sctx))
}

func serveUntilClosed(s interface{ Serve(net.Listener) error }, l net.Listener) error {
	if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (d *Daemon) close(ctx context.Context) error {
	var errs []error
	if d.apiSrv != nil {
		errs = append(errs, d.apiSrv.Shutdown(ctx))
	} else if d.apiLn != nil {
		errs = append(errs, d.apiLn.Close())
	}
	if d.apiLn != nil {
		if err := os.Remove(d.cfg.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if d.datapath != nil {
		switch d.datapathAtStop.Load() {
		case stopKeep:
			errs = append(errs, d.datapath.Close(ctx))
		case stopUninstall:
			errs = append(errs, d.datapath.Remove(ctx))
		case stopRemove:
			errs = append(errs, d.datapath.Stop(ctx))
		}
	}
	if d.plugins != nil {
		errs = append(errs, d.plugins.Close(ctx))
	}
	if d.store != nil {
		errs = append(errs, d.store.Close())
	}
	if d.httpSrv != nil {
		errs = append(errs, d.httpSrv.Shutdown(ctx))
	} else if d.httpLn != nil {
		errs = append(errs, d.httpLn.Close())
	}
	errs = append(errs, d.metrics.shutdown(ctx))
	err := errors.Join(errs...)
	if err == nil {
		d.log.Info("allotd stopped")
	}
	return err
}

func (d *Daemon) listenHTTP() (net.Listener, error) {
	if d.cfg.HTTP.Address == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", d.cfg.HTTP.Address)
	if err != nil {
		return nil, fmt.Errorf("http.address: %w", err)
	}
	return l, nil
}

func (d *Daemon) healthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !d.ready.Load() {
			http.Error(w, "not ready: starting or shutting down", http.StatusServiceUnavailable)
			return
		}
		if why := d.starting.Load(); why != nil {
			http.Error(w, "not ready: "+*why, http.StatusServiceUnavailable)
			return
		}
		st, err := d.manager.Status(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		// Exhausted pools do not make the daemon unready: it still answers DEL, CHECK and
		// GC, and restarting it would not free an address.
		msg := st.Message
		if d.readyNote != nil {
			if n := d.readyNote(); n != "" {
				msg = strings.TrimPrefix(msg+"; "+n, "; ")
			}
		}
		if msg != "" {
			_, _ = fmt.Fprintf(w, "ready (%s)\n", msg)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg}))
	return mux
}

func poolSpecs(cfg *config.Config) ([]ipam.PoolSpec, error) {
	out := make([]ipam.PoolSpec, 0, len(cfg.Pools))
	for i, p := range cfg.Pools {
		ac, err := p.AllocatorConfig()
		if err != nil {
			return nil, fmt.Errorf("pools[%d]: %w", i, err)
		}
		spec := ipam.PoolSpec{Allocator: ac, Default: p.Default}
		for _, r := range p.Routes {
			spec.Routes = append(spec.Routes, api.Route{Dst: r.Dst, GW: r.GW})
		}
		out = append(out, spec)
	}
	return out, nil
}
