package main

import (
	"log/slog"
	"os"

	"github.com/allot-ipam/allot/core/enihost"
	"github.com/spf13/cobra"
)

// newAcceptRACommand is `allotd accept-ra`: in ENI mode with IPv6, the DaemonSet's
// privileged init container sets the primary ENI's accept_ra with it before the agent,
// unprivileged, starts (as the AWS VPC CNI's aws-vpc-cni-init does; the image has no shell).
func newAcceptRACommand() *cobra.Command {
	var o enihost.AcceptRAOptions
	cmd := &cobra.Command{
		Use:   "accept-ra [--interface NAME]",
		Short: "set net.ipv6.conf.<primary ENI>.accept_ra=2, so the node keeps its IPv6 default route once it forwards",
		Long: `Sets net.ipv6.conf.<interface>.accept_ra to 2 on the node's primary ENI: the link of the
main table's IPv6 default route, else of its IPv4 default route, unless --interface names it.
The ptp plugin turns on net.ipv6.conf.all.forwarding at the first IPv6 pod; with accept_ra 1
(the default) the kernel then drops the default route it learnt from the VPC router's
advertisements and learns no other. At 2 it keeps it, and a link that already lost it gets a
router solicitation, whose answer restores it. A value already 2 is left alone; the change is
logged. Needs a writable /proc/sys (a privileged container) in the host's network
namespace.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("command", "accept-ra")
			_, err := enihost.SetPrimaryAcceptRA(o)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Interface, "interface", "", "the primary ENI's link (default: the link of the IPv6, else IPv4, default route)")
	f.StringVar(&o.ProcSys, "proc-sys", "/proc/sys", "where the sysctls are mounted")
	return cmd
}
