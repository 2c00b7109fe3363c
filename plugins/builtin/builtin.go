// Package builtin is the composition of allot's built-in plugins: one explicit list per kind
// of name -> factory (kube-scheduler's in-tree registry), and the policies the daemon uses by
// itself. cmd/allotd passes Registry to core/daemon; core never imports a plugin. Only mains
// (cmd/...) and tests import this package (ARCHITECTURE.md, "Dependency rules").
package builtin

import (
	"context"
	"log/slog"

	"github.com/allot-ipam/allot/core/registry"
	"github.com/allot-ipam/allot/plugins/cloud/awseni"
	"github.com/allot-ipam/allot/plugins/datapath/ebpf"
	"github.com/allot-ipam/allot/plugins/datapath/iptables"
	"github.com/allot-ipam/allot/plugins/datapath/none"
	"github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
	"github.com/allot-ipam/allot/plugins/policy/nodelabels"
	"github.com/allot-ipam/allot/plugins/policy/spiderpoolpriority"
	"github.com/allot-ipam/allot/plugins/policy/static"
	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/sdk/datapath"
)

// Registry returns the built-in plugins, each kind's list sorted by name. Every call returns
// new lists, so a caller may change its copy (a test adding a fake) without affecting others.
func Registry() *registry.Registry {
	return &registry.Registry{
		Policies: []registry.Entry[registry.PolicyFactory]{
			{Name: ciliumannotations.Name, New: ciliumannotations.FromConfig},
			{Name: nodelabels.Name, New: nodelabels.FromConfig},
			{Name: spiderpoolpriority.Name, New: spiderpoolpriority.FromConfig},
			{Name: static.Name, New: static.FromConfig},
		},
		Clouds: []registry.Entry[registry.CloudFactory]{
			{Name: "aws-eni", New: func(ctx context.Context, cfg map[string]any, log *slog.Logger) (cloud.CloudBackend, error) {
				return awseni.FromConfig(ctx, cfg, awseni.Options{Logger: log})
			}},
		},
		Datapaths: []registry.Entry[registry.DatapathFactory]{
			{Name: "ebpf", New: func(l *slog.Logger) datapath.Datapath { return ebpf.New(l) }},
			{Name: "iptables", New: func(l *slog.Logger) datapath.Datapath { return iptables.New(l) }},
			{Name: "none", New: func(l *slog.Logger) datapath.Datapath { return none.New(l) }},
		},
		Roles: registry.Roles{
			// Cilium's rules: pod annotation, namespace annotation, pool "default".
			AgentPolicy: ciliumannotations.Name,
			// Google Distributed Cloud's ClusterCIDRConfig assignment rules.
			NodePolicy: nodelabels.Name,
			// Spiderpool's candidate pool sources, for shared-pool networks.
			SharedPolicy: spiderpoolpriority.Name,
		},
	}
}
