// Package none is the datapath that programs nothing: pod traffic leaves
// the node with the pod's address (routed, no masquerade). Use it when the
// pod CIDRs are routable, or when something else (the CNI, Cilium, a
// cloud NAT) masquerades. Its Status says honestly that nothing is done.
package none

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/allot-ipam/allot/sdk/datapath"
)

// Name is the datapath's name in configuration.
const Name = "none"

// Datapath is the no-op datapath.
type Datapath struct {
	log     *slog.Logger
	mu      sync.Mutex
	applied bool
	pods    int
}

var _ datapath.Datapath = (*Datapath)(nil)

// New returns the no-op datapath. A nil logger discards.
func New(logger *slog.Logger) *Datapath {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Datapath{log: logger.With("datapath", Name)}
}

// Apply validates cfg and records that it was asked for; nothing is
// programmed.
func (d *Datapath) Apply(ctx context.Context, cfg datapath.Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("none: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applied = true
	d.pods = len(cfg.PodCIDRs)
	d.log.InfoContext(ctx, "datapath none: pod traffic is not masqueraded", "pod_cidrs", len(cfg.PodCIDRs))
	return nil
}

// Remove forgets the applied config.
func (d *Datapath) Remove(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applied = false
	return nil
}

// Status reports Active=false: this datapath never has anything in place.
func (d *Datapath) Status(ctx context.Context) (datapath.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	applied := "false"
	if d.applied {
		applied = "true"
	}
	return datapath.Status{
		Name:   Name,
		Active: false,
		Detail: map[string]string{
			"masquerade": "off: pod traffic leaves with the pod's address",
			"applied":    applied,
			"pod_cidrs":  fmt.Sprint(d.pods),
		},
	}, nil
}
