// Package datapathctl keeps the node's datapath in line with the configuration: it applies
// the datapath at start with the node's pod CIDRs, re-applies when the pod CIDRs change (an
// agent's blocks come and go), re-reads an ip-masq-agent file at its resync interval and
// re-applies on change (datapaths reload without dropping established flows), and at
// shutdown either removes everything (Stop, Remove) or leaves the rules in force for the
// next process to adopt (Close).
package datapathctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/allot-ipam/allot/core/masqconfig"
	"github.com/allot-ipam/allot/sdk/datapath"
)

// Options configure a Controller.
type Options struct {
	Datapath datapath.Datapath
	// Base is the configuration from allotd's config file, without pod CIDRs.
	Base     datapath.Config
	PodCIDRs []netip.Prefix
	// MasqAgentConfig, if set, is an ip-masq-agent file whose settings override Base's
	// non-masquerade list and link-local flags.
	MasqAgentConfig string
	Logger          *slog.Logger
}

// Controller applies and maintains one datapath.
type Controller struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	lastFile []byte
	resync   time.Duration
	applied  bool
}

// New returns a controller; Start applies the datapath.
func New(opts Options) *Controller {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.PodCIDRs = datapath.NormalizePrefixes(opts.PodCIDRs)
	return &Controller{opts: opts, log: opts.Logger, resync: masqconfig.DefaultResync}
}

// Started reports whether the datapath has been applied (and not removed since).
func (c *Controller) Started() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied
}

// PodCIDRs returns the pod CIDRs in force (or to apply at Start), normalized.
func (c *Controller) PodCIDRs() []netip.Prefix {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.opts.PodCIDRs)
}

// SetPodCIDRs makes cidrs the pod CIDRs. Before Start it only records them; afterwards it
// re-applies the datapath, but only when the set (normalized: masked, sorted, without
// prefixes another one covers) differs from the one in force. On error the previous set
// stays in force and recorded, so that a retry with the same set applies again. It reports
// whether it applied.
func (c *Controller) SetPodCIDRs(ctx context.Context, cidrs []netip.Prefix) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := datapath.NormalizePrefixes(cidrs)
	if slices.Equal(want, c.opts.PodCIDRs) {
		return false, nil
	}
	if !c.applied {
		c.opts.PodCIDRs = want
		return false, nil
	}
	prev := c.opts.PodCIDRs
	c.opts.PodCIDRs = want
	cfg, raw, err := c.desired()
	if err == nil {
		err = c.opts.Datapath.Apply(ctx, cfg)
	}
	if err != nil {
		c.opts.PodCIDRs = prev
		return false, fmt.Errorf("datapath: apply pod CIDRs %v: %w", want, err)
	}
	c.lastFile = raw
	c.log.Info("datapath re-applied with new pod CIDRs", "pod_cidrs", want, "before", prev)
	return true, nil
}

// Start applies the datapath once. An unreadable or invalid ip-masq-agent file is an error
// here (nothing applied yet, so there is nothing safe to fall back to).
func (c *Controller) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg, raw, err := c.desired()
	if err != nil {
		return err
	}
	if err := c.opts.Datapath.Apply(ctx, cfg); err != nil {
		return fmt.Errorf("datapath: apply: %w", err)
	}
	c.lastFile, c.applied = raw, true
	c.log.Info("datapath applied", "pod_cidrs", cfg.PodCIDRs, "non_masquerade", len(cfg.EffectiveNonMasquerade()))
	return nil
}

// Run re-reads the ip-masq-agent file every resync interval until ctx ends and re-applies
// when it changed. A bad file keeps the last good configuration in force and is logged.
func (c *Controller) Run(ctx context.Context) {
	if c.opts.MasqAgentConfig == "" {
		return
	}
	for {
		c.mu.Lock()
		wait := c.resync
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if err := c.Resync(ctx); err != nil {
			c.log.Error("datapath: keeping the last good configuration", "file", c.opts.MasqAgentConfig, "err", err)
		}
	}
}

