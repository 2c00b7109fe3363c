package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/allot-ipam/allot/core/allocator"
)

// poolName is a DNS-label-like name, so pool names work as Kubernetes object names later.
var poolName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// Validate checks the whole configuration and returns every problem found, each naming
// its field.
func (c *Config) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if !slices.Contains(Modes, c.Mode) {
		add("mode", "%q is not supported (supported: %s)", c.Mode, strings.Join(Modes, ", "))
	}
	if c.Socket == "" {
		add("socket", "must not be empty")
	} else if !strings.HasPrefix(c.Socket, "/") {
		add("socket", "%q must be an absolute path", c.Socket)
	}
	if err := c.validateSocketGroup(); err != nil {
		errs = append(errs, err)
	}
	if c.Store.Path == "" {
		add("store.path", "must not be empty")
	}
	switch c.Store.OnCorruption {
	case "", OnCorruptionFail:
	case OnCorruptionRebuild:
		if c.Mode != "agent" {
			add("store.onCorruption", "%q is for agent mode only (it rebuilds from the API server); in %s mode an unusable store stops allotd", OnCorruptionRebuild, c.Mode)
		}
	default:
		add("store.onCorruption", "%q is not %s or %s", c.Store.OnCorruption, OnCorruptionRebuild, OnCorruptionFail)
	}
	if a := c.HTTP.Address; a != "" {
		if ap, err := netip.ParseAddrPort(a); err != nil {
			add("http.address", "%q is not host:port with an IP address: %v", a, err)
		} else if !ap.Addr().IsLoopback() {
			add("http.address", "%s is not a loopback address; /metrics and /healthz are served only on loopback", a)
		}
	}
	if a := c.HTTP.MetricsAddress; a != "" {
		if err := validListenAddress(a); err != nil {
			add("http.metricsAddress", "%v", err)
		} else if a == c.HTTP.Address && !strings.HasSuffix(a, ":0") {
			add("http.metricsAddress", "%s is http.address too; give the metrics listener its own port", a)
		}
	}
	if _, err := ParseLevel(c.Log.Level); err != nil {
		add("log.level", "%v", err)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		add("log.format", "%q is not text or json", c.Log.Format)
	}
	if c.Mode == "standalone" {
		errs = append(errs, c.validatePools()...)
		errs = append(errs, c.validateCloud()...)
	}
	errs = append(errs, c.validateAPI()...)
	errs = append(errs, c.validateCluster()...)
	errs = append(errs, c.validateCNI()...)
	errs = append(errs, c.validateDatapath()...)
	errs = append(errs, c.validatePolicy()...)
	return errors.Join(errs...)
}

type placedCIDR struct {
	prefix netip.Prefix
	field  string
	pool   string
}

func (c *Config) validatePools() []error {
	var errs problems
	if len(c.Pools) == 0 && len(c.Cloud.Pools) == 0 {
		errs.add("pools", "at least one pool (or cloud.pools entry) is required in standalone mode")
	}
	seen := map[string]int{}
	var all []placedCIDR
	for i, p := range c.Pools {
		f := fmt.Sprintf("pools[%d]", i)
		errs.uniquePoolName(f, p.Name, i, seen)
		if len(p.CIDRs) == 0 {
			errs.add(f+".cidrs", "at least one CIDR is required")
		}
		prefixes, placed := errs.poolCIDRs(f, p)
		all = append(all, placed...)
		errs.poolExcludes(f, p, prefixes)
		gw := errs.poolGateway(f, p, prefixes)
		errs.poolRoutes(f, p.Routes, prefixes)
		// The allocator has the final say on the pool's address space (e.g. an exclusion
		// covering every address); report its verdict under the pool's field.
		if len(errs.errs) == 0 && len(prefixes) > 0 {
			errs.poolSpace(f, c.Pools[i], prefixes, gw)
		}
	}
	for _, o := range overlaps(all) {
		errs.add(o[1].field, "%s of pool %q overlaps %s (%s of pool %q); pools must not overlap",
			o[1].prefix, o[1].pool, o[0].field, o[0].prefix, o[0].pool)
	}
	return errs.errs
}

