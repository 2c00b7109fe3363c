package pluginhost

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/pluginhost/wasm"
)

func openWASM(ctx context.Context, cfg config.Plugin, log *slog.Logger) (*Loaded, error) {
	if cfg.Kind != KindPoolPolicy {
		return nil, fmt.Errorf("the wasm transport carries pool policies only, not %s", cfg.Kind)
	}
	p, err := wasm.Open(ctx, wasm.Config{
		Name:           cfg.Name,
		Path:           cfg.Path,
		SHA256:         cfg.SHA256,
		Instances:      cfg.Instances,
		MemoryLimitMiB: cfg.MemoryLimitMiB,
		Timeout:        cfg.Timeout,
	}, log)
	if err != nil {
		return nil, err
	}
	return &Loaded{
		Name:       cfg.Name,
		Kind:       cfg.Kind,
		PoolPolicy: p.PoolPolicy(),
		Status: func() api.PluginStatus {
			st := p.Status()
			return api.PluginStatus{
				Name:      st.Name,
				Kind:      st.Kind,
				Transport: st.Transport,
				Version:   st.PluginVersion,
				Contract:  st.ContractVersion,
				Healthy:   st.Health == wasm.HealthOK,
				LastError: st.LastError,
			}
		},
		Close: p.Close,
	}, nil
}