// Resync re-reads the file and re-applies if it changed.
func (c *Controller) Resync(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.applied {
		return nil // Start reads the file
	}
	cfg, raw, err := c.desired()
	if err != nil {
		return err
	}
	if bytes.Equal(raw, c.lastFile) {
		return nil
	}
	if err := c.opts.Datapath.Apply(ctx, cfg); err != nil {
		return fmt.Errorf("datapath: re-apply: %w", err)
	}
	c.lastFile = raw
	c.log.Info("datapath re-applied after ip-masq-agent file change", "non_masquerade", len(cfg.EffectiveNonMasquerade()))
	return nil
}

// Stop removes every rule and program the datapath installed; it does nothing if the
// datapath was never applied (standalone mode's shutdown).
func (c *Controller) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.applied {
		return nil
	}
	if err := c.opts.Datapath.Remove(ctx); err != nil {
		return fmt.Errorf("datapath: remove: %w", err)
	}
	c.applied = false
	c.log.Info("datapath removed")
	return nil
}

// configRemover is implemented by datapaths whose leftovers of an earlier process can only be
// found with the configuration (the eBPF datapath's pin path), for Remove before any Apply.
type configRemover interface {
	RemoveWithConfig(ctx context.Context, cfg datapath.Config) error
}

// Remove removes every rule and program of the datapath, whether this process applied them
// or an earlier one left them (an agent uninstalled before it ever applied). Idempotent.
func (c *Controller) Remove(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if cr, ok := c.opts.Datapath.(configRemover); ok && !c.applied {
		err = cr.RemoveWithConfig(ctx, c.opts.Base)
	} else {
		err = c.opts.Datapath.Remove(ctx)
	}
	if err != nil {
		return fmt.Errorf("datapath: remove: %w", err)
	}
	c.applied = false
	c.log.Info("datapath removed")
	return nil
}

// Close leaves the datapath's rules and programs in force and releases what this process
// holds (the eBPF datapath's maps and collector, through its Close), so that the next
// process adopts them: an agent restarted by a rolling update keeps masquerading its pods'
// traffic meanwhile. Each built-in datapath replaces what an earlier process left on its
// first Apply (iptables: chains named by the hash of their rules, jumps by comment; eBPF:
// pinned links and flow table, tc filters by handle).
func (c *Controller) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.applied
	c.applied = false
	if cl, ok := c.opts.Datapath.(interface{ Close() error }); ok {
		if err := cl.Close(); err != nil {
			return fmt.Errorf("datapath: close: %w", err)
		}
	}
	if was {
		c.log.Info("datapath left in place for the next agent", "pod_cidrs", c.opts.PodCIDRs)
	}
	return nil
}

// Status reports the datapath's own status.
func (c *Controller) Status(ctx context.Context) (datapath.Status, error) {
	return c.opts.Datapath.Status(ctx)
}

// desired builds the configuration to apply; called with c.mu held.
func (c *Controller) desired() (datapath.Config, []byte, error) {
	cfg := c.opts.Base
	cfg.PodCIDRs = slices.Clone(c.opts.PodCIDRs)
	var raw []byte
	if path := c.opts.MasqAgentConfig; path != "" {
		b, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// As ip-masq-agent: no file means its defaults (an optional ConfigMap that
			// does not exist yet); the file is picked up when it appears.
			b = nil
		case err != nil:
			return cfg, nil, fmt.Errorf("datapath.masqAgentConfig: %w", err)
		}
		mc, err := masqconfig.Parse(b)
		if err != nil {
			return cfg, nil, fmt.Errorf("datapath.masqAgentConfig %s: %w", path, err)
		}
		cfg.NonMasqueradeCIDRs = mc.NonMasqueradeCIDRs
		cfg.NonMasqueradeExplicit = mc.NonMasqueradeSet
		cfg.MasqLinkLocal = mc.MasqLinkLocal
		cfg.MasqLinkLocalIPv6 = mc.MasqLinkLocalIPv6
		c.resync = mc.ResyncInterval
		raw = b
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, fmt.Errorf("datapath: %w", err)
	}
	return cfg, raw, nil
}
