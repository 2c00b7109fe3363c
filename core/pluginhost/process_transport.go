package pluginhost

import (
	"context"
	"log/slog"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/pluginhost/process"
	"github.com/allot-ipam/allot/sdk/pluginrpc"
)

// DefaultCloudBackendTimeout bounds one call of a cloud-backend process plugin when its
// configuration sets no timeout. A cloud call may wait out the client's rate limit and
// several retries with backoff (aws-eni: up to 10 attempts, backoff capped at 20 s), far
// beyond the transport's default (process.DefaultTimeout, 5 s), and a call cut short
// gets the plugin killed and restarted.
const DefaultCloudBackendTimeout = 2 * time.Minute

// callTimeout is the per-call timeout of a process plugin: its own, else the kind's default.
func callTimeout(cfg config.Plugin) time.Duration {
	if cfg.Timeout == 0 && cfg.Kind == KindCloudBackend {
		return DefaultCloudBackendTimeout
	}
	return cfg.Timeout // 0: the transport's default
}

func openProcess(ctx context.Context, cfg config.Plugin, log *slog.Logger) (*Loaded, error) {
	p, err := process.Open(ctx, process.Config{
		Name:    cfg.Name,
		Kind:    pluginrpc.Kind(cfg.Kind),
		Path:    cfg.Path,
		Args:    cfg.Args,
		SHA256:  cfg.SHA256,
		Env:     cfg.Env,
		Timeout: callTimeout(cfg),
	}, log)
	if err != nil {
		return nil, err
	}
	l := &Loaded{
		Name: cfg.Name,
		Kind: cfg.Kind,
		Status: func() api.PluginStatus {
			st := p.Status()
			return api.PluginStatus{
				Name:      st.Name,
				Kind:      st.Kind,
				Transport: st.Transport,
				Version:   st.PluginVersion,
				Contract:  st.ContractVersion,
				Healthy:   st.Health == process.HealthHealthy,
				Restarts:  st.Restarts,
				LastError: st.LastError,
			}
		},
		Close: func(context.Context) error { return p.Close() },
	}
	switch cfg.Kind {
	case KindPoolPolicy:
		l.PoolPolicy = p.PoolPolicy()
	case KindCloudBackend:
		l.CloudBackend = p.CloudBackend()
	case KindDatapath:
		l.Datapath = p.Datapath()
	}
	return l, nil
}
