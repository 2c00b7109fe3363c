// Package datapath is the contract between allot and the datapath plugins
// that program what happens to pod traffic leaving the node (masquerade).
//
// A datapath is handed a Config with Apply, which it must apply
// idempotently; a later Apply with a changed Config reloads the datapath
// without dropping established flows. Remove undoes everything the datapath
// created (rules, chains, programs, qdisc filters, pinned maps) and is
// idempotent too. The semantics follow ip-masq-agent and Cilium:
// pod-sourced traffic is masqueraded to the node's address except towards
// the non-masquerade CIDRs (EffectiveNonMasquerade) and only on the egress
// interfaces.
//
// This package depends on the standard library only.
package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ContractVersion is the version of this contract. Plugins built against a
// different major version are refused by the host.
const ContractVersion = "1.0.0"

// Defaults applied when the corresponding Config field is zero.
const (
	DefaultConnTrackEntries = 524288 // both directions, as Cilium's SNAT map
	DefaultCIDREntries      = 1024
	DefaultGCInterval       = 10 * time.Second
	DefaultTCPTimeout       = 6 * time.Hour // established TCP, idle
	DefaultTCPClosedTimeout = 10 * time.Second
	DefaultUDPTimeout       = 60 * time.Second
	DefaultICMPTimeout      = 30 * time.Second
	DefaultPortMin          = 32768
	DefaultPortMax          = 65535
)

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("datapath: invalid config")

// DefaultNonMasqueradeCIDRs are ip-masq-agent's defaults with all reserved
// ranges (its --nomasq-all-reserved-ranges list, which Cilium's
// ip-masq-agent also uses): the ranges used when no non-masquerade list is
// configured.
var DefaultNonMasqueradeCIDRs = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("192.88.99.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

var (
	linkLocalV4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocalV6 = netip.MustParsePrefix("fe80::/10")
)

// DefaultPodInterfaces are the name patterns of pod-facing interfaces used
// when Config.PodInterfaces is empty: the host side of veth pairs made by
// the CNI bridge/ptp plugins (veth*), the bridge plugin's default bridge
// (cni*), Cilium (lxc*), Calico (cali*) and allot's own (allot*).
var DefaultPodInterfaces = []string{"allot+", "cali+", "cni+", "lxc+", "veth+"}

// MapSizes bounds the eBPF maps. Zero fields take the defaults.
type MapSizes struct {
	// ConnTrack is the number of connection-tracking entries; each
	// masqueraded flow takes two (one per direction). Default 524288.
	ConnTrack uint32
	// CIDRs bounds each of the pod-CIDR and non-masquerade LPM tries.
	// Default 1024.
	CIDRs uint32
}

// Timeouts are the idle times after which a flow's translation is
// forgotten by datapaths that track flows themselves (ebpf). Zero fields
// take the defaults.
type Timeouts struct {
	TCP       time.Duration // established TCP; default 6h
	TCPClosed time.Duration // after RST or FIN in both directions; default 10s
	UDP       time.Duration // default 60s
	ICMP      time.Duration // echo; default 30s
}

// PortRange is an inclusive range of ports used when a flow's original
// source port (or ICMP identifier) is taken. Zero means 32768-65535.
type PortRange struct {
	Min, Max uint16
}

// IsZero reports whether r is unset.
func (r PortRange) IsZero() bool { return r.Min == 0 && r.Max == 0 }

// String formats r as "min-max", the form ParsePortRange reads.
func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }

// Effective returns r, or the default range when r is zero.
func (r PortRange) Effective() PortRange {
	if r.IsZero() {
		return PortRange{Min: DefaultPortMin, Max: DefaultPortMax}
	}
	return r
}

