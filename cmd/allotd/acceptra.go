package main

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"github.com/allot-ipam/allot/core/enihost"
	awseni "github.com/allot-ipam/allot/plugins/cloud/awseni"
	"github.com/spf13/cobra"
)

// newAcceptRACommand is `allotd accept-ra`: in ENI mode with IPv6, the DaemonSet's
// privileged init container sets the primary ENI's accept_ra with it before the agent,
// unprivileged, starts (as the AWS VPC CNI's aws-vpc-cni-init does; the image has no shell).
func newAcceptRACommand() *cobra.Command {
	var o enihost.AcceptRAOptions
	var imdsEndpoint string
	cmd := &cobra.Command{
		Use:   "accept-ra [--interface NAME]",
		Short: "set net.ipv6.conf.<primary ENI>.accept_ra=2, so the node keeps its IPv6 default route once it forwards",
		Long: `Sets net.ipv6.conf.<interface>.accept_ra to 2 on the node's primary ENI, unless --interface
names it: the link whose MAC is the instance's primary MAC from the instance metadata service
(latest/meta-data/mac, with an IMDSv2 token), as the AWS VPC CNI finds it; only when IMDS cannot
be reached (AWS_EC2_METADATA_DISABLED=true, not on EC2), the link of the main table's IPv6
default route, else of its IPv4 default route. The log says which.
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
			o.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)).With("command", "accept-ra")
			o.PrimaryMAC = imdsPrimaryMAC(imdsEndpoint)
			_, err := enihost.SetPrimaryAcceptRA(cmd.Context(), o)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Interface, "interface", "", "the primary ENI's link (default: the link with the instance's primary MAC from IMDS)")
	f.StringVar(&imdsEndpoint, "imds-endpoint", "", "the instance metadata service's address (default: the AWS SDK's, http://169.254.169.254 or AWS_EC2_METADATA_SERVICE_ENDPOINT)")
	f.StringVar(&o.ProcSys, "proc-sys", "/proc/sys", "where the sysctls are mounted")
	return cmd
}

// imdsPrimaryMAC reads the instance's primary MAC through the aws-eni backend's IMDS client;
// an IMDS that does not answer is enihost.ErrMetadataUnreachable, for the fallback.
func imdsPrimaryMAC(endpoint string) func(context.Context) (net.HardwareAddr, error) {
	return func(ctx context.Context) (net.HardwareAddr, error) {
		c, err := awseni.NewIMDSClient(ctx, awseni.Config{}, endpoint)
		if err != nil {
			return nil, err
		}
		mac, err := awseni.PrimaryMAC(ctx, c)
		if errors.Is(err, awseni.ErrIMDSUnreachable) {
			return nil, imdsUnreachable{err}
		}
		return mac, err
	}
}

// imdsUnreachable is an awseni.ErrIMDSUnreachable error that is also
// enihost.ErrMetadataUnreachable, with the former's message only.
type imdsUnreachable struct{ error }

func (e imdsUnreachable) Unwrap() error      { return e.error }
func (imdsUnreachable) Is(target error) bool { return target == enihost.ErrMetadataUnreachable }
