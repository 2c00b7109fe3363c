package daemon

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/allot-ipam/allot/core/datapathctl"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/registry"
	"github.com/allot-ipam/allot/sdk/datapath"
)

// startDatapath applies the configured datapath with the pools' CIDRs as pod CIDRs.
func (d *Daemon) startDatapath(ctx context.Context, pools []ipam.PoolSpec) (*datapathctl.Controller, error) {
	var cidrs []netip.Prefix
	for _, p := range pools {
		cidrs = append(cidrs, p.Allocator.CIDRs...)
	}
	ctl, err := d.newDatapath(d.cfg.Datapath.MasqueradedPodCIDRs(cidrs))
	if err != nil {
		return nil, err
	}
	if err := ctl.Start(ctx); err != nil {
		return nil, err
	}
	return ctl, nil
}

// newDatapath builds the controller of the configured datapath, not applied yet. A datapath
// plugin loaded from plugins wins over a built-in of the same name.
func (d *Daemon) newDatapath(podCIDRs []netip.Prefix) (*datapathctl.Controller, error) {
	dc := d.cfg.Datapath
	base, err := d.cfg.AgentDatapathConfig()
	if err != nil {
		return nil, err
	}
	var dp datapath.Datapath
	if l := d.plugins.Loaded(dc.Type); l != nil {
		if l.Datapath == nil {
			return nil, fmt.Errorf("datapath.type: plugin %q is a %s, not a datapath", dc.Type, l.Kind)
		}
		dp = l.Datapath
	} else if f, ok := registry.Lookup(d.builtins.Datapaths, dc.Type); ok {
		dp = f(d.log.With("component", "datapath", "datapath", dc.Type))
	} else {
		return nil, fmt.Errorf("datapath.type: %q is neither a built-in datapath (%s) nor a loaded datapath plugin", dc.Type, registry.Names(d.builtins.Datapaths))
	}
	return datapathctl.New(datapathctl.Options{
		Datapath:        dp,
		Base:            base,
		PodCIDRs:        podCIDRs,
		MasqAgentConfig: dc.MasqAgentConfig,
		Logger:          d.log.With("component", "datapath"),
	}), nil
}

// agentPodCIDRs are the pod CIDRs of an agent: every block its pools hold on this node, as
// ipam.Manager.Usage reports them. A block stays while a pod holds an address of it, even
// after it left the AllotNode, so its pods stay masqueraded.
//
// In ENI mode the blocks are the node's cloud addresses, one /32 (/128) each, and those are
// the pod CIDRs, not their subnets: the subnet also holds the node's own addresses (the
// primary ENI's, and each secondary ENI's first address), other instances and other nodes'
// pods, none of which is this node's pod traffic to masquerade, and an address given back
// to the cloud stops being masqueraded as soon as it leaves the pool. Destinations in the
// VPC stay unmasqueraded through the non-masquerade list (ip-masq-agent's defaults cover
// the private ranges; list the VPC's CIDRs otherwise, as the AWS VPC CNI exempts its VPC).
//
// Addresses of shared pools (cluster.sharedPools) are not pod CIDRs: those are underlay
// networks whose pods are reachable as they are.
func agentPodCIDRs(usage []ipam.PoolUsage) []netip.Prefix {
	var out []netip.Prefix
	for _, u := range usage {
		for _, c := range u.CIDRs {
			out = append(out, c.Prefix)
		}
	}
	return out
}
