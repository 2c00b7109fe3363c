package config

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/allot-ipam/allot/sdk/datapath"
)

// Datapath configures what happens to pod traffic leaving the node.
type Datapath struct {
	// Type is a built-in datapath (none, iptables, ebpf) or the name of a datapath plugin.
	Type string `koanf:"type"`
	// MasqAgentConfig is an ip-masq-agent configuration file (YAML or JSON with
	// nonMasqueradeCIDRs, masqLinkLocal, masqLinkLocalIPv6, resyncInterval). When set it
	// overrides the three fields below and is re-read every resyncInterval; a change is
	// applied without dropping established flows.
	MasqAgentConfig    string   `koanf:"masqAgentConfig"`
	NonMasqueradeCIDRs []string `koanf:"nonMasqueradeCIDRs"`
	MasqLinkLocal      bool     `koanf:"masqLinkLocal"`
	MasqLinkLocalIPv6  bool     `koanf:"masqLinkLocalIPv6"`
	// NativeRoutingCIDRs are never masqueraded (Cilium's native-routing CIDR).
	NativeRoutingCIDRs []string `koanf:"nativeRoutingCIDRs"`
	// EgressInterfaces masquerade; empty means every non-pod interface. "eth+" is a prefix.
	EgressInterfaces []string `koanf:"egressInterfaces"`
	// PodInterfaces are pod-facing interface patterns (default: veth+, cni+, ...).
	PodInterfaces           []string `koanf:"podInterfaces"`
	MasqueradeToRouteSource bool     `koanf:"masqueradeToRouteSource"`
	// RandomFully: iptables --random-fully; off by default (it costs connections).
	RandomFully bool `koanf:"randomFully"`
	// PortRange ("32768-65535") is where the eBPF datapath probes for a free source port.
	PortRange string `koanf:"portRange"`
	// ConntrackEntries sizes the eBPF connection-tracking map (0: 524288).
	ConntrackEntries uint32 `koanf:"conntrackEntries"`
	// GCInterval is how often the eBPF datapath collects idle flows (0: 10s).
	GCInterval time.Duration `koanf:"gcInterval"`
	// PinPath, on a bpffs, lets eBPF flows survive a daemon restart.
	PinPath string `koanf:"pinPath"`
}

// DatapathConfig converts the section to the datapath contract's Config, without the pod
// CIDRs (the daemon adds them) and without the ip-masq-agent file (read by the daemon).
func (d Datapath) DatapathConfig() (datapath.Config, error) {
	var c datapath.Config
	parse := func(field string, in []string) ([]netip.Prefix, error) {
		out := make([]netip.Prefix, 0, len(in))
		for i, s := range in {
			p, err := netip.ParsePrefix(s)
			if err != nil || p.Masked() != p {
				return nil, fmt.Errorf("datapath.%s[%d]: %q is not a CIDR (with no host bits)", field, i, s)
			}
			out = append(out, p)
		}
		return out, nil
	}
	var err error
	if c.NonMasqueradeCIDRs, err = parse("nonMasqueradeCIDRs", d.NonMasqueradeCIDRs); err != nil {
		return c, err
	}
	if c.NativeRoutingCIDRs, err = parse("nativeRoutingCIDRs", d.NativeRoutingCIDRs); err != nil {
		return c, err
	}
	if d.PortRange != "" {
		if c.PortRange, err = datapath.ParsePortRange(d.PortRange); err != nil {
			return c, fmt.Errorf("datapath.portRange: %w", err)
		}
	}
	c.MasqLinkLocal = d.MasqLinkLocal
	c.MasqLinkLocalIPv6 = d.MasqLinkLocalIPv6
	c.EgressInterfaces = d.EgressInterfaces
	c.PodInterfaces = d.PodInterfaces
	c.MasqueradeToRouteSource = d.MasqueradeToRouteSource
	c.RandomFully = d.RandomFully
	c.Maps.ConnTrack = d.ConntrackEntries
	c.GCInterval = d.GCInterval
	c.PinPath = d.PinPath
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("datapath: %w", err)
	}
	return c, nil
}

// AgentDatapathConfig is DatapathConfig plus, in agent mode, the cluster pod CIDR
// (cluster.podCIDRs) as native-routing CIDRs: in island mode pod addresses are not routable
// outside the cluster, so traffic to another pod keeps its source while everything leaving the
// cluster pod CIDR is masqueraded to the node's address (Google Distributed Cloud uses
// clusterNetwork.pods.cidrBlocks as its native routing CIDR the same way).
func (c *Config) AgentDatapathConfig() (datapath.Config, error) {
	dc, err := c.Datapath.DatapathConfig()
	if err != nil || c.Mode != "agent" {
		return dc, err
	}
	pods, err := c.Cluster.PodCIDRPrefixes()
	if err != nil {
		return dc, err
	}
	dc.NativeRoutingCIDRs = datapath.NormalizePrefixes(append(dc.NativeRoutingCIDRs, pods...))
	return dc, nil
}

func (c *Config) validateDatapath() []error {
	if c.Datapath.Type == "" {
		return []error{fmt.Errorf("datapath.type: must not be empty (none, iptables, ebpf or a datapath plugin's name)")}
	}
	if _, err := c.Datapath.DatapathConfig(); err != nil {
		return []error{err}
	}
	return nil
}
