// Package cloud is the registry of allot's built-in cloud backends: an explicit list
// of name → factory. A cloud backend loaded as a go-plugin process is used the same way.
// Without any, pools come from the configuration (the "cluster pool" default).
package cloud

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	awseni "github.com/allot-ipam/allot/plugins/cloud/awseni"
	sdkcloud "github.com/allot-ipam/allot/sdk/cloud"
)

// Factory builds a backend from its block of the configuration (cloud.backends.<name>).
type Factory func(ctx context.Context, cfg map[string]any, log *slog.Logger) (sdkcloud.CloudBackend, error)

// Plugin is one registry entry.
type Plugin struct {
	Name string
	New  Factory
}

var builtins = []Plugin{
	{Name: "aws-eni", New: func(ctx context.Context, cfg map[string]any, log *slog.Logger) (sdkcloud.CloudBackend, error) {
		return awseni.FromConfig(ctx, cfg, awseni.Options{Logger: log})
	}},
}

// Lookup returns the factory of the built-in backend called name.
func Lookup(name string) (Factory, bool) {
	for _, p := range builtins {
		if p.Name == name {
			return p.New, true
		}
	}
	return nil, false
}

// Names lists the built-in backends.
func Names() string {
	names := make([]string, len(builtins))
	for i, p := range builtins {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// New builds the built-in backend called name.
func New(ctx context.Context, name string, cfg map[string]any, log *slog.Logger) (sdkcloud.CloudBackend, error) {
	f, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("cloudbackends: unknown built-in cloud backend %q (known: %s)", name, Names())
	}
	return f(ctx, cfg, log)
}
