package pluginhost

import (
	"context"
	"errors"
	"log/slog"

	"github.com/allot-ipam/allot/core/config"
)

// TEMPORARY until core/pluginhost/process lands.
func openProcess(ctx context.Context, cfg config.Plugin, log *slog.Logger) (*Loaded, error) {
	return nil, errors.New("process transport not wired yet")
}
