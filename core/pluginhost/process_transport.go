package pluginhost

import (
	"context"
	"log/slog"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/pluginhost/process"
	"github.com/allot-ipam/allot/sdk/pluginrpc"
)

func openProcess(ctx context.Context, cfg config.Plugin, log *slog.Logger) (*Loaded, error) {
	p, err := process.Open(ctx, process.Config{
		Name:    cfg.Name,
		Kind:    pluginrpc.Kind(cfg.Kind),
		Path:    cfg.Path,
		Args:    cfg.Args,
		SHA256:  cfg.SHA256,
		Env:     cfg.Env,
		Timeout: cfg.Timeout,
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
