package wire

import (
	"time"

	"github.com/allot-ipam/allot/sdk/datapath"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
)

const (
	msgDatapathConfig = "datapath config"
	msgDatapathStatus = "datapath status"
)

// DatapathConfigFromProto decodes a datapath config (plugin side). It checks what the wire
// can get wrong (CIDR strings, port numbers); the plugin still runs Config.Validate for the
// contract's own rules.
func DatapathConfigFromProto(m *pb.DatapathConfig) (datapath.Config, error) {
	if m == nil {
		return datapath.Config{}, invalid(msgDatapathConfig, "", "missing message")
	}
	var c datapath.Config
	var err error
	if c.PodCIDRs, err = parsePrefixes(msgDatapathConfig, "pod_cidrs", m.PodCidrs); err != nil {
		return datapath.Config{}, err
	}
	if c.NonMasqueradeCIDRs, err = parsePrefixes(msgDatapathConfig, "non_masquerade_cidrs", m.NonMasqueradeCidrs); err != nil {
		return datapath.Config{}, err
	}
	if c.NativeRoutingCIDRs, err = parsePrefixes(msgDatapathConfig, "native_routing_cidrs", m.NativeRoutingCidrs); err != nil {
		return datapath.Config{}, err
	}
	if pr := m.PortRange; pr != nil {
		if pr.Min > 65535 {
			return datapath.Config{}, invalid(msgDatapathConfig, "port_range.min", "%d is not a port", pr.Min)
		}
		if pr.Max > 65535 {
			return datapath.Config{}, invalid(msgDatapathConfig, "port_range.max", "%d is not a port", pr.Max)
		}
		c.PortRange = datapath.PortRange{Min: uint16(pr.Min), Max: uint16(pr.Max)}
	}
	c.MasqLinkLocal = m.MasqLinkLocal
	c.NonMasqueradeExplicit = m.NonMasqueradeExplicit
	c.MasqLinkLocalIPv6 = m.MasqLinkLocalIpv6
	c.EgressInterfaces = m.EgressInterfaces
	c.PodInterfaces = m.PodInterfaces
	c.MasqueradeToRouteSource = m.MasqueradeToRouteSource
	c.RandomFully = m.RandomFully
	c.Maps = datapath.MapSizes{ConnTrack: m.GetMaps().GetConnTrack(), CIDRs: m.GetMaps().GetCidrs()}
	c.GCInterval = time.Duration(m.GcIntervalNanos)
	t := m.GetTimeouts()
	c.Timeouts = datapath.Timeouts{
		TCP:       time.Duration(t.GetTcpNanos()),
		TCPClosed: time.Duration(t.GetTcpClosedNanos()),
		UDP:       time.Duration(t.GetUdpNanos()),
		ICMP:      time.Duration(t.GetIcmpNanos()),
	}
	c.PinPath = m.PinPath
	return c, nil
}

// DatapathStatusFromProto decodes a plugin's status (host side).
func DatapathStatusFromProto(m *pb.DatapathStatus) (datapath.Status, error) {
	if m == nil {
		return datapath.Status{}, invalid(msgDatapathStatus, "", "missing message")
	}
	for i, n := range m.Interfaces {
		if n == "" {
			return datapath.Status{}, invalid(msgDatapathStatus, idx("interfaces", i), "empty interface name")
		}
	}
	return datapath.Status{
		Name: m.Name, Active: m.Active, Interfaces: m.Interfaces, Detail: mapFromProto(m.Detail), LastError: m.LastError,
	}, nil
}
