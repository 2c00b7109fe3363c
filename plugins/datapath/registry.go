// Package datapath is the registry of allot's built-in datapaths: an explicit list of
// name → factory. A datapath plugin loaded through go-plugin is used the same way; the core
// never asks which one it got.
package datapath

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/allot-ipam/allot/plugins/datapath/ebpf"
	"github.com/allot-ipam/allot/plugins/datapath/iptables"
	"github.com/allot-ipam/allot/plugins/datapath/none"
	sdkdatapath "github.com/allot-ipam/allot/sdk/datapath"
)

// Factory builds a datapath.
type Factory func(log *slog.Logger) sdkdatapath.Datapath

// Plugin is one registry entry.
type Plugin struct {
	Name string
	New  Factory
}

var builtins = []Plugin{
	{Name: "ebpf", New: func(l *slog.Logger) sdkdatapath.Datapath { return ebpf.New(l) }},
	{Name: "iptables", New: func(l *slog.Logger) sdkdatapath.Datapath { return iptables.New(l) }},
	{Name: "none", New: func(l *slog.Logger) sdkdatapath.Datapath { return none.New(l) }},
}

// Lookup returns the factory of the built-in datapath called name.
func Lookup(name string) (Factory, bool) {
	for _, p := range builtins {
		if p.Name == name {
			return p.New, true
		}
	}
	return nil, false
}

// Names lists the built-in datapaths, sorted.
func Names() string {
	names := make([]string, len(builtins))
	for i, p := range builtins {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// New builds the built-in datapath called name.
func New(name string, log *slog.Logger) (sdkdatapath.Datapath, error) {
	f, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("datapaths: unknown built-in datapath %q (known: %s)", name, Names())
	}
	return f(log), nil
}
