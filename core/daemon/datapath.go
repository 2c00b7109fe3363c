package daemon

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/allot-ipam/allot/core/datapathctl"
	"github.com/allot-ipam/allot/core/ipam"
	datapaths "github.com/allot-ipam/allot/plugins/datapath"
	"github.com/allot-ipam/allot/sdk/datapath"
)

// startDatapath applies the configured datapath with the pools' CIDRs as pod CIDRs. A
// datapath plugin loaded from plugins wins over a built-in of the same name.
func (d *Daemon) startDatapath(ctx context.Context, pools []ipam.PoolSpec) (*datapathctl.Controller, error) {
	dc := d.cfg.Datapath
	base, err := dc.DatapathConfig()
	if err != nil {
		return nil, err
	}
	var dp datapath.Datapath
	if l := d.plugins.Loaded(dc.Type); l != nil {
		if l.Datapath == nil {
			return nil, fmt.Errorf("datapath.type: plugin %q is a %s, not a datapath", dc.Type, l.Kind)
		}
		dp = l.Datapath
	} else if f, ok := datapaths.Lookup(dc.Type); ok {
		dp = f(d.log.With("component", "datapath", "datapath", dc.Type))
	} else {
		return nil, fmt.Errorf("datapath.type: %q is neither a built-in datapath (%s) nor a loaded datapath plugin", dc.Type, datapaths.Names())
	}
	var cidrs []netip.Prefix
	for _, p := range pools {
		cidrs = append(cidrs, p.Allocator.CIDRs...)
	}
	ctl := datapathctl.New(datapathctl.Options{
		Datapath:        dp,
		Base:            base,
		PodCIDRs:        cidrs,
		MasqAgentConfig: dc.MasqAgentConfig,
		Logger:          d.log.With("component", "datapath"),
	})
	if err := ctl.Start(ctx); err != nil {
		return nil, err
	}
	return ctl, nil
}
