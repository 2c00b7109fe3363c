// Command allotctl inspects a running allotd through its local API.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/client"
	"github.com/spf13/cobra"
)

func main() {
	if err := newRoot(os.Stdout).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "allotctl:", err)
		os.Exit(1)
	}
}

type options struct {
	socket  string
	output  string
	timeout time.Duration
}

func newRoot(out io.Writer) *cobra.Command {
	o := &options{}
	root := &cobra.Command{
		Use:           "allotctl",
		Short:         "Inspect a running allotd and the cluster; import other IPAM systems' objects",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	def := os.Getenv("ALLOT_SOCKET")
	if def == "" {
		def = api.DefaultSocket
	}
	root.PersistentFlags().StringVarP(&o.socket, "socket", "s", def, "allotd API socket (env ALLOT_SOCKET)")
	root.PersistentFlags().StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	root.PersistentFlags().DurationVar(&o.timeout, "timeout", 10*time.Second, "request timeout")
	root.AddCommand(
		o.command("pools", "Pools with their CIDRs and usage", func(ctx context.Context, c *client.Client) (any, func(*tabwriter.Writer), error) {
			pools, err := c.Pools(ctx)
			return pools, func(w *tabwriter.Writer) { printPools(w, pools) }, err
		}),
		o.command("allocations", "Allocations: owner, pod and addresses", func(ctx context.Context, c *client.Client) (any, func(*tabwriter.Writer), error) {
			allocs, err := c.Allocations(ctx)
			return allocs, func(w *tabwriter.Writer) { printAllocations(w, allocs) }, err
		}),
		o.command("status", "Daemon status", func(ctx context.Context, c *client.Client) (any, func(*tabwriter.Writer), error) {
			st, err := c.Status(ctx)
			return st, func(w *tabwriter.Writer) { printStatus(w, st) }, err
		}),
		o.command("plugins", "Loaded plugins: kind, transport, version, health, last error", func(ctx context.Context, c *client.Client) (any, func(*tabwriter.Writer), error) {
			ps, err := c.Plugins(ctx)
			return ps, func(w *tabwriter.Writer) { printPlugins(w, ps) }, err
		}),
		o.clusterCommand(),
		o.importCommand(),
		o.explainCommand(),
	)
	root.SetOut(out)
	return root
}

type fetchFunc func(context.Context, *client.Client) (any, func(*tabwriter.Writer), error)

func (o *options) command(name, short string, fetch fetchFunc) *cobra.Command {
	return &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "table" && o.output != "json" {
				return fmt.Errorf("--output: %q is not table or json", o.output)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			c := client.New(o.socket)
			defer c.Close()
			v, table, err := fetch(ctx, c)
			if err != nil {
				return err
			}
			if o.output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			table(w)
			return w.Flush()
		},
	}
}

func printPools(w *tabwriter.Writer, pools []api.PoolStatus) {
	fmt.Fprintln(w, "POOL\tFAMILY\tCIDRS\tUSED\tFREE\tUSED%\tDEFAULT")
	for _, p := range pools {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%v\n", p.Name, p.Family, strings.Join(p.CIDRs, ","), p.Used, count(p.Free), percent(p.Utilization), p.Default)
	}
}

func printAllocations(w *tabwriter.Writer, allocs []api.Allocation) {
	fmt.Fprintln(w, "OWNER\tNETWORK\tPOD\tADDRESSES\tAGE")
	for _, a := range allocs {
		pod := "-"
		if a.Pod.Name != "" {
			pod = a.Pod.Namespace + "/" + a.Pod.Name
		}
		addrs := make([]string, len(a.IPs))
		for i, ip := range a.IPs {
			addrs[i] = ip.Address
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", a.Owner, a.Network, pod, strings.Join(addrs, ","), age(a.Created))
	}
}

func printStatus(w *tabwriter.Writer, st *api.Status) {
	fmt.Fprintf(w, "Ready:\t%v\n", st.Ready)
	if st.Message != "" {
		fmt.Fprintf(w, "Message:\t%s\n", st.Message)
	}
	fmt.Fprintf(w, "Version:\t%s\n", st.Version)
	fmt.Fprintf(w, "Mode:\t%s\n", st.Mode)
	fmt.Fprintf(w, "Uptime:\t%s\n", st.Uptime)
	fmt.Fprintf(w, "Allocations:\t%d\n", st.Allocations)
	for _, p := range st.Pools {
		fmt.Fprintf(w, "Pool %s:\t%d used, %s free (%s)\n", p.Name, p.Used, count(p.Free), percent(p.Utilization))
	}
}

func printPlugins(w *tabwriter.Writer, ps []api.PluginStatus) {
	fmt.Fprintln(w, "NAME\tKIND\tTRANSPORT\tVERSION\tCONTRACT\tHEALTH\tRESTARTS\tLAST ERROR")
	for _, p := range ps {
		health := "healthy"
		if !p.Healthy {
			health = "unhealthy"
		}
		last := p.LastError
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", p.Name, p.Kind, p.Transport, dash(p.Version), dash(p.Contract), health, p.Restarts, last)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// count prints huge (IPv6) counts compactly.
func count(n uint64) string {
	if n >= 1e9 {
		return fmt.Sprintf("%.3g", float64(n))
	}
	return fmt.Sprintf("%d", n)
}

func percent(u float64) string {
	if u > 0 && u < 0.0001 {
		return "<0.01%"
	}
	return fmt.Sprintf("%.2f%%", u*100)
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String()
}
