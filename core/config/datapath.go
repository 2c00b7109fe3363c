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
	// EnableIPv4Masquerade and EnableIPv6Masquerade switch masquerading per family (Cilium's
	// enable-ipv4-masquerade and enable-ipv6-masquerade); both default to true. A family
	// switched off has its pod addresses kept from the datapath, which then leaves that
	// family's traffic alone (datapath.Config: a family with no pod CIDR is not touched).
	EnableIPv4Masquerade *bool `koanf:"enableIPv4Masquerade"`
	EnableIPv6Masquerade *bool `koanf:"enableIPv6Masquerade"`
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

// DefaultDatapathType is datapath.type when the configuration does not set it: iptables in
// ENI mode, where pods hold VPC addresses that must be masqueraded on their way out of the
// VPC (Cilium masquerades by default, enable-ipv4-masquerade: true, and so does the AWS VPC
// CNI, AWS_VPC_K8S_CNI_EXTERNALSNAT=false); none otherwise, since masquerading changes the
// node's firewall and multi-pool or standalone setups opt in.
func DefaultDatapathType(c *Config) string {
	if c.Cluster.ENI.Enabled() {
		return "iptables"
	}
	return "none"
}

// MasqueradedPodCIDRs returns the prefixes of cidrs whose family is masqueraded
// (EnableIPv4Masquerade, EnableIPv6Masquerade), order kept.
func (d Datapath) MasqueradedPodCIDRs(cidrs []netip.Prefix) []netip.Prefix {
	on := func(b *bool) bool { return b == nil || *b }
	v4, v6 := on(d.EnableIPv4Masquerade), on(d.EnableIPv6Masquerade)
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, p := range cidrs {
		if p.Addr().Is4() && v4 || !p.Addr().Is4() && v6 {
			out = append(out, p)
		}
	}
	return out
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
