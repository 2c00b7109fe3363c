package config

import (
	"fmt"
	"net/netip"
	"slices"
)

// Cloud configures pools whose addresses a cloud backend assigns to this node (standalone
// mode). The backend is a cloud-backend plugin named in Plugins.
type Cloud struct {
	// Node identifies this machine to the backend.
	Node CloudNode `koanf:"node"`
	// Pools are topped up from the backend at start.
	Pools []CloudPool `koanf:"pools"`
	// Backends configures built-in cloud backends by name, e.g.
	// {"aws-eni": {"region": "eu-west-1"}}.
	Backends map[string]map[string]any `koanf:"backends"`
}

// CloudNode is what a backend needs to find the node.
type CloudNode struct {
	// Name defaults to the host name.
	Name         string `koanf:"name"`
	ProviderID   string `koanf:"providerID"`
	InstanceType string `koanf:"instanceType"`
	Zone         string `koanf:"zone"`
}

// CloudPool is one pool filled by a cloud backend.
type CloudPool struct {
	Name string `koanf:"name"`
	// Backend names a cloud-backend plugin from plugins, or a built-in backend (aws-eni).
	Backend string `koanf:"backend"`
	// Family is ipv4 or ipv6.
	Family string `koanf:"family"`
	// Addresses is how many addresses the node should hold in this pool; allotd asks the
	// backend for the difference at start. Addresses the node already holds are kept.
	Addresses int `koanf:"addresses"`
	// Interface is the backend's interface ID to put new addresses on; empty means the node's
	// first interface.
	Interface string  `koanf:"interface"`
	Gateway   string  `koanf:"gateway"`
	Routes    []Route `koanf:"routes"`
	Default   bool    `koanf:"default"`
}

func (c *Config) validateCloud() []error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	taken := map[string]string{}
	for i, p := range c.Pools {
		taken[p.Name] = fmt.Sprintf("pools[%d]", i)
	}
	for i, p := range c.Cloud.Pools {
		f := fmt.Sprintf("cloud.pools[%d]", i)
		if !poolName.MatchString(p.Name) {
			add(f+".name", "%q must be lower-case letters, digits, '-' or '.'", p.Name)
		} else if prev, dup := taken[p.Name]; dup {
			add(f+".name", "%q is already the name of %s", p.Name, prev)
		} else {
			taken[p.Name] = f
		}
		if p.Backend == "" {
			add(f+".backend", "must name a cloud-backend plugin or a built-in backend")
		} else if i := slices.IndexFunc(c.Plugins, func(pl Plugin) bool { return pl.Name == p.Backend }); i >= 0 && c.Plugins[i].Kind != "cloud-backend" {
			add(f+".backend", "plugin %q is a %s, not a cloud-backend", p.Backend, c.Plugins[i].Kind)
		}
		if p.Family != "ipv4" && p.Family != "ipv6" {
			add(f+".family", "%q is not ipv4 or ipv6", p.Family)
		}
		if p.Addresses < 1 || p.Addresses > 1<<16 {
			add(f+".addresses", "%d must be between 1 and 65536", p.Addresses)
		}
		if p.Gateway != "" {
			if g, err := netip.ParseAddr(p.Gateway); err != nil {
				add(f+".gateway", "%q is not an IP address", p.Gateway)
			} else if g.Is4() != (p.Family == "ipv4") {
				add(f+".gateway", "%s is not of family %s", g, p.Family)
			}
		}
		for j, r := range p.Routes {
			if _, err := netip.ParsePrefix(r.Dst); err != nil {
				add(fmt.Sprintf("%s.routes[%d].dst", f, j), "%q is not a CIDR", r.Dst)
			}
		}
	}
	return errs
}
