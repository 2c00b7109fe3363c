package process

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/allot-ipam/allot/sdk/pluginrpc"
	"github.com/allot-ipam/allot/sdk/version"
)

// Transport is what Status reports as the transport of process plugins.
const Transport = "process"

// Sentinel errors; errors.Is works on everything this package returns.
var (
	// ErrRefused: the plugin cannot be used at all (digest mismatch, wrong kind, incompatible
	// contract version, handshake failure). Open returns it; later restarts log it.
	ErrRefused = errors.New("plugin refused")
	// ErrRestarting: the plugin process is down and being restarted; the call was not sent.
	ErrRestarting = errors.New("plugin is restarting")
	// ErrTimeout: the plugin did not answer within the configured per-call timeout; it was
	// killed and is being restarted.
	ErrTimeout = errors.New("plugin call timed out")
	// ErrCrashed: the connection to the plugin broke during the call (process crashed or
	// was killed); it is being restarted.
	ErrCrashed = errors.New("plugin process lost")
	// ErrClosed: Close was called.
	ErrClosed = errors.New("plugin closed")
	// ErrWrongKind: the plugin was asked for a contract other than its configured kind.
	ErrWrongKind = errors.New("plugin is of another kind")
)

// Health values reported by Status.
const (
	HealthHealthy    = "healthy"
	HealthRestarting = "restarting"
	HealthClosed     = "closed"
)

// exitPoll is how often (at most) the supervisor looks for a plugin process that exited
// while idle (see watchPeriod).
const exitPoll = 250 * time.Millisecond

// Plugin is one supervised plugin process. It is safe for concurrent use.
type Plugin struct {
	cfg Config
	log *slog.Logger
	sum []byte

	mu        sync.Mutex
	cur       *proc // nil while the plugin is down
	info      pluginrpc.RemoteInfo
	restarts  int
	lastErr   error
	lastErrAt time.Time
	upFor     time.Duration // how long the last failed process had run
	closed    bool

	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

// proc is one running plugin process.
type proc struct {
	client  *plugin.Client
	impl    any
	remote  pluginrpc.Describer
	info    pluginrpc.RemoteInfo
	pid     int
	started time.Time
	calls   inflight
}

// Open validates cfg, starts the plugin, checks its kind and contract version and starts
// supervising it. A plugin that cannot start or speaks an incompatible contract is refused
// (ErrRefused); Open does not retry.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.applyDefaults()
	if logger == nil {
		logger = slog.Default()
	}
	sum, _ := hex.DecodeString(cfg.SHA256) // Validate checked it
	p := &Plugin{
		cfg:  cfg,
		log:  logger.With("plugin", cfg.Name, "kind", string(cfg.Kind), "transport", Transport),
		sum:  sum,
		kick: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	pr, err := p.start(ctx)
	if err != nil {
		return nil, err
	}
	p.cur, p.info = pr, pr.info
	p.log.Info("plugin started", "pid", pr.pid, "plugin_name", pr.info.Name, "plugin_version", pr.info.Version, "contract", pr.info.ContractVersion)
	p.wg.Add(1)
	go p.supervise()
	return p, nil
}

// Name returns the configured name.
func (p *Plugin) Name() string { return p.cfg.Name }

// Kind returns the configured kind.
func (p *Plugin) Kind() pluginrpc.Kind { return p.cfg.Kind }

// start launches one process and checks it; on any error the process is gone.
func (p *Plugin) start(ctx context.Context) (*proc, error) {
	if err := p.checkDigest(); err != nil {
		return nil, err
	}
	client := p.newClient()
	type result struct {
		pr  *proc
		err error
	}
	ch := make(chan result, 1)
	go func() {
		pr, err := p.handshake(client)
		ch <- result{pr, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			p.kill(client, 0)
			return nil, r.err
		}
		return p.checkInfo(ctx, client, r.pr)
	case <-ctx.Done():
		client.Kill() // makes the handshake goroutine return
		<-ch
		return nil, fmt.Errorf("plugin %q: start: %w", p.cfg.Name, ctx.Err())
	}
}

// newClient configures go-plugin to launch the binary (its digest checked again by
// go-plugin) with the plugin's environment, over mutual TLS gRPC.
func (p *Plugin) newClient() *plugin.Client {
	cmd := exec.Command(p.cfg.Path, p.cfg.Args...)
	cmd.Env = p.env()
	cmd.SysProcAttr = sysProcAttr()
	return plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginrpc.Handshake,
		Plugins:          pluginrpc.HostPlugins(),
		Cmd:              cmd,
		SkipHostEnv:      true, // env() already holds what the plugin should see
		SecureConfig:     &plugin.SecureConfig{Checksum: p.sum, Hash: sha256.New()},
		AutoMTLS:         true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		GRPCDialOptions:  pluginrpc.HostDialOptions(),
		StartTimeout:     p.cfg.StartTimeout,
		Logger:           newHclog(p.log, ""),
		// After the handshake go-plugin streams the plugin's os.Stdout/os.Stderr here.
		SyncStdout: &lineWriter{log: func(l string) { p.log.Info("plugin stdout", "line", l) }},
		SyncStderr: &lineWriter{log: func(l string) { p.log.Warn("plugin stderr", "line", l) }},
	})
}