// Config is what a datapath is asked to apply.
type Config struct {
	// PodCIDRs: traffic sourced from these prefixes is masqueraded (v4
	// and/or v6). A family with no pod CIDR is left alone.
	PodCIDRs []netip.Prefix
	// NonMasqueradeCIDRs are destinations never masqueraded; nil or empty
	// means ip-masq-agent's defaults (DefaultNonMasqueradeCIDRs) unless
	// NonMasqueradeExplicit is set.
	NonMasqueradeCIDRs []netip.Prefix
	// NonMasqueradeExplicit makes NonMasqueradeCIDRs the whole list even when
	// empty: an ip-masq-agent file with "nonMasqueradeCIDRs: []" masquerades
	// everything but link-local (and the pod and native-routing CIDRs).
	NonMasqueradeExplicit bool
	// MasqLinkLocal masquerades traffic to 169.254.0.0/16 (otherwise it is
	// exempt); MasqLinkLocalIPv6 likewise for fe80::/10.
	MasqLinkLocal     bool
	MasqLinkLocalIPv6 bool
	// NativeRoutingCIDRs are routable without NAT (Cilium's
	// ipv4/ipv6-native-routing-cidr); never masqueraded.
	NativeRoutingCIDRs []netip.Prefix
	// EgressInterfaces are the interfaces on which masquerading happens.
	// An entry ending in "+" is a prefix pattern ("eth+"), as in iptables
	// and Cilium. Empty means every interface except loopback, pod
	// interfaces (PodInterfaces) and bridge ports.
	EgressInterfaces []string
	// PodInterfaces are the name patterns of pod-facing interfaces, used
	// only when EgressInterfaces is empty. Empty means
	// DefaultPodInterfaces.
	PodInterfaces []string
	// MasqueradeToRouteSource uses the preferred source address of the
	// egress interface's route (default route first) instead of the
	// interface's primary address, like Cilium's
	// enable-masquerade-to-route-source.
	MasqueradeToRouteSource bool
	// RandomFully asks for fully randomised source ports (iptables
	// MASQUERADE --random-fully). Off by default: measured here it cut
	// connections/s from 7,000 to 3,000 (ports landing on TIME_WAIT
	// entries of the peer). Datapaths without the notion ignore it.
	RandomFully bool
	// PortRange is where a new source port is probed when the original is
	// taken (ebpf). Zero means 32768-65535.
	PortRange PortRange
	// Maps sizes the eBPF maps; zero fields take the defaults.
	Maps MapSizes
	// GCInterval is how often idle flows are collected (ebpf); zero means
	// 10s.
	GCInterval time.Duration
	// Timeouts are the idle timeouts of tracked flows (ebpf).
	Timeouts Timeouts
	// PinPath, if set, is a directory on a bpffs where a datapath may pin
	// its maps and links so that they survive a daemon restart; Remove
	// deletes what was pinned there. Empty: nothing is pinned.
	PinPath string
}

// Validate checks c. Every error wraps ErrInvalidConfig and names the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...)))
	}
	checkPrefixes := func(field string, ps []netip.Prefix) {
		for i, p := range ps {
			switch {
			case !p.IsValid():
				bad(fmt.Sprintf("%s[%d]", field, i), "not a valid prefix")
			case p.Addr().Is4In6():
				bad(fmt.Sprintf("%s[%d]", field, i), "%s: IPv4-mapped IPv6 prefix; write it as IPv4", p)
			case p.Addr().Zone() != "":
				bad(fmt.Sprintf("%s[%d]", field, i), "%s: zone not allowed", p)
			case p.Masked() != p:
				bad(fmt.Sprintf("%s[%d]", field, i), "%s has host bits set (did you mean %s?)", p, p.Masked())
			}
		}
	}
	checkPrefixes("PodCIDRs", c.PodCIDRs)
	checkPrefixes("NonMasqueradeCIDRs", c.NonMasqueradeCIDRs)
	checkPrefixes("NativeRoutingCIDRs", c.NativeRoutingCIDRs)
	for i, p := range c.PodCIDRs {
		if p.IsValid() && p.Bits() == 0 {
			bad(fmt.Sprintf("PodCIDRs[%d]", i), "%s would masquerade everything; use a narrower prefix", p)
		}
	}
	checkNames := func(field string, names []string) {
		for i, n := range names {
			if err := ValidateInterfacePattern(n); err != nil {
				bad(fmt.Sprintf("%s[%d]", field, i), "%v", err)
			}
		}
	}
	checkNames("EgressInterfaces", c.EgressInterfaces)
	checkNames("PodInterfaces", c.PodInterfaces)
	if !c.PortRange.IsZero() {
		switch {
		case c.PortRange.Min == 0:
			bad("PortRange.Min", "must be at least 1")
		case c.PortRange.Min > c.PortRange.Max:
			bad("PortRange", "min %d above max %d", c.PortRange.Min, c.PortRange.Max)
		}
	}
	if c.Maps.ConnTrack != 0 && c.Maps.ConnTrack < 64 {
		bad("Maps.ConnTrack", "%d entries is below the minimum of 64", c.Maps.ConnTrack)
	}
	if c.Maps.ConnTrack > 1<<26 {
		bad("Maps.ConnTrack", "%d entries is above the maximum of %d", c.Maps.ConnTrack, 1<<26)
	}
	if c.Maps.CIDRs > 1<<20 {
		bad("Maps.CIDRs", "%d entries is above the maximum of %d", c.Maps.CIDRs, 1<<20)
	}
	need := c.Maps.EffectiveCIDRs()
	if n := len(c.EffectiveNonMasquerade()); uint32(n) > need {
		bad("Maps.CIDRs", "%d non-masquerade prefixes do not fit in %d entries", n, need)
	}
	if n := len(c.PodCIDRs); uint32(n) > need {
		bad("Maps.CIDRs", "%d pod CIDRs do not fit in %d entries", n, need)
	}
	durations := []struct {
		field string
		d     time.Duration
	}{
		{"GCInterval", c.GCInterval},
		{"Timeouts.TCP", c.Timeouts.TCP},
		{"Timeouts.TCPClosed", c.Timeouts.TCPClosed},
		{"Timeouts.UDP", c.Timeouts.UDP},
		{"Timeouts.ICMP", c.Timeouts.ICMP},
	}
	for _, d := range durations {
		if d.d < 0 {
			bad(d.field, "negative duration %s", d.d)
		} else if d.d != 0 && d.d < time.Second {
			bad(d.field, "%s is below the 1s resolution of flow timestamps", d.d)
		}
	}
	if c.PinPath != "" && !strings.HasPrefix(c.PinPath, "/") {
		bad("PinPath", "%q is not an absolute path", c.PinPath)
	}
	return errors.Join(errs...)
}

