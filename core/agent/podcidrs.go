package agent

import (
	"context"
	"fmt"

	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/sdk/policy"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// Kubernetes mode (cluster.ipam: kubernetes): the node's pool is its Node's spec.podCIDRs,
// as in Cilium's "Kubernetes Host Scope" IPAM (ipam: kubernetes), whoever assigns them:
// allot's operator from ClusterCIDRConfigs (core/operator/clustercidr.go), or
// kube-controller-manager's --allocate-node-cidrs. Each pod CIDR is one block of the pool
// PodCIDROptions.Pool (both families under one name, as an IPPool's), presented like a
// multi-pool block: its first usable address is the pods' gateway and their default route
// (ipam.DynamicOptions.BlockGateway). The agent never writes the Node nor an AllotNode: it
// requests nothing and gives nothing back; the pod CIDRs are the node's for its life.

// PodCIDROptions configure kubernetes mode.
type PodCIDROptions struct {
	// Pool is the local pool the pod CIDRs form (default "default", the pool the
	// cilium-annotations policy picks when a pod names none).
	Pool string
}

func (o *PodCIDROptions) pool() string {
	if o.Pool == "" {
		return "default"
	}
	return o.Pool
}

// syncPodCIDRs makes the pool hold exactly the Node's pod CIDRs. Until the Node has some, the
// manager's pools stay unknown and ADDs wait (up to the pending timeout), unless blocks were
// restored from the node store.
func (a *Agent) syncPodCIDRs(ctx context.Context, m *ipam.Manager) error {
	var node corev1.Node
	err := a.cache.Get(ctx, types.NamespacedName{Name: a.opts.NodeName}, &node)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("agent: read Node %s: %w", a.opts.NodeName, err)
	}
	if err != nil {
		// No Node, no pod CIDRs: blocks restored from the node store leave the pools.
		a.reportOnce("no node", "the Node does not exist; no pod CIDRs to serve", "node", a.opts.NodeName)
	}
	pool := a.opts.PodCIDRs.pool()
	blocks, bad := podCIDRBlocks(pool, node.Spec.PodCIDRs, node.Spec.PodCIDR)
	for _, b := range bad {
		a.reportOnce("bad podCIDR "+b, "Node spec.podCIDRs holds an entry that is not a masked CIDR; ignored", "entry", b)
	}
	if len(blocks) == 0 && err == nil {
		a.reportOnce("no podCIDRs "+node.ResourceVersion, "the Node has no spec.podCIDRs yet; ADDs wait for them", "node", a.opts.NodeName)
	}
	for _, b := range blocks {
		fam := policy.IPv4
		if b.cidr.Addr().Is6() {
			fam = policy.IPv6
		}
		if err := m.EnsurePool(pool, fam); err != nil {
			return fmt.Errorf("agent: pool %q: %w", pool, err)
		}
	}
	a.applyBlocks(blocks, m)
	if err := a.saveBlocks(ctx, m); err != nil {
		return err
	}
	a.reconcileDone(m)
	if len(blocks) > 0 {
		a.markNodeRead()
	}
	return nil
}
