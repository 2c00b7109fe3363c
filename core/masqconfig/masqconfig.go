// Package masqconfig reads ip-masq-agent's configuration file, so that a node already
// managed with ip-masq-agent keeps its file when it moves to allot.
//
// The file is YAML or JSON:
//
//	nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]
//	cidrLimit: 64
//	masqLinkLocal: false
//	masqLinkLocalIPv6: false
//	resyncInterval: 60s
//
// As in ip-masq-agent (kubernetes-sigs/ip-masq-agent), an absent nonMasqueradeCIDRs means
// the default reserved ranges, an explicitly empty one ("nonMasqueradeCIDRs: []") means no
// exceptions but link-local, link-local destinations are exempt unless masqLinkLocal(IPv6)
// is set, and a list longer than cidrLimit (64 by default) is refused. Unknown keys are
// errors, where ip-masq-agent ignores them: a misspelt key would otherwise silently
// masquerade traffic that should not be.
package masqconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"
)

// DefaultResync is ip-masq-agent's default resyncInterval.
const DefaultResync = 60 * time.Second

// DefaultCIDRLimit is ip-masq-agent's default cidrLimit.
const DefaultCIDRLimit = 64

// Config is the file's content.
type Config struct {
	NonMasqueradeCIDRs []netip.Prefix
	// NonMasqueradeSet: the file has the key, so an empty list is explicit (no defaults).
	NonMasqueradeSet  bool
	CIDRLimit         int
	MasqLinkLocal     bool
	MasqLinkLocalIPv6 bool
	ResyncInterval    time.Duration
}

type file struct {
	NonMasqueradeCIDRs []string
	CIDRLimit          int
	MasqLinkLocal      bool
	MasqLinkLocalIPv6  bool
	ResyncInterval     string
}

// Parse reads the file's bytes. Errors name the field.
func Parse(b []byte) (Config, error) {
	var doc map[string]yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("ip-masq-agent config: %w", err)
	}
	f, err := decodeFields(doc)
	if err != nil {
		return Config{}, err
	}
	c := Config{MasqLinkLocal: f.MasqLinkLocal, MasqLinkLocalIPv6: f.MasqLinkLocalIPv6, ResyncInterval: DefaultResync, CIDRLimit: DefaultCIDRLimit}
	if n, ok := doc["nonMasqueradeCIDRs"]; ok && !(n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		c.NonMasqueradeSet = true
	}
	if _, ok := doc["cidrLimit"]; ok {
		if f.CIDRLimit < 1 {
			return Config{}, fmt.Errorf("ip-masq-agent config: cidrLimit: %d must be at least 1", f.CIDRLimit)
		}
		c.CIDRLimit = f.CIDRLimit
	}
	if c.NonMasqueradeCIDRs, err = parseCIDRs(f.NonMasqueradeCIDRs, c.CIDRLimit); err != nil {
		return Config{}, err
	}
	if f.ResyncInterval != "" {
		d, err := time.ParseDuration(f.ResyncInterval)
		if err != nil || d < time.Second || d > 24*time.Hour {
			return Config{}, fmt.Errorf("ip-masq-agent config: resyncInterval: %q must be a duration between 1s and 24h", f.ResyncInterval)
		}
		c.ResyncInterval = d
	}
	return c, nil
}

// decodeFields decodes the document key by key, in key order, so that a type error names
// its key.
func decodeFields(doc map[string]yaml.Node) (file, error) {
	var f file
	fields := map[string]any{
		"nonMasqueradeCIDRs": &f.NonMasqueradeCIDRs,
		"cidrLimit":          &f.CIDRLimit,
		"masqLinkLocal":      &f.MasqLinkLocal,
		"masqLinkLocalIPv6":  &f.MasqLinkLocalIPv6,
		"resyncInterval":     &f.ResyncInterval,
	}
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		dst, ok := fields[k]
		if !ok {
			return file{}, fmt.Errorf("ip-masq-agent config: %s: unknown field (known: cidrLimit, masqLinkLocal, masqLinkLocalIPv6, nonMasqueradeCIDRs, resyncInterval)", k)
		}
		node := doc[k]
		if err := node.Decode(dst); err != nil {
			return file{}, fmt.Errorf("ip-masq-agent config: %s: %w", k, err)
		}
	}
	return f, nil
}

// parseCIDRs parses nonMasqueradeCIDRs: at most limit masked CIDRs.
func parseCIDRs(cidrs []string, limit int) ([]netip.Prefix, error) {
	if len(cidrs) > limit {
		return nil, fmt.Errorf("ip-masq-agent config: nonMasqueradeCIDRs: %d CIDRs is more than cidrLimit %d (link-local not counted)", len(cidrs), limit)
	}
	var out []netip.Prefix
	for i, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("ip-masq-agent config: nonMasqueradeCIDRs[%d]: %q is not a CIDR", i, s)
		}
		if p.Masked() != p {
			return nil, fmt.Errorf("ip-masq-agent config: nonMasqueradeCIDRs[%d]: %s has host bits set (did you mean %s?)", i, s, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}
