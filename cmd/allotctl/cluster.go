package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cluster views: read IPPools and AllotNodes (and, in shared.go, SharedIPPools and
// AddressClaims) from the API server, not from a daemon.

// ClusterPoolRow is one pool family's blocks and usage on one node (allotctl cluster pools).
type ClusterPoolRow struct {
	Pool      string   `json:"pool"`
	Family    string   `json:"family"`
	PoolCIDRs []string `json:"poolCIDRs"`
	MaskSize  int32    `json:"maskSize"`
	// Node is empty for a pool no node holds a block of.
	Node      string   `json:"node,omitempty"`
	Blocks    []string `json:"blocks,omitempty"`
	Used      int64    `json:"used"`
	Available int64    `json:"available"`
}

// ClusterNodeRow is one node's blocks, requests and usage of one pool (allotctl cluster nodes).
type ClusterNodeRow struct {
	Node      string   `json:"node"`
	Pool      string   `json:"pool"`
	Blocks    []string `json:"blocks,omitempty"`
	Requested [2]int64 `json:"requested"` // IPv4, IPv6
	Used      [2]int64 `json:"used"`
	Available [2]int64 `json:"available"`
}

func (o *options) clusterCommand() *cobra.Command {
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Cluster views read from the Kubernetes API server (agent/operator mode)",
	}
	cmd.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	run := func(fetch func(context.Context, client.Client) (any, func(*tabwriter.Writer), error)) func(*cobra.Command, []string) error {
		return func(c *cobra.Command, _ []string) error {
			if o.output != "table" && o.output != "json" {
				return fmt.Errorf("--output: %q is not table or json", o.output)
			}
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = kubeconfig
			rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
			if err != nil {
				return fmt.Errorf("--kubeconfig: %w", err)
			}
			rc.Timeout = o.timeout
			cl, err := client.New(rc, client.Options{Scheme: k8s.NewScheme()})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
			defer cancel()
			v, table, err := fetch(ctx, cl)
			if err != nil {
				return err
			}
			if o.output == "json" {
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			table(w)
			return w.Flush()
		}
	}
	cmd.AddCommand(
		&cobra.Command{
			Use:   "pools",
			Short: "IPPools with each node's blocks and usage",
			Args:  cobra.NoArgs,
			RunE: run(func(ctx context.Context, c client.Client) (any, func(*tabwriter.Writer), error) {
				pools, nodes, err := listCluster(ctx, c)
				if err != nil {
					return nil, nil, err
				}
				rows := clusterPoolRows(pools, nodes)
				return rows, func(w *tabwriter.Writer) { printClusterPools(w, rows) }, nil
			}),
		},
		&cobra.Command{
			Use:   "nodes",
			Short: "AllotNodes with their blocks, requests and usage per pool",
			Args:  cobra.NoArgs,
			RunE: run(func(ctx context.Context, c client.Client) (any, func(*tabwriter.Writer), error) {
				_, nodes, err := listCluster(ctx, c)
				if err != nil {
					return nil, nil, err
				}
				rows := clusterNodeRows(nodes)
				return rows, func(w *tabwriter.Writer) { printClusterNodes(w, rows) }, nil
			}),
		},
	)
	cmd.AddCommand(o.sharedCommands(run)...)
	return cmd
}

func listCluster(ctx context.Context, c client.Client) ([]allotv1.IPPool, []allotv1.AllotNode, error) {
	var pl allotv1.IPPoolList
	if err := c.List(ctx, &pl); err != nil {
		return nil, nil, fmt.Errorf("list IPPools: %w", err)
	}
	var nl allotv1.AllotNodeList
	if err := c.List(ctx, &nl); err != nil {
		return nil, nil, fmt.Errorf("list AllotNodes: %w", err)
	}
	sort.Slice(pl.Items, func(i, j int) bool { return pl.Items[i].Name < pl.Items[j].Name })
	sort.Slice(nl.Items, func(i, j int) bool { return nl.Items[i].Name < nl.Items[j].Name })
	return pl.Items, nl.Items, nil
}

// nodeBlocks returns a node's blocks of pool in family fam ("ipv4"/"ipv6"), sorted.
func nodeBlocks(n *allotv1.AllotNode, pool, fam string) []string {
	var out []netip.Prefix
	for _, pa := range n.Spec.IPAM.Pools.Allocated {
		if pa.Pool != pool {
			continue
		}
		for _, c := range pa.CIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil || p.Addr().Is4() != (fam == "ipv4") {
				continue
			}
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr().Less(out[j].Addr()) })
	s := make([]string, len(out))
	for i, p := range out {
		s[i] = p.String()
	}
	return s
}

