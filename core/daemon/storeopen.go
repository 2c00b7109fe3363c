package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/core/store"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An unusable store file (damaged, truncated, foreign) stops a standalone daemon: its
// records are the only account of which addresses are held, and starting without them
// could hand an address out twice. An agent has a second account, the API server: its
// node's blocks come from its AllotNode, and its node's pods show their addresses in
// status.podIPs. With store.onCorruption rebuild (the agents' default) it therefore:
//
//  1. lists its node's pods from the API server, before touching anything: if the API
//     server cannot be asked, it stops as a standalone daemon would, the file untouched,
//     and the next start tries again;
//  2. renames the file to allot.db.corrupt-<timestamp> (kept for diagnosis; never
//     deleted) and logs it at Error level with both paths;
//  3. salvages into a new file at the store's path every record still readable in the
//     damaged one (store.Salvage), logging each loss;
//  4. adds, for each running pod with an address no salvaged record holds, a record
//     holding it (owner "rebuilt-<pod UID>", no network), so that no address a running
//     pod uses is handed out again. Such a record goes when its pod does, through the
//     agent's reclaim of pods that are gone (its pod UID is set); the runtime's DEL of
//     the pod's real sandbox finds no record of its own and succeeds;
//  5. opens the new store and starts as usual: the agent then reads its blocks from the
//     AllotNode and the addresses above are marked taken when their blocks arrive.

// podLister lists what the node's pods hold, as records (agent mode).
type podLister func(ctx context.Context) ([]store.Record, error)

// rebuiltPool is the pool name of records made from a pod's status: the pod's real pool
// is not known from it (the manager finds the block holding the address regardless).
const rebuiltPool = "rebuilt"

// podListTimeout bounds the API server's answer while rebuilding.
const podListTimeout = 30 * time.Second

// openStore opens the store, rebuilding it as above when it is unusable and the
// configuration says so.
// storeGroupDelay is the store's MaxGroupDelay (0: its default). Only benchmarks change
// it: BenchmarkAPIAllocate's durable-nowait mode commits as soon as the previous
// fdatasync returns, to compare with the default wait for the callers just answered.
var storeGroupDelay time.Duration

func (d *Daemon) openStore(ctx context.Context) (*store.Store, error) {
	path := d.cfg.Store.Path
	opts := store.Options{NoSync: d.cfg.Store.NoSync, MaxGroupDelay: storeGroupDelay, Logger: d.log.With("component", "store")}
	rebuild := d.cfg.StoreOnCorruption() == config.OnCorruptionRebuild
	s, err := store.Open(ctx, path, opts)
	if err == nil && rebuild {
		// A record that does not decode stops the manager's List later; found now,
		// the file can still be rebuilt.
		if cerr := s.Check(ctx); cerr != nil {
			_ = s.Close()
			s, err = nil, &store.UnusableError{Path: path, Problem: cerr.Error(), Err: cerr}
		}
	}
	if err == nil {
		return s, nil
	}
	if !rebuild || !errors.Is(err, store.ErrUnusable) {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return d.rebuildStore(ctx, err, opts)
}

func (d *Daemon) rebuildStore(ctx context.Context, cause error, opts store.Options) (*store.Store, error) {
	path := d.cfg.Store.Path
	if d.listPods == nil {
		return nil, fmt.Errorf("open store: cannot rebuild without the API server: %w", cause)
	}
	lctx, cancel := context.WithTimeout(ctx, podListTimeout)
	pods, err := d.listPods(lctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("open store: not rebuilt, the file is left as it is: listing this node's pods from the API server: %v: %w", err, cause)
	}
	aside, err := store.MoveAside(path, time.Now())
	if err != nil {
		return nil, fmt.Errorf("open store: %v: %w", err, cause)
	}
	d.log.Error("store file unusable: moved aside, rebuilding from what it still holds and from the API server",
		"path", path, "moved_to", aside, "err", cause)

	recs, rep := d.salvage(ctx, aside, path)
	s, err := store.Open(ctx, path, opts)
	if err != nil {
		return nil, fmt.Errorf("open store: rebuilt store: %w", err)
	}
	added := podsToHold(recs, pods)
	for _, p := range added {
		if err := s.Put(ctx, p); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("open store: rebuilt store: holding the address of pod %s/%s: %w", p.Pod.Namespace, p.Pod.Name, err)
		}
	}
	salvaged := 0
	if rep != nil {
		salvaged = len(rep.Records) + len(rep.Recovered)
	}
	d.log.Error("store rebuilt; allocations of this node's pods are held again",
		"path", path, "moved_to", aside, "salvaged", salvaged, "held_from_pods", len(added), "lost", lossCount(rep))
	return s, nil
}

// salvage copies what the file moved aside still holds to path and returns those records,
// none when the copy failed, with Salvage's report (which may be nil).
func (d *Daemon) salvage(ctx context.Context, aside, path string) ([]store.Record, *store.Report) {
	rep, err := store.Salvage(ctx, aside, path, store.InspectOptions{})
	if err != nil {
		// Nothing could be read (the copy failed): the pods' addresses are then all
		// there is, which is still every address in use on this node.
		d.log.Error("store rebuild: salvage failed; starting from the API server alone", "path", path, "moved_to", aside, "err", err)
		return nil, rep
	}
	var recs []store.Record
	recs = append(append(recs, rep.Records...), rep.Recovered...)
	for _, l := range rep.Lost {
		d.log.Error("store rebuild: could not read", "path", aside, "lost", l.String())
	}
	return recs, rep
}

// podsToHold returns the allocations of pods to add to the salvaged records recs: each pod
// with only its addresses that no record (nor an earlier pod) holds; pods left with none
// are dropped.
func podsToHold(recs, pods []store.Record) []store.Record {
	held := map[netip.Addr]bool{}
	for _, r := range recs {
		for _, a := range r.Addresses {
			held[a.Prefix.Addr()] = true
		}
	}
	var out []store.Record
	for _, p := range pods {
		var keep []store.Address
		for _, a := range p.Addresses {
			if !held[a.Prefix.Addr()] {
				held[a.Prefix.Addr()] = true
				keep = append(keep, a)
			}
		}
		if len(keep) == 0 {
			continue
		}
		p.Addresses = keep
		out = append(out, p)
	}
	return out
}

func lossCount(rep *store.Report) int {
	if rep == nil {
		return 0
	}
	return len(rep.Lost)
}

// podRecords turns the node's pods into records holding their addresses: running pods
// with their own network namespace (host-network pods hold the node's address, not one
// of ours), and not terminated ones (their sandbox is gone or going, with its address).
func podRecords(pods []corev1.Pod, now time.Time) []store.Record {
	var out []store.Record
	for _, p := range pods {
		if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.UID == "" {
			continue
		}
		r := store.Record{
			Owner:   store.Owner{ContainerID: "rebuilt-" + string(p.UID), IfName: "eth0"},
			Pod:     store.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)},
			Created: now,
		}
		for _, ip := range p.Status.PodIPs {
			a, err := netip.ParseAddr(ip.IP)
			if err != nil {
				continue
			}
			r.Addresses = append(r.Addresses, store.Address{Pool: rebuiltPool, Prefix: netip.PrefixFrom(a, a.BitLen())})
		}
		if len(r.Addresses) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// apiPodLister lists the node's pods from the API server itself (no cache: this runs
// once, before anything else is started).
func apiPodLister(cfg *rest.Config, node string) (podLister, error) {
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("store rebuild: API client: %w", err)
	}
	return func(ctx context.Context) ([]store.Record, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
			return nil, err
		}
		return podRecords(pods.Items, time.Now()), nil
	}, nil
}
