package eni

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"
)

// ClusterTag is the tag every interface the engine creates carries when Config.ClusterName
// is set, and by which the garbage collection finds the cluster's leaked interfaces.
const ClusterTag = "allot.io/cluster-name"

// InterfaceCollector is what a backend offers for the garbage collection of leaked
// interfaces; optional (a backend without it, or a process plugin, has none).
type InterfaceCollector interface {
	// DetachedInterfaces lists the interfaces attached to nothing (AWS: status available)
	// that carry every one of tags.
	DetachedInterfaces(ctx context.Context, tags map[string]string) ([]string, error)
	// DeleteInterface deletes a detached interface; one already gone is not an error.
	DeleteInterface(ctx context.Context, id string) error
}

// GC deletes interfaces that leaked: created for a node but never attached, or left behind
// detached (an operator killed between create and attach, an instance gone without
// delete-on-termination). It follows Cilium's ENI garbage collection (--eni-gc-interval,
// --eni-gc-tags; docs.cilium.io .../ipam/eni/, "ENI Garbage Collection"): only detached
// interfaces carrying the cluster's tags, and only once they stayed detached from one run to
// the next, so an interface created an instant before a run and attached right after it is
// never deleted.
type GC struct {
	Collector InterfaceCollector
	// Tags an interface must carry all of (at least the cluster's, ClusterTag).
	Tags map[string]string
	// Interval between runs (Cilium's default 5 m).
	Interval time.Duration
	Log      *slog.Logger

	marked map[string]bool
}

// DefaultGCInterval is Cilium's --eni-gc-interval default.
const DefaultGCInterval = 5 * time.Minute

// GCResult is what one run did.
type GCResult struct {
	Marked  []string // detached, seen for the first time: deleted next run if still detached
	Deleted []string
}

// RunOnce lists the detached interfaces carrying the tags, deletes those already seen
// detached by the previous run and marks the others.
func (g *GC) RunOnce(ctx context.Context) (GCResult, error) {
	var res GCResult
	if len(g.Tags) == 0 {
		return res, errors.New("eni: gc: no tags: every detached interface of the account would be a candidate")
	}
	ids, err := g.Collector.DetachedInterfaces(ctx, g.Tags)
	if err != nil {
		return res, fmt.Errorf("eni: gc: list detached interfaces: %w", err)
	}
	next := map[string]bool{}
	var errs []error
	for _, id := range ids {
		if !g.marked[id] {
			next[id] = true
			res.Marked = append(res.Marked, id)
			continue
		}
		if err := g.Collector.DeleteInterface(ctx, id); err != nil {
			next[id] = true // try again next run
			errs = append(errs, fmt.Errorf("eni: gc: delete %s: %w", id, err))
			continue
		}
		res.Deleted = append(res.Deleted, id)
		if g.Log != nil {
			g.Log.Info("eni: deleted a leaked interface (detached, with the cluster's tags, for a whole gc interval)", "interface", id)
		}
	}
	g.marked = next
	slices.Sort(res.Marked)
	slices.Sort(res.Deleted)
	return res, errors.Join(errs...)
}

// Run runs RunOnce every Interval until ctx ends.
func (g *GC) Run(ctx context.Context) {
	iv := g.Interval
	if iv <= 0 {
		iv = DefaultGCInterval
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		if _, err := g.RunOnce(ctx); err != nil && ctx.Err() == nil && g.Log != nil {
			g.Log.Warn("eni: garbage collection of leaked interfaces", "err", err, "tags", slices.Sorted(maps.Keys(g.Tags)))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
