// Command aws-eni serves allot's AWS ENI cloud backend as a go-plugin process: the same code
// as the built-in backend, behind sdk/pluginrpc. allotd starts it (transport "process");
// the flags mirror the backend's configuration keys (and Cilium's flag names where Cilium
// has one).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	awseni "github.com/allot-ipam/allot/plugins/cloud/awseni"
	"github.com/allot-ipam/allot/sdk/pluginrpc"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "aws-eni:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	b, err := awseni.New(context.Background(), cfg, awseni.Options{Logger: log, Metrics: awseni.NewMetrics(nil)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginrpc.ServeCloudBackend(b, pluginrpc.Info{Name: awseni.Name, Version: awseni.Version})
}

func parseFlags(args []string) (awseni.Config, error) {
	cfg := awseni.DefaultConfig()
	fs := flag.NewFlagSet("aws-eni", flag.ContinueOnError)
	fs.StringVar(&cfg.Region, "region", "", "EC2 region (default: from the environment / IMDS)")
	fs.StringVar(&cfg.Endpoint, "ec2-api-endpoint", "", "EC2 endpoint override (BaseEndpoint)")
	fs.StringVar(&cfg.VPCID, "vpc-id", "", "limit the inventory to this VPC")
	fs.Float64Var(&cfg.QPS, "aws-qps", cfg.QPS, "client-side EC2 requests per second")
	fs.IntVar(&cfg.Burst, "aws-burst", cfg.Burst, "client-side EC2 request burst")
	fs.IntVar(&cfg.MaxAttempts, "aws-max-attempts", cfg.MaxAttempts, "attempts per EC2 call (retries on throttling and 5xx)")
	fs.DurationVar(&cfg.MaxBackoff.Duration, "aws-max-backoff", cfg.MaxBackoff.Duration, "cap of the backoff between attempts")
	fs.DurationVar(&cfg.ResyncInterval.Duration, "resync-interval", time.Minute, "full inventory resync interval")
	mapping := fs.String("aws-instance-limit-mapping", "", "limits overrides: 'type=enis,addrsPerEni,ipv6PerEni' entries separated by spaces or ';'")
	fs.BoolVar(&cfg.UpdateLimitsViaAPI, "update-ec2-adapter-limit-via-api", false, "read instance limits with DescribeInstanceTypes")
	sgTags := fs.String("security-group-tags", "", "k=v pairs (comma separated) selecting the security groups of new ENIs")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if *mapping != "" {
		m, err := awseni.ParseLimitMapping(*mapping)
		if err != nil {
			return cfg, err
		}
		cfg.InstanceLimits = map[string]string{}
		for t, l := range m {
			cfg.InstanceLimits[t] = fmt.Sprintf("%d,%d,%d", l.MaxInterfaces, l.AddressesPerInterface, l.IPv6AddressesPerInterface)
		}
	}
	if *sgTags != "" {
		cfg.SecurityGroupTags = map[string]string{}
		for _, kv := range strings.Split(*sgTags, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return cfg, fmt.Errorf("security-group-tags: %q is not k=v", kv)
			}
			cfg.SecurityGroupTags[k] = v
		}
	}
	return cfg, cfg.Validate()
}