func nodeUsage(n *allotv1.AllotNode, pool, fam string) *allotv1.FamilyUsage {
	for _, u := range n.Status.IPAM.Pools {
		if u.Pool == pool {
			if fam == "ipv4" {
				return u.IPv4
			}
			return u.IPv6
		}
	}
	return nil
}

func clusterPoolRows(pools []allotv1.IPPool, nodes []allotv1.AllotNode) []ClusterPoolRow {
	rows := []ClusterPoolRow{}
	for _, p := range pools {
		for _, f := range []struct {
			name string
			spec *allotv1.PoolFamily
		}{{"ipv4", p.Spec.IPv4}, {"ipv6", p.Spec.IPv6}} {
			if f.spec == nil {
				continue
			}
			base := ClusterPoolRow{Pool: p.Name, Family: f.name, PoolCIDRs: f.spec.CIDRs, MaskSize: f.spec.MaskSize}
			found := false
			for i := range nodes {
				blocks := nodeBlocks(&nodes[i], p.Name, f.name)
				u := nodeUsage(&nodes[i], p.Name, f.name)
				if len(blocks) == 0 && u == nil {
					continue
				}
				r := base
				r.Node, r.Blocks = nodes[i].Name, blocks
				if u != nil {
					r.Used, r.Available = u.Used, u.Available
				}
				rows = append(rows, r)
				found = true
			}
			if !found {
				rows = append(rows, base)
			}
		}
	}
	return rows
}

func clusterNodeRows(nodes []allotv1.AllotNode) []ClusterNodeRow {
	rows := []ClusterNodeRow{}
	for i := range nodes {
		n := &nodes[i]
		names := map[string]bool{}
		for _, r := range n.Spec.IPAM.Pools.Requested {
			names[r.Pool] = true
		}
		for _, a := range n.Spec.IPAM.Pools.Allocated {
			names[a.Pool] = true
		}
		for _, u := range n.Status.IPAM.Pools {
			names[u.Pool] = true
		}
		sorted := make([]string, 0, len(names))
		for p := range names {
			sorted = append(sorted, p)
		}
		sort.Strings(sorted)
		for _, p := range sorted {
			r := ClusterNodeRow{Node: n.Name, Pool: p}
			r.Blocks = append(nodeBlocks(n, p, "ipv4"), nodeBlocks(n, p, "ipv6")...)
			for _, q := range n.Spec.IPAM.Pools.Requested {
				if q.Pool == p {
					r.Requested = [2]int64{q.Needed.IPv4, q.Needed.IPv6}
				}
			}
			for fi, fam := range []string{"ipv4", "ipv6"} {
				if u := nodeUsage(n, p, fam); u != nil {
					r.Used[fi], r.Available[fi] = u.Used, u.Available
				}
			}
			rows = append(rows, r)
		}
		if len(sorted) == 0 {
			rows = append(rows, ClusterNodeRow{Node: n.Name})
		}
	}
	return rows
}

func printClusterPools(w *tabwriter.Writer, rows []ClusterPoolRow) {
	fmt.Fprintln(w, "POOL\tFAMILY\tPOOL CIDRS\tMASK\tNODE\tBLOCKS\tUSED\tAVAILABLE")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t/%d\t%s\t%s\t%d\t%d\n", r.Pool, r.Family, strings.Join(r.PoolCIDRs, ","), r.MaskSize,
			dash(r.Node), dash(strings.Join(r.Blocks, ",")), r.Used, r.Available)
	}
}

func printClusterNodes(w *tabwriter.Writer, rows []ClusterNodeRow) {
	fmt.Fprintln(w, "NODE\tPOOL\tBLOCKS\tREQUESTED v4/v6\tUSED v4/v6\tAVAILABLE v4/v6")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d/%d\t%d/%d\t%d/%d\n", r.Node, dash(r.Pool), dash(strings.Join(r.Blocks, ",")),
			r.Requested[0], r.Requested[1], r.Used[0], r.Used[1], r.Available[0], r.Available[1])
	}
}