// uniquePoolName checks pools[i].name and records it in seen (name -> index).
func (errs *problems) uniquePoolName(f, name string, i int, seen map[string]int) {
	if !poolName.MatchString(name) {
		errs.add(f+".name", "%q must be lower-case letters, digits, '-' or '.', starting and ending with a letter or digit", name)
	} else if j, dup := seen[name]; dup {
		errs.add(f+".name", "%q is already the name of pools[%d]", name, j)
	} else {
		seen[name] = i
	}
}

// poolCIDRs parses the pool's CIDRs, keeping those that are valid and of the first one's family.
func (errs *problems) poolCIDRs(f string, p Pool) ([]netip.Prefix, []placedCIDR) {
	var prefixes []netip.Prefix
	var placed []placedCIDR
	for j, s := range p.CIDRs {
		cf := fmt.Sprintf("%s.cidrs[%d]", f, j)
		pr, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			errs.add(cf, "%q is not a CIDR", s)
			continue
		}
		if pr.Masked() != pr {
			errs.add(cf, "%s has host bits set; did you mean %s?", s, pr.Masked())
			continue
		}
		if len(prefixes) > 0 && prefixes[0].Addr().Is4() != pr.Addr().Is4() {
			errs.add(cf, "%s is not of the same family as %s; a pool holds one family (make one pool per family)", s, prefixes[0])
			continue
		}
		prefixes = append(prefixes, pr)
		placed = append(placed, placedCIDR{prefix: pr, field: cf, pool: p.Name})
	}
	return prefixes, placed
}

