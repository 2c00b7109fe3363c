// Package policy is the registry of allot's built-in pool policies: an explicit list of
// name → factory, in the style of kube-scheduler's in-tree registry. The built-in transport
// produces a policy.PoolPolicy (sdk/policy) from it; the core never branches on which policy it got.
package policy

import (
	"fmt"
	"strings"

	sdkpolicy "github.com/allot-ipam/allot/sdk/policy"

	ciliumannotations "github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
	nodelabels "github.com/allot-ipam/allot/plugins/policy/nodelabels"
	spiderpoolpriority "github.com/allot-ipam/allot/plugins/policy/spiderpoolpriority"
	"github.com/allot-ipam/allot/plugins/policy/static"
)

// Factory builds a policy from its configuration (the policy's block of the allotd config).
// Errors name the offending field.
type Factory func(cfg map[string]any) (sdkpolicy.PoolPolicy, error)

// Plugin is one registry entry.
type Plugin struct {
	Name string
	New  Factory
}

// builtins is the explicit list, sorted by name (a test keeps it so).
var builtins = []Plugin{
	{Name: ciliumannotations.Name, New: ciliumannotations.FromConfig},
	{Name: nodelabels.Name, New: nodelabels.FromConfig},
	{Name: spiderpoolpriority.Name, New: spiderpoolpriority.FromConfig},
	{Name: static.Name, New: static.FromConfig},
}

// Builtins returns the built-in policies, sorted by name. The slice is a copy.
func Builtins() []Plugin {
	return append([]Plugin(nil), builtins...)
}

// Lookup returns the factory of the built-in policy called name.
func Lookup(name string) (Factory, bool) {
	for _, p := range builtins {
		if p.Name == name {
			return p.New, true
		}
	}
	return nil, false
}

// New builds the built-in policy called name from cfg. An unknown name is an error that lists
// the known ones.
func New(name string, cfg map[string]any) (sdkpolicy.PoolPolicy, error) {
	f, ok := Lookup(name)
	if !ok {
		known := make([]string, len(builtins))
		for i, p := range builtins {
			known[i] = p.Name
		}
		return nil, fmt.Errorf("policies: unknown built-in policy %q (known: %s)", name, strings.Join(known, ", "))
	}
	p, err := f(cfg)
	if err != nil {
		return nil, err
	}
	return p, nil
}
