package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/store"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Serving from the node store while the API server is unreachable.
//
// The agent keeps the node's blocks as it last read them from the API server in the node
// store (store.NodeState), beside the allocations, each time they change. An agent that
// starts while the API server is down (a node reboot during a control-plane outage, an
// agent upgrade while the API server restarts) puts those blocks back into its pools before
// it serves (Restore), so CNI ADD is answered from them and DEL from the records at once;
// informers and writes keep retrying in the background (client-go's reflector backoff, the
// sync loop's backoff). The restored blocks are served only while the API server does not
// answer (serveLocalWhileUnreachable): when it answers, ADDs wait for the first sync, as
// without a node store, so that a block taken away while the agent was stopped is never
// handed out. The daemon reports ready then, and says it serves from local state
// (core/daemon, /readyz).
//
// The blocks of the node store are the node's as far as the agent knows; the operator may
// have taken one away meanwhile (the AllotNode deleted with its Node, a person editing
// spec.ipam.pools.allocated, the node's pod CIDRs changed). When the API server answers
// again, the first sync makes the pools exactly the node's blocks (syncBlocks): a restored
// block the node no longer has is removed if nothing of it is held, and otherwise dropped
// while in use (ipam.Manager.DropCIDR): nothing more is handed out from it, its holders keep
// their addresses until their DEL, and each such address is logged as an error with its
// owner and counted in allot_agent_orphaned_addresses. That is what Cilium's agent does with
// an in-use CIDR removed from its CiliumNode (pkg/ipam/pool.go, cidrPool.updatePool: "in-use
// CIDR was removed from spec", kept, no new allocation from it). The window in which an
// address of a block taken away can be handed out is the outage itself: the agent cannot
// learn of the change before the API server answers, and refusing every ADD during an outage
// would stop pods on a node whose blocks did not change, the common case.

// Source values of store.NodeState: where the blocks come from in each mode.
const (
	sourceAllotNode = "allotnode" // AllotNode spec.ipam.pools.allocated (multi-pool)
	sourcePodCIDRs  = "podcidrs"  // Node.spec.podCIDRs (ClusterCIDRConfig / kubernetes mode)
	sourceENI       = "eni"       // AllotNode spec.ipam.pool and status.eni (ENI mode)
)

func (a *Agent) source() string {
	switch {
	case a.opts.ENI != nil:
		return sourceENI
	case a.opts.PodCIDRs != nil:
		return sourcePodCIDRs
	}
	return sourceAllotNode
}

// Restore puts the blocks of the node store into m's pools, before the daemon serves. It
// returns whether it did: then, as soon as the API server is found unreachable, the manager's
// pools count as known (NodeRead is closed) and ADDs are answered from them until the first
// sync with the API server reconciles (Run). In ENI mode the blocks are the addresses the
// agent served (never one it answered ready-for-release, see syncENI), each with its
// subnet's prefix length and router. Without a store or with no saved state of this node in
// this mode, it does nothing and ADDs wait for the API server.
func (a *Agent) Restore(ctx context.Context, m *ipam.Manager) (bool, error) {
	if a.opts.Store == nil {
		return false, nil
	}
	st, ok, err := a.opts.Store.NodeState(ctx)
	if err != nil {
		// A node state that does not decode is not trusted: the agent waits for the API
		// server, as without one. The records are untouched.
		a.log.Error("node store: the saved blocks cannot be read; waiting for the API server for them", "err", err)
		return false, nil
	}
	if !ok {
		return false, nil
	}
	if st.Node != a.opts.NodeName || st.Source != a.source() {
		a.log.Warn("node store: the saved blocks are of another node or mode; waiting for the API server for them",
			"saved_node", st.Node, "saved_source", st.Source, "node", a.opts.NodeName, "source", a.source())
		return false, nil
	}
	var added []string
	for _, b := range st.Blocks {
		var err error
		if b.Bits > 0 || b.Gateway.IsValid() {
			err = m.AddCIDRWith(b.Pool, b.CIDR, ipam.Addressing{Bits: b.Bits, Gateway: b.Gateway})
		} else {
			err = m.AddCIDR(b.Pool, b.CIDR)
		}
		if err != nil {
			return false, fmt.Errorf("agent: restore block %s of pool %q from the node store: %w", b.CIDR, b.Pool, err)
		}
		added = append(added, b.Pool+":"+b.CIDR.String())
	}
	a.mu.Lock()
	a.saved = st.Blocks
	a.mu.Unlock()
	a.restored.Store(true)
	a.log.Info("blocks restored from the node store; served if the API server does not answer", "blocks", strings.Join(added, " "), "read_at", st.Saved)
	return true, nil
}