// checkInfo asks the started process for its kind and versions (bounded by the caller and
// the per-call timeout) and kills it unless they are what the configuration says.
func (p *Plugin) checkInfo(ctx context.Context, client *plugin.Client, pr *proc) (*proc, error) {
	ictx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	info, err := pr.remote.PluginInfo(ictx)
	if err != nil {
		p.kill(client, pr.pid)
		return nil, fmt.Errorf("%w: plugin %q: asking for its kind and version: %w", ErrRefused, p.cfg.Name, err)
	}
	if info.Kind != p.cfg.Kind {
		p.kill(client, pr.pid)
		return nil, fmt.Errorf("%w: plugin %q: binary %s serves a %q plugin, configuration says %q", ErrRefused, p.cfg.Name, p.cfg.Path, info.Kind, p.cfg.Kind)
	}
	if err := version.Check(p.cfg.Name, string(p.cfg.Kind), p.cfg.Kind.ContractVersion(), info.ContractVersion); err != nil {
		p.kill(client, pr.pid)
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	pr.info = info
	return pr, nil
}

// env is the plugin's environment: allotd's own (unless CleanEnv), then Config.Env, which
// wins over allotd's for the same key, and GOMAXPROCS=1 unless Config.Env sets it.
//
// GOMAXPROCS=1 because a plugin serves one small call at a time: with more Ps, every call
// wakes idle threads that spin looking for work, which on a 2-core node under load doubled
// the latency of a decision (measured: 1.0-1.3 ms with the default, 0.5-0.6 ms with 1).
func (p *Plugin) env() []string {
	var env []string
	if !p.cfg.CleanEnv {
		env = os.Environ()
	}
	maxprocs := false
	for _, e := range p.cfg.Env {
		maxprocs = maxprocs || strings.HasPrefix(e, "GOMAXPROCS=")
	}
	if !maxprocs {
		env = append(env, "GOMAXPROCS=1")
	}
	// exec keeps the last value of a repeated key, so Config.Env goes last.
	return append(env, p.cfg.Env...)
}

// handshake starts the process and dispenses the configured kind.
func (p *Plugin) handshake(client *plugin.Client) (*proc, error) {
	started := time.Now()
	rpcClient, err := client.Client()
	if err != nil {
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			// The binary changed between our check and exec.
			return nil, fmt.Errorf("%w: plugin %q: %s does not match the pinned sha256 %s", ErrRefused, p.cfg.Name, p.cfg.Path, p.cfg.SHA256)
		}
		return nil, fmt.Errorf("%w: plugin %q: starting %s: %w", ErrRefused, p.cfg.Name, p.cfg.Path, err)
	}
	raw, err := rpcClient.Dispense(string(p.cfg.Kind))
	if err != nil {
		return nil, fmt.Errorf("%w: plugin %q: %w", ErrRefused, p.cfg.Name, err)
	}
	remote, ok := raw.(pluginrpc.Describer)
	if !ok {
		return nil, fmt.Errorf("%w: plugin %q: dispensed %T, not a pluginrpc client", ErrRefused, p.cfg.Name, raw)
	}
	pr := &proc{client: client, impl: raw, remote: remote, started: started}
	pr.calls.epoch = started
	if rc := client.ReattachConfig(); rc != nil {
		pr.pid = rc.Pid
	}
	return pr, nil
}

