package cniplugin

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/allot-ipam/allot/core/api"
)

// resultFrom turns the daemon's allocation into a CNI result: addresses with their gateway,
// and the pool routes. An IPAM plugin creates no interface, so Interface stays nil.
func resultFrom(a *api.Allocation) (*current.Result, error) {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	if len(a.IPs) == 0 {
		return nil, types.NewError(types.ErrInternal, "allotd answered an allocation without addresses", "")
	}
	for i, ip := range a.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			return nil, badAnswer("ips[%d].address", i, ip.Address)
		}
		ipc := &current.IPConfig{Address: prefixToIPNet(p, false)}
		if ip.Gateway != "" {
			gw, err := netip.ParseAddr(ip.Gateway)
			if err != nil {
				return nil, badAnswer("ips[%d].gateway", i, ip.Gateway)
			}
			ipc.Gateway = net.IP(gw.Unmap().AsSlice())
		}
		res.IPs = append(res.IPs, ipc)
	}
	for i, r := range a.Routes {
		dst, err := netip.ParsePrefix(r.Dst)
		if err != nil {
			return nil, badAnswer("routes[%d].dst", i, r.Dst)
		}
		rt := &types.Route{Dst: prefixToIPNet(dst, true)}
		if r.GW != "" {
			gw, err := netip.ParseAddr(r.GW)
			if err != nil {
				return nil, badAnswer("routes[%d].gw", i, r.GW)
			}
			rt.GW = net.IP(gw.Unmap().AsSlice())
		}
		res.Routes = append(res.Routes, rt)
	}
	return res, nil
}

// prefixToIPNet converts, keeping the host bits of an address unless masked is set (route
// destinations are networks).
func prefixToIPNet(p netip.Prefix, masked bool) net.IPNet {
	if masked {
		p = p.Masked()
	}
	a := p.Addr().Unmap()
	return net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(p.Bits(), a.BitLen())}
}

func badAnswer(field string, i int, v string) *types.Error {
	return types.NewError(types.ErrInternal, fmt.Sprintf("allotd answered a bad value in "+field+": %q", i, v), "")
}
