package wire

import (
	"github.com/allot-ipam/allot/sdk/datapath"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
)

// DatapathConfigToProto encodes a datapath config (host side).
func DatapathConfigToProto(c datapath.Config) *pb.DatapathConfig {
	return &pb.DatapathConfig{
		PodCidrs:                prefixesToStrings(c.PodCIDRs),
		NonMasqueradeCidrs:      prefixesToStrings(c.NonMasqueradeCIDRs),
		MasqLinkLocal:           c.MasqLinkLocal,
		MasqLinkLocalIpv6:       c.MasqLinkLocalIPv6,
		NativeRoutingCidrs:      prefixesToStrings(c.NativeRoutingCIDRs),
		EgressInterfaces:        c.EgressInterfaces,
		PodInterfaces:           c.PodInterfaces,
		MasqueradeToRouteSource: c.MasqueradeToRouteSource,
		RandomFully:             c.RandomFully,
		PortRange:               &pb.PortRange{Min: uint32(c.PortRange.Min), Max: uint32(c.PortRange.Max)},
		Maps:                    &pb.MapSizes{ConnTrack: c.Maps.ConnTrack, Cidrs: c.Maps.CIDRs},
		GcIntervalNanos:         int64(c.GCInterval),
		Timeouts: &pb.Timeouts{
			TcpNanos:       int64(c.Timeouts.TCP),
			TcpClosedNanos: int64(c.Timeouts.TCPClosed),
			UdpNanos:       int64(c.Timeouts.UDP),
			IcmpNanos:      int64(c.Timeouts.ICMP),
		},
		PinPath:               c.PinPath,
		NonMasqueradeExplicit: c.NonMasqueradeExplicit,
	}
}

// DatapathStatusToProto encodes a datapath status (plugin side).
func DatapathStatusToProto(s datapath.Status) *pb.DatapathStatus {
	return &pb.DatapathStatus{
		Name: s.Name, Active: s.Active, Interfaces: s.Interfaces, Detail: mapToProto(s.Detail), LastError: s.LastError,
	}
}