// checkDigest compares the binary's sha256 with the pin, naming both on mismatch.
func (p *Plugin) checkDigest() error {
	f, err := os.Open(p.cfg.Path)
	if err != nil {
		return fmt.Errorf("%w: plugin %q: %w", ErrRefused, p.cfg.Name, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("%w: plugin %q: reading %s: %w", ErrRefused, p.cfg.Name, p.cfg.Path, err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, p.sum) {
		return fmt.Errorf("%w: plugin %q: sha256 of %s is %x, configuration pins %s", ErrRefused, p.cfg.Name, p.cfg.Path, got, p.cfg.SHA256)
	}
	return nil
}

// kill ends a process at once: SIGKILL to its process group (which also reaches anything
// it spawned), then go-plugin's Kill to reap it and release its goroutines.
func (p *Plugin) kill(client *plugin.Client, pid int) {
	killGroup(pid)
	client.Kill()
}

// current returns the running process, or the error a call gets while there is none.
func (p *Plugin) current() (*proc, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return nil, fmt.Errorf("plugin %q: %w", p.cfg.Name, ErrClosed)
	case p.cur == nil:
		return nil, fmt.Errorf("plugin %q is restarting (last error: %v): %w", p.cfg.Name, p.lastErr, ErrRestarting)
	}
	return p.cur, nil
}

// fail takes pr out of service, kills it and wakes the supervisor. Reports about a process
// that is no longer current are ignored, so a crash seen by many calls restarts once.
func (p *Plugin) fail(pr *proc, err error) {
	p.mu.Lock()
	if p.cur != pr || p.closed {
		p.mu.Unlock()
		return
	}
	p.cur = nil
	p.lastErr, p.lastErrAt = err, time.Now()
	p.upFor = time.Since(pr.started)
	p.mu.Unlock()
	p.log.Warn("plugin failed, restarting", "pid", pr.pid, "error", err)
	go p.kill(pr.client, pr.pid)
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *Plugin) supervise() {
	defer p.wg.Done()
	exits := time.NewTicker(watchPeriod(p.cfg.Timeout))
	defer exits.Stop()
	health := time.NewTicker(p.cfg.HealthInterval)
	defer health.Stop()
	backoff := p.cfg.MinBackoff
	for {
		select {
		case <-p.done:
			return
		case <-exits.C:
			p.watch()
		case <-health.C:
			if pr, _ := p.current(); pr != nil {
				ctx, cancel := context.WithTimeout(context.Background(), min(p.cfg.Timeout, 5*time.Second))
				err := pr.remote.Ping(ctx)
				cancel()
				if err != nil {
					p.fail(pr, fmt.Errorf("health check failed: %w", err))
				}
			}
		case <-p.kick:
		}

		for {
			p.mu.Lock()
			down, upFor := p.cur == nil && !p.closed, p.upFor
			p.mu.Unlock()
			if !down {
				break
			}
			if upFor >= p.cfg.MaxBackoff {
				backoff = p.cfg.MinBackoff // it had been stable: not a crash loop
			}
			select {
			case <-p.done:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, p.cfg.MaxBackoff)
			p.restart()
		}
	}
}

// watch fails the current process if it exited or a call on it is overdue.
func (p *Plugin) watch() {
	pr, _ := p.current()
	switch {
	case pr == nil:
	case pr.client.Exited():
		p.fail(pr, errors.New("plugin process exited"))
	case pr.calls.overdue(p.cfg.Timeout):
		p.fail(pr, fmt.Errorf("a call did not answer within %s", p.cfg.Timeout))
	}
}

// restart starts a new process, or records why it could not.
func (p *Plugin) restart() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	pr, err := p.start(ctx)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.lastErr, p.lastErrAt, p.upFor = err, time.Now(), 0
		p.log.Error("plugin restart failed", "error", err)
		return
	}
	if p.closed {
		go p.kill(pr.client, pr.pid)
		return
	}
	p.cur, p.info = pr, pr.info
	p.restarts++
	p.log.Info("plugin restarted", "pid", pr.pid, "restarts", p.restarts, "plugin_version", pr.info.Version)
}

// Close stops supervising and ends the plugin process (gracefully, then by force).
func (p *Plugin) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	pr := p.cur
	p.cur = nil
	p.mu.Unlock()
	close(p.done)
	p.wg.Wait()
	if pr != nil {
		pr.client.Kill() // graceful: lets the plugin clean up, force-kills after 2s
		killGroup(pr.pid)
	}
	return nil
}

// Status is what `allotctl plugins` shows for one plugin.
type Status struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Transport string `json:"transport"`
	Path      string `json:"path"`
	// PluginName, PluginVersion and ContractVersion are what the plugin reported (the last
	// process that started).
	PluginName      string    `json:"pluginName"`
	PluginVersion   string    `json:"pluginVersion"`
	ContractVersion string    `json:"contractVersion"`
	Health          string    `json:"health"`
	PID             int       `json:"pid,omitempty"`
	Since           time.Time `json:"since,omitzero"`
	Restarts        int       `json:"restarts"`
	LastError       string    `json:"lastError,omitempty"`
	LastErrorAt     time.Time `json:"lastErrorAt,omitzero"`
}

// Status reports the plugin's state.
func (p *Plugin) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Status{
		Name: p.cfg.Name, Kind: string(p.cfg.Kind), Transport: Transport, Path: p.cfg.Path,
		PluginName: p.info.Name, PluginVersion: p.info.Version, ContractVersion: p.info.ContractVersion,
		Restarts: p.restarts, LastErrorAt: p.lastErrAt,
	}
	if p.lastErr != nil {
		s.LastError = p.lastErr.Error()
	}
	switch {
	case p.closed:
		s.Health = HealthClosed
	case p.cur == nil:
		s.Health = HealthRestarting
	default:
		s.Health = HealthHealthy
		s.PID, s.Since = p.cur.pid, p.cur.started
	}
	return s
}
