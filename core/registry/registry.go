// Package registry is the set of built-in plugins a daemon may use, by kind and name, and
// the names of the built-in policies it uses where the configuration names none.
//
// Core never imports a plugin package. The composition root (cmd/allotd, through
// plugins/builtin) fills a Registry with the factories of the plugins it links in and passes
// it to core/daemon, the way kube-scheduler passes its framework Registry (name -> plugin
// factory) into the scheduler and Caddy resolves modules by name from a registry its main
// fills. A build with other built-ins is another main, not a change to core.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/sdk/datapath"
	"github.com/allot-ipam/allot/sdk/policy"
)

// PolicyFactory builds a pool policy from its policy.config.<name> section.
type PolicyFactory func(cfg map[string]any) (policy.PoolPolicy, error)

// CloudFactory builds a cloud backend from its cloud.backends.<name> section.
type CloudFactory func(ctx context.Context, cfg map[string]any, log *slog.Logger) (cloud.CloudBackend, error)

// DatapathFactory builds a datapath.
type DatapathFactory func(log *slog.Logger) datapath.Datapath

// Entry is one built-in plugin: the name configurations use, and its factory.
type Entry[F any] struct {
	Name string
	New  F
}

// Registry holds the built-in plugins of every kind, each list in the order Names reports.
type Registry struct {
	Policies  []Entry[PolicyFactory]
	Clouds    []Entry[CloudFactory]
	Datapaths []Entry[DatapathFactory]
	// Roles name built-in policies of Policies the daemon uses where the configuration
	// names none.
	Roles Roles
}

// Roles are the built-in policies the daemon chooses by itself.
type Roles struct {
	// AgentPolicy is the agent's default chain when the file keeps the standalone default.
	AgentPolicy string
	// NodePolicy chooses a node's ClusterCIDRConfig in the operator.
	NodePolicy string
	// SharedPolicy decides for shared-pool networks that have no chain of their own.
	SharedPolicy string
}

// Validate checks that every role names a registered policy and that no name of a kind is
// registered twice.
func (r *Registry) Validate() error {
	if r == nil {
		return errors.New("registry: no built-in plugins given")
	}
	if err := unique("policy", r.Policies); err != nil {
		return err
	}
	if err := unique("cloud backend", r.Clouds); err != nil {
		return err
	}
	if err := unique("datapath", r.Datapaths); err != nil {
		return err
	}
	for _, role := range []struct{ field, name string }{
		{"Roles.AgentPolicy", r.Roles.AgentPolicy},
		{"Roles.NodePolicy", r.Roles.NodePolicy},
		{"Roles.SharedPolicy", r.Roles.SharedPolicy},
	} {
		if _, ok := Lookup(r.Policies, role.name); !ok {
			return fmt.Errorf("registry: %s: %q is no registered policy (registered: %s)", role.field, role.name, Names(r.Policies))
		}
	}
	return nil
}

// NewPolicy builds the built-in policy called name with its configuration section.
func (r *Registry) NewPolicy(name string, cfg map[string]any) (policy.PoolPolicy, error) {
	f, ok := Lookup(r.Policies, name)
	if !ok {
		return nil, fmt.Errorf("unknown built-in policy %q (known: %s)", name, Names(r.Policies))
	}
	return f(cfg)
}

// Lookup returns the factory registered as name.
func Lookup[F any](es []Entry[F], name string) (F, bool) {
	for _, e := range es {
		if e.Name == name {
			return e.New, true
		}
	}
	var zero F
	return zero, false
}

// Names lists the registered names, comma-separated, for error messages.
func Names[F any](es []Entry[F]) string {
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name
	}
	return strings.Join(names, ", ")
}

func unique[F any](kind string, es []Entry[F]) error {
	for i, e := range es {
		if e.Name == "" {
			return fmt.Errorf("registry: %s [%d]: empty name", kind, i)
		}
		for _, prev := range es[:i] {
			if prev.Name == e.Name {
				return fmt.Errorf("registry: %s %q is registered twice", kind, e.Name)
			}
		}
	}
	return nil
}