// inPrefixes reports whether a lies in one of prefixes.
func inPrefixes(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, pr := range prefixes {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

func (errs *problems) poolExcludes(f string, p Pool, prefixes []netip.Prefix) {
	for j, s := range p.Exclude {
		ef := fmt.Sprintf("%s.exclude[%d]", f, j)
		r, err := allocator.ParseRange(s)
		if err != nil {
			errs.add(ef, "%v", err)
			continue
		}
		if len(prefixes) > 0 && (!inPrefixes(prefixes, r.From) || !inPrefixes(prefixes, r.To)) {
			errs.add(ef, "%s lies outside the pool's CIDRs %v", s, p.CIDRs)
		}
	}
}

// poolGateway returns the pool's gateway when it is valid (the zero Addr otherwise).
func (errs *problems) poolGateway(f string, p Pool, prefixes []netip.Prefix) netip.Addr {
	if p.Gateway == "" {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(p.Gateway)
	switch {
	case err != nil:
		errs.add(f+".gateway", "%q is not an IP address", p.Gateway)
	case len(prefixes) > 0 && !inPrefixes(prefixes, a):
		errs.add(f+".gateway", "%s lies outside the pool's CIDRs %v", a, p.CIDRs)
	default:
		return a
	}
	return netip.Addr{}
}

func (errs *problems) poolRoutes(f string, routes []Route, prefixes []netip.Prefix) {
	for j, r := range routes {
		rf := fmt.Sprintf("%s.routes[%d]", f, j)
		dst, err := netip.ParsePrefix(r.Dst)
		if err != nil {
			errs.add(rf+".dst", "%q is not a CIDR", r.Dst)
			continue
		}
		if len(prefixes) > 0 && dst.Addr().Is4() != prefixes[0].Addr().Is4() {
			errs.add(rf+".dst", "%s is not of the pool's family", r.Dst)
		}
		if r.GW != "" {
			g, err := netip.ParseAddr(r.GW)
			if err != nil {
				errs.add(rf+".gw", "%q is not an IP address", r.GW)
			} else if g.Is4() != dst.Addr().Is4() {
				errs.add(rf+".gw", "%s is not of the same family as dst %s", r.GW, r.Dst)
			}
		}
	}
}

// poolSpace asks the allocator whether the pool has an address to hand out.
func (errs *problems) poolSpace(f string, p Pool, prefixes []netip.Prefix, gw netip.Addr) {
	if a, err := allocator.New(p.allocatorConfig(prefixes, gw)); err != nil {
		errs.add(f, "%v", err)
	} else if a.Stats().Usable == 0 {
		errs.add(f, "pool %q has no address to hand out: exclusions, gateway, network and broadcast addresses cover it all", p.Name)
	}
}

// overlaps returns the CIDRs that overlap an earlier one (across and within pools: an
// address in two pools could be handed out twice), each as {earlier, later}, in address
// order. It sorts all.
func overlaps(all []placedCIDR) [][2]placedCIDR {
	var out [][2]placedCIDR
	sort.SliceStable(all, func(i, j int) bool { return comparePrefix(all[i].prefix, all[j].prefix) < 0 })
	for i := 1; i < len(all); i++ {
		for j := i - 1; j >= 0; j-- {
			if all[j].prefix.Overlaps(all[i].prefix) {
				out = append(out, [2]placedCIDR{all[j], all[i]})
				break
			}
			if all[j].prefix.Addr().BitLen() != all[i].prefix.Addr().BitLen() {
				break
			}
		}
	}
	return out
}

func (p Pool) allocatorConfig(prefixes []netip.Prefix, gw netip.Addr) allocator.Config {
	cfg := allocator.Config{Name: p.Name, CIDRs: prefixes, Gateway: gw}
	for _, s := range p.Exclude {
		if r, err := allocator.ParseRange(s); err == nil {
			cfg.Exclude = append(cfg.Exclude, r)
		}
	}
	return cfg
}

// AllocatorConfig converts a validated pool to the allocator's configuration.
func (p Pool) AllocatorConfig() (allocator.Config, error) {
	var prefixes []netip.Prefix
	for _, s := range p.CIDRs {
		pr, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return allocator.Config{}, fmt.Errorf("pool %q: cidrs: %w", p.Name, err)
		}
		prefixes = append(prefixes, pr)
	}
	var gw netip.Addr
	if p.Gateway != "" {
		a, err := netip.ParseAddr(p.Gateway)
		if err != nil {
			return allocator.Config{}, fmt.Errorf("pool %q: gateway: %w", p.Name, err)
		}
		gw = a
	}
	return p.allocatorConfig(prefixes, gw), nil
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// Modes are the roles allotd can run in.
var Modes = []string{"standalone", "agent", "operator"}

var pluginKinds = []string{"pool-policy", "cloud-backend", "datapath"}

func (c *Config) validatePolicy() []error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.Policy.Timeout <= 0 || c.Policy.Timeout > time.Minute {
		add("policy.timeout", "%s must be between 0 and 1m", c.Policy.Timeout)
	}
	names := map[string]bool{}
	for i, p := range c.Plugins {
		f := fmt.Sprintf("plugins[%d]", i)
		if !poolName.MatchString(p.Name) {
			add(f+".name", "%q must be lower-case letters, digits, '-' or '.'", p.Name)
		} else if names[p.Name] {
			add(f+".name", "%q is defined twice", p.Name)
		}
		names[p.Name] = true
		if !slices.Contains(pluginKinds, p.Kind) {
			add(f+".kind", "%q is not one of %v", p.Kind, pluginKinds)
		}
		switch p.Transport {
		case "process":
		case "wasm":
			if p.Kind != "pool-policy" {
				add(f+".transport", "wasm is only for pool-policy plugins, not %q", p.Kind)
			}
		default:
			add(f+".transport", "%q is not process or wasm", p.Transport)
		}
		if p.Path == "" {
			add(f+".path", "must not be empty")
		}
		if p.SHA256 != "" && !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(p.SHA256) {
			add(f+".sha256", "must be 64 lower-case hex digits")
		}
		if p.Timeout < 0 {
			add(f+".timeout", "must not be negative")
		}
	}
	checkChain := func(field string, ch Chain) {
		if len(ch.Policies) == 0 {
			add(field+".chain", "must name at least one policy")
		}
		for i, n := range ch.Policies {
			if n == "" {
				add(fmt.Sprintf("%s.chain[%d]", field, i), "must not be empty")
			}
		}
	}
	checkChain("policy.default", c.Policy.Default)
	nets := make([]string, 0, len(c.Policy.Networks))
	for n := range c.Policy.Networks {
		nets = append(nets, n)
	}
	sort.Strings(nets)
	for _, n := range nets {
		checkChain("policy.networks."+n, c.Policy.Networks[n])
	}
	return errs
}

// ParseLevel parses a log level name.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q is not debug, info, warn or error", s)
	}
	return l, nil
}

func sortStrings(s []string) { sort.Strings(s) }

// validListenAddress accepts host:port with an IP address or an empty host (every address)
// and a port number.
func validListenAddress(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", a, err)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: host %q is not an IP address", a, host)
		}
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", a, port)
	}
	return nil
}
