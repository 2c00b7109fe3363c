package noderoutes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options configure a Controller.
type Options struct {
	RESTConfig *rest.Config
	// NodeName is this node; its own blocks get no route.
	NodeName   string
	Reconciler *Reconciler
	// Debounce gathers bursts of events into one sync (default 200 ms); Resync re-applies
	// the plan even without events (default 5 min), healing routes removed by hand.
	Debounce, Resync time.Duration
	Log              *slog.Logger
}

// Controller watches every Node (its InternalIP) and AllotNode (its blocks) and keeps this
// node's routes to the other nodes' blocks current. Watches only: one list and watch per
// kind, no polling. ClusterCIDRConfig nodes' blocks are their Node.spec.podCIDRs.
type Controller struct {
	opts  Options
	log   *slog.Logger
	cache cache.Cache
	kick  chan struct{}
}

// NewController prepares the watches; Run starts them.
func NewController(opts Options) (*Controller, error) {
	if opts.Reconciler == nil || opts.RESTConfig == nil || opts.NodeName == "" {
		return nil, errors.New("noderoutes: RESTConfig, NodeName and Reconciler are required")
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 200 * time.Millisecond
	}
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	// Static mappings: the cache is built while the API server may be down (k8s.RESTMapper).
	mapper, err := allotk8s.RESTMapper(opts.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("noderoutes: %w", err)
	}
	c, err := cache.New(rest.CopyConfig(opts.RESTConfig), cache.Options{
		Scheme: allotk8s.Scheme(),
		Mapper: mapper,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}:        {Transform: trimNode},
			&v1alpha1.AllotNode{}: {Transform: trimAllotNode},
		},
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return nil, fmt.Errorf("noderoutes: cache: %w", err)
	}
	return &Controller{opts: opts, log: opts.Log, cache: c, kick: make(chan struct{}, 1)}, nil
}

// trimNode keeps only what routes need, so a large cluster's Nodes cost little memory on
// every node.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{}
	out.Name, out.ResourceVersion = n.Name, n.ResourceVersion
	out.Spec.PodCIDRs = n.Spec.PodCIDRs
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.Status.Addresses = append(out.Status.Addresses, a)
		}
	}
	return out, nil
}

func trimAllotNode(obj any) (any, error) {
	n, ok := obj.(*v1alpha1.AllotNode)
	if !ok {
		return obj, nil
	}
	out := &v1alpha1.AllotNode{}
	out.Name, out.ResourceVersion = n.Name, n.ResourceVersion
	out.Spec.IPAM.Pools.Allocated = n.Spec.IPAM.Pools.Allocated
	return out, nil
}

// Run syncs routes until ctx ends; it does not remove them then (a restarting agent keeps
// pod-to-pod traffic flowing): call Reconciler.RemoveAll to uninstall.
func (c *Controller) Run(ctx context.Context) error {
	for _, obj := range []client.Object{&corev1.Node{}, &v1alpha1.AllotNode{}} {
		inf, err := c.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("noderoutes: informer for %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.trigger() },
			UpdateFunc: func(any, any) { c.trigger() },
			DeleteFunc: func(any) { c.trigger() },
		}); err != nil {
			return fmt.Errorf("noderoutes: event handler: %w", err)
		}
	}
	go func() { _ = c.cache.Start(ctx) }()
	if !c.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("noderoutes: caches did not sync: %w", ctx.Err())
	}
	resync := time.NewTicker(c.opts.Resync)
	defer resync.Stop()
	c.trigger()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C:
		case <-c.kick:
			select { // gather a burst
			case <-ctx.Done():
				return nil
			case <-time.After(c.opts.Debounce):
			}
		}
		if err := c.SyncOnce(ctx); err != nil {
			c.log.Error("node routes: sync failed; retrying at the next change or resync", "err", err)
		}
	}
}

func (c *Controller) trigger() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// SyncOnce computes the plan from the cache and applies it.
func (c *Controller) SyncOnce(ctx context.Context) error {
	var nodes corev1.NodeList
	if err := c.cache.List(ctx, &nodes); err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	var anodes v1alpha1.AllotNodeList
	if err := c.cache.List(ctx, &anodes); err != nil {
		return fmt.Errorf("list AllotNodes: %w", err)
	}
	plan, conflicts := Plan(c.opts.NodeName, Peers(nodes.Items, anodes.Items))
	for _, cf := range conflicts {
		c.log.Warn("node routes: a block is claimed by several nodes; routing to the first by name", "block", cf.Dst, "nodes", cf.Nodes)
	}
	res, err := c.opts.Reconciler.Sync(plan)
	if err != nil {
		return err
	}
	for _, e := range res.Errors {
		c.log.Warn("node routes: route not installed", "err", e)
	}
	if res.Added+res.Removed+res.Replaced > 0 {
		c.log.Info("node routes synced", "routes", len(plan), "added", res.Added, "replaced", res.Replaced, "removed", res.Removed)
	}
	return nil
}

// Peers joins Nodes (addresses, podCIDRs) and AllotNodes (blocks) by name. A node without an
// InternalIP of a family gets no route for that family's blocks.
func Peers(nodes []corev1.Node, anodes []v1alpha1.AllotNode) []Peer {
	blocks := map[string][]netip.Prefix{}
	for _, an := range anodes {
		for _, pa := range an.Spec.IPAM.Pools.Allocated {
			for _, s := range pa.CIDRs {
				if p, err := netip.ParsePrefix(s); err == nil {
					blocks[an.Name] = append(blocks[an.Name], p)
				}
			}
		}
	}
	out := make([]Peer, 0, len(nodes))
	for _, n := range nodes {
		p := Peer{Name: n.Name, Blocks: blocks[n.Name]}
		for _, s := range n.Spec.PodCIDRs {
			if pr, err := netip.ParsePrefix(s); err == nil && !slices.Contains(p.Blocks, pr) {
				p.Blocks = append(p.Blocks, pr)
			}
		}
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			ip, err := netip.ParseAddr(a.Address)
			if err != nil {
				continue
			}
			if ip.Is4() && !p.IPv4.IsValid() {
				p.IPv4 = ip
			} else if ip.Is6() && !p.IPv6.IsValid() {
				p.IPv6 = ip
			}
		}
		out = append(out, p)
	}
	return out
}
