// Package datapathctl keeps the node's datapath in line with the configuration: it applies
// the datapath at start with the node's pod CIDRs, re-reads an ip-masq-agent file at its
// resync interval and re-applies on change (datapaths reload without dropping established
// flows), and removes everything at shutdown.
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
	return &Controller{opts: opts, log: opts.Logger, resync: masqconfig.DefaultResync}
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

// Stop removes every rule and program the datapath installed.
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