// EffectiveNonMasquerade is the sorted, de-duplicated list of destinations
// that are never masqueraded: the configured list (or ip-masq-agent's
// defaults when it is empty and not explicit), link-local unless MasqLinkLocal /
// MasqLinkLocalIPv6, the native-routing CIDRs, and the pod CIDRs (with
// br_netfilter on, bridged pod-to-pod traffic passes POSTROUTING and must
// keep its source). Prefixes covered by a shorter one in the list are
// dropped. Invalid prefixes are skipped (Validate reports them).
func (c Config) EffectiveNonMasquerade() []netip.Prefix {
	var out []netip.Prefix
	if len(c.NonMasqueradeCIDRs) == 0 && !c.NonMasqueradeExplicit {
		out = append(out, DefaultNonMasqueradeCIDRs...)
	} else {
		out = append(out, c.NonMasqueradeCIDRs...)
	}
	if !c.MasqLinkLocal {
		out = append(out, linkLocalV4)
	}
	if !c.MasqLinkLocalIPv6 {
		out = append(out, linkLocalV6)
	}
	out = append(out, c.NativeRoutingCIDRs...)
	out = append(out, c.PodCIDRs...)
	return NormalizePrefixes(out)
}

// NormalizePrefixes masks, sorts (IPv4 first, then by address, then by
// length) and de-duplicates ps, dropping invalid prefixes and prefixes
// contained in another one of the list.
func NormalizePrefixes(ps []netip.Prefix) []netip.Prefix {
	tmp := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		tmp = append(tmp, p.Masked())
	}
	slices.SortFunc(tmp, ComparePrefixes)
	out := tmp[:0]
	for _, p := range tmp {
		covered := false
		for _, q := range out {
			if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return slices.Clip(out)
}

// ComparePrefixes orders IPv4 before IPv6, then by address, then shorter
// prefix first.
func ComparePrefixes(a, b netip.Prefix) int {
	if a.Addr().Is4() != b.Addr().Is4() {
		if a.Addr().Is4() {
			return -1
		}
		return 1
	}
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// SplitFamilies returns the IPv4 and IPv6 members of ps, order kept.
func SplitFamilies(ps []netip.Prefix) (v4, v6 []netip.Prefix) {
	for _, p := range ps {
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	return v4, v6
}

// ValidateInterfacePattern checks an interface name or "prefix+" pattern.
func ValidateInterfacePattern(p string) error {
	name := strings.TrimSuffix(p, "+")
	switch {
	case p == "":
		return errors.New("empty interface name")
	case name == "":
		return errors.New(`"+" alone would match every interface; leave the list empty instead`)
	case len(name) > 15:
		return fmt.Errorf("%q: interface names are at most 15 bytes", p)
	case strings.ContainsAny(name, "/+ \t\n\x00:"):
		return fmt.Errorf("%q: interface names cannot contain '/', ':', '+' or spaces", p)
	}
	return nil
}

// MatchInterface reports whether the interface name matches one of the
// patterns (exact names, or prefixes written "eth+").
func MatchInterface(patterns []string, name string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "+"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}

// ParsePortRange reads "min-max" (or a single port) as used in
// configuration files.
func ParsePortRange(s string) (PortRange, error) {
	s = strings.TrimSpace(s)
	lo, hi, found := strings.Cut(s, "-")
	parse := func(v string) (uint16, error) {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 16)
		if err != nil {
			return 0, fmt.Errorf("port range %q: %q is not a port", s, v)
		}
		if n == 0 {
			return 0, fmt.Errorf("port range %q: port 0 is not allowed", s)
		}
		return uint16(n), nil
	}
	min, err := parse(lo)
	if err != nil {
		return PortRange{}, err
	}
	max := min
	if found {
		if max, err = parse(hi); err != nil {
			return PortRange{}, err
		}
	}
	if min > max {
		return PortRange{}, fmt.Errorf("port range %q: min %d above max %d", s, min, max)
	}
	return PortRange{Min: min, Max: max}, nil
}

// ParsePrefixList reads a comma- or space-separated list of CIDRs, as
// found in flags and environment variables. Bare addresses are taken as
// host prefixes (/32, /128).
func ParsePrefixList(s string) ([]netip.Prefix, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
	out := make([]netip.Prefix, 0, len(fields))
	for i, f := range fields {
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("CIDR list entry %d %q: %w", i, f, err)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("CIDR list entry %d %q: %w", i, f, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// EffectiveConnTrack returns the conntrack map size with the default applied.
func (m MapSizes) EffectiveConnTrack() uint32 {
	if m.ConnTrack == 0 {
		return DefaultConnTrackEntries
	}
	return m.ConnTrack
}

// EffectiveCIDRs returns the LPM map size with the default applied.
func (m MapSizes) EffectiveCIDRs() uint32 {
	if m.CIDRs == 0 {
		return DefaultCIDREntries
	}
	return m.CIDRs
}

// Effective returns t with defaults applied.
func (t Timeouts) Effective() Timeouts {
	def := func(d, v time.Duration) time.Duration {
		if d == 0 {
			return v
		}
		return d
	}
	return Timeouts{
		TCP:       def(t.TCP, DefaultTCPTimeout),
		TCPClosed: def(t.TCPClosed, DefaultTCPClosedTimeout),
		UDP:       def(t.UDP, DefaultUDPTimeout),
		ICMP:      def(t.ICMP, DefaultICMPTimeout),
	}
}

// EffectiveGCInterval returns GCInterval with the default applied.
func (c Config) EffectiveGCInterval() time.Duration {
	if c.GCInterval == 0 {
		return DefaultGCInterval
	}
	return c.GCInterval
}

// EffectivePodInterfaces returns PodInterfaces or the defaults.
func (c Config) EffectivePodInterfaces() []string {
	if len(c.PodInterfaces) == 0 {
		return DefaultPodInterfaces
	}
	return c.PodInterfaces
}

// Status describes what a datapath has in place.
type Status struct {
	Name       string            // the datapath's name ("ebpf", "iptables", "none")
	Active     bool              // something is programmed (Apply succeeded, no Remove since)
	Interfaces []string          // egress interfaces in effect, sorted
	Detail     map[string]string // datapath-specific facts (program IDs, chain names, counters)
	LastError  string            // last Apply/Remove/background error, "" if none
}

// Datapath programs masquerading on the node. Implementations are safe for
// concurrent use.
type Datapath interface {
	// Apply installs cfg, or reloads to cfg without dropping established
	// flows if something is already installed. Idempotent.
	Apply(ctx context.Context, cfg Config) error
	// Remove deletes every rule, chain, program, filter and pinned map the
	// datapath created. Idempotent.
	Remove(ctx context.Context) error
	// Status reports what is in place.
	Status(ctx context.Context) (Status, error)
}
