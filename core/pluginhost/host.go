// Package pluginhost turns a plugin entry of the configuration into a value of the plugin
// kind's Go interface, whatever transport carries it. Each transport lives in its own
// sub-package (process: go-plugin over gRPC; wasm: wazero) and registers an opener here;
// nothing above this package knows or asks which transport a plugin uses.
package pluginhost

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/sdk/datapath"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Plugin kinds, as written in the configuration.
const (
	KindPoolPolicy   = "pool-policy"
	KindCloudBackend = "cloud-backend"
	KindDatapath     = "datapath"
)

// Loaded is a plugin ready for use. Exactly one of PoolPolicy, CloudBackend and Datapath is
// set, matching Kind.
type Loaded struct {
	Name         string
	Kind         string
	PoolPolicy   policy.PoolPolicy
	CloudBackend cloud.CloudBackend
	Datapath     datapath.Datapath
	// Status reports health for allotctl plugins.
	Status func() api.PluginStatus
	// Close stops the plugin and frees what it holds.
	Close func(context.Context) error
}

// Opener loads one plugin through one transport.
type Opener func(ctx context.Context, cfg config.Plugin, log *slog.Logger) (*Loaded, error)

// transports is the explicit registry of transports.
var transports = map[string]Opener{
	"wasm":    openWASM,
	"process": openProcess,
}

// Open loads the plugin cfg describes.
func Open(ctx context.Context, cfg config.Plugin, log *slog.Logger) (*Loaded, error) {
	open, ok := transports[cfg.Transport]
	if !ok {
		names := make([]string, 0, len(transports))
		for n := range transports {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("plugin %q: transport %q is not one of %s", cfg.Name, cfg.Transport, strings.Join(names, ", "))
	}
	l, err := open(ctx, cfg, log.With("plugin", cfg.Name, "transport", cfg.Transport))
	if err != nil {
		return nil, fmt.Errorf("plugin %q (%s, %s): %w", cfg.Name, cfg.Kind, cfg.Transport, err)
	}
	return l, nil
}