// ServingLocal reports whether the agent serves from blocks restored from the node store
// (the API server did not answer) and has not reconciled them with the API server yet.
func (a *Agent) ServingLocal() bool { return a.local.Load() && !a.reconciled.Load() }

// serveLocalWhileUnreachable runs until the first sync: each probe that finds the API server
// unreachable (no answer at all, as opposed to any answer, errors included) lets ADDs be
// served from the restored blocks. While the API server answers, the first sync decides,
// which is the only way to learn of a block taken away while the agent was stopped.
func (a *Agent) serveLocalWhileUnreachable(ctx context.Context) {
	if !a.restored.Load() {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for !a.reconciled.Load() {
		if err := a.probe(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			a.metrics.localState.Set(1)
			a.local.Store(true)
			a.markNodeRead()
			a.log.Warn("API server unreachable: serving from the blocks of the node store until it answers", "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe reads the node's AllotNode (Node in kubernetes mode) from the API server: nil when the
// API server answered, whatever the answer.
func (a *Agent) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var obj client.Object = &v1alpha1.AllotNode{}
	if a.opts.PodCIDRs != nil {
		obj = &corev1.Node{}
	}
	err := a.live.Get(ctx, types.NamespacedName{Name: a.opts.NodeName}, obj)
	var st apierrors.APIStatus
	if err == nil || errors.As(err, &st) {
		return nil
	}
	return err
}

// blocksOf are the blocks m holds, in order.
func blocksOf(m *ipam.Manager) []store.Block {
	var out []store.Block
	for _, u := range m.Usage() {
		for _, c := range u.CIDRs {
			out = append(out, store.Block{Pool: u.Name, CIDR: c.Prefix})
		}
	}
	slices.SortFunc(out, func(x, y store.Block) int {
		if x.Pool != y.Pool {
			return strings.Compare(x.Pool, y.Pool)
		}
		return x.CIDR.Addr().Compare(y.CIDR.Addr())
	})
	return out
}

// saveBlocks writes the blocks m holds to the node store when they changed since the last
// write, after a sync read them from the API server.
func (a *Agent) saveBlocks(ctx context.Context, m *ipam.Manager) error {
	if a.opts.Store == nil {
		return nil
	}
	return a.saveState(ctx, blocksOf(m))
}

// saveState writes the blocks now to the node store when they changed since the last write.
func (a *Agent) saveState(ctx context.Context, now []store.Block) error {
	a.mu.Lock()
	same := a.savedOnce && slices.Equal(now, a.saved)
	a.mu.Unlock()
	if same {
		return nil
	}
	st := store.NodeState{Node: a.opts.NodeName, Source: a.source(), Blocks: now, Saved: a.opts.Now()}
	if err := a.opts.Store.PutNodeState(context.WithoutCancel(ctx), st); err != nil {
		return fmt.Errorf("agent: save the node's blocks: %w", err)
	}
	a.mu.Lock()
	a.saved, a.savedOnce = now, true
	a.mu.Unlock()
	return nil
}

// reconciled marks the end of serving from local state: the pools are the node's blocks as
// the API server has them. It reports the addresses held outside every block, once each.
func (a *Agent) reconcileDone(m *ipam.Manager) {
	orphans := m.Orphans()
	a.metrics.orphans.Set(float64(len(orphans)))
	for _, o := range orphans {
		a.reportOnce("orphan "+o.Addr.String()+" "+o.Owner.String(),
			"address held outside the node's blocks (its block is no longer the node's): kept until its owner's DEL, nothing more is handed out from that block",
			"addr", o.Addr, "owner", o.Owner.String())
	}
	if !a.reconciled.Swap(true) && a.local.Load() {
		a.metrics.localState.Set(0)
		a.log.Info("reconciled with the API server; no longer serving from the node store alone", "orphaned_addresses", len(orphans))
	}
}

// podCIDRBlocks parses a Node's pod CIDRs (spec.podCIDRs, else spec.podCIDR) into blocks of
// pool; entries that are not CIDRs are returned apart.
func podCIDRBlocks(pool string, podCIDRs []string, podCIDR string) (out []blockKey, bad []string) {
	src := podCIDRs
	if len(src) == 0 && podCIDR != "" {
		src = []string{podCIDR}
	}
	for _, s := range src {
		p, err := netip.ParsePrefix(s)
		if err != nil || p != p.Masked() {
			bad = append(bad, s)
			continue
		}
		out = append(out, blockKey{pool, p})
	}
	return out, bad
}
