package operator

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

const kindConfig = "clustercidrconfig"

// newClusterCIDR makes the ClusterCIDRConfig reconcilers: Node pod CIDRs and config status,
// each re-queueing the other through its dirty set.
func newClusterCIDR(t *term) []reconciler {
	o := t.opts
	configDirty, k8sNodeKick := newDirtySet(o.StatusDelay), newDirtySet(0)
	nodes := &nodeReconciler{client: t.client, reader: t.reader, st: t.st, m: t.m, log: t.log, event: t.event,
		fence: t.fence, policy: o.NodePolicy, podCIDRs: o.ClusterPodCIDRs, configDirty: configDirty,
		k8sNodeKick: k8sNodeKick, ready: t.st.waitReady, workers: o.Workers}
	configs := &configReconciler{client: t.client, st: t.st, m: t.m, status: t.status, event: t.event,
		podCIDRs: o.ClusterPodCIDRs, configDirty: configDirty, k8sNodeKick: k8sNodeKick, ready: t.st.waitReady}
	return []reconciler{nodes, configs}
}

// Setup registers the Node pod-CIDR controller.
func (r *nodeReconciler) Setup(mgr ctrl.Manager) error {
	// Nodes change often (kubelet status); only labels, pod CIDRs and identity matter here.
	nodeChanged := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		return o.UID != n.UID || !equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
			o.Spec.PodCIDR != n.Spec.PodCIDR || !slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs)
	}}
	return controllerFor(mgr, "allot-node-podcidr", &corev1.Node{}, r.k8sNodeKick, r.workers, r.reconcile,
		builder.WithPredicates(nodeChanged))
}

// Setup registers the ClusterCIDRConfig controller.
func (r *configReconciler) Setup(mgr ctrl.Manager) error {
	return controllerFor(mgr, "allot-clustercidrconfig", &allotv1.ClusterCIDRConfig{}, r.configDirty, 2, r.reconcile)
}

// nodePodCIDRs parses a Node's pod CIDRs (spec.podCIDRs, else spec.podCIDR).
func nodePodCIDRs(n *corev1.Node) []netip.Prefix {
	src := n.Spec.PodCIDRs
	if len(src) == 0 && n.Spec.PodCIDR != "" {
		src = []string{n.Spec.PodCIDR}
	}
	var out []netip.Prefix
	for _, s := range src {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// configOf says which config a Node's pod CIDRs came from: the operator's annotation, else the
// first config (by name) containing them all.
func configOf(n *corev1.Node, cidrs []netip.Prefix, cfgs []allotv1.ClusterCIDRConfig) string {
	if a := n.Annotations[allotv1.AnnotationClusterCIDRConfig]; a != "" {
		return a
	}
	for i := range cfgs {
		v, err := allotk8s.CIDRConfigView(&cfgs[i])
		if err != nil {
			continue
		}
		all := true
		for _, c := range cidrs {
			s := v.IPv4
			if !c.Addr().Is4() {
				s = v.IPv6
			}
			if s == nil || s.CIDR.Bits() > c.Bits() || !s.CIDR.Contains(c.Addr()) {
				all = false
				break
			}
		}
		if all {
			return cfgs[i].Name
		}
	}
	return ""
}

// Rebuild reserves every Node's pod CIDRs, read from the API server.
func (r *nodeReconciler) Rebuild(ctx context.Context) error {
	var nodes corev1.NodeList
	if err := r.reader.List(ctx, &nodes); err != nil {
		return fmt.Errorf("list Nodes: %w", err)
	}
	var cfgs allotv1.ClusterCIDRConfigList
	if err := r.reader.List(ctx, &cfgs); err != nil {
		return fmt.Errorf("list ClusterCIDRConfigs: %w", err)
	}
	slices.SortFunc(cfgs.Items, func(a, b allotv1.ClusterCIDRConfig) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	st := r.st
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range nodes.Items {
		n := &nodes.Items[i]
		cidrs := nodePodCIDRs(n)
		if len(cidrs) == 0 {
			continue
		}
		h := &nodeHold{uid: n.UID, config: configOf(n, cidrs, cfgs.Items)}
		for _, c := range cidrs {
			if err := st.set.Reserve(c); err != nil {
				r.log.Warn("rebuild: conflicting pod CIDR", "node", n.Name, "cidr", c, "err", err)
				continue
			}
			h.blocks = append(h.blocks, c)
		}
		st.nodes[n.Name] = h
	}
	return nil
}

// nodeReconciler is the Node pod-CIDR reconciler: it gives a Node without pod CIDRs its
// blocks from the best ClusterCIDRConfig with a free block (the node policy chooses), or marks
// it as waiting; pod CIDRs already set (by allot or another allocator) are reserved. Its
// decisions are pure (candidateConfigs, podCIDRNode, waitVerdict, planNodeConditions); the
// carving happens under st.mu, the write is fenced (the Lease renewed recently).
type nodeReconciler struct {
	client      client.Client
	reader      client.Reader // the API server itself (Rebuild)
	st          *state
	m           *metrics
	log         *slog.Logger
	event       eventFunc
	fence       func(context.Context) error
	policy      policy.PoolPolicy
	podCIDRs    []netip.Prefix // cluster.podCIDRs
	configDirty *dirtySet      // configs whose status to recompute
	k8sNodeKick *dirtySet      // Nodes to re-queue (this controller's source)
	workers     int
	ready       func(context.Context) error
}

func (r *nodeReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.ready(ctx); err != nil {
		return reconcile.Result{}, err
	}
	var node corev1.Node
	if err := r.get(ctx, req.NamespacedName, &node); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	var cfgs allotv1.ClusterCIDRConfigList
	if err := r.client.List(ctx, &cfgs); err != nil {
		return reconcile.Result{}, err
	}
	slices.SortFunc(cfgs.Items, func(a, b allotv1.ClusterCIDRConfig) int { return strings.Compare(a.Name, b.Name) })

	r.st.mu.Lock()
	h, retry := r.heldLocked(&node)
	if cidrs := nodePodCIDRs(&node); len(cidrs) > 0 {
		return reconcile.Result{}, r.served(ctx, &node, h, cidrs, cfgs.Items) // unlocks
	}
	if retry {
		blocks, cfg := slices.Clone(h.blocks), h.config
		r.st.mu.Unlock()
		return r.assign(ctx, &node, blocks, cfg)
	}
	if h != nil && len(h.blocks) > 0 {
		// We wrote pod CIDRs the cache does not show yet; the update event follows.
		r.st.mu.Unlock()
		return reconcile.Result{}, nil
	}
	parsed, bad := configVerdicts(cfgs.Items, r.podCIDRs)
	views, unusable := candidateConfigs(cfgs.Items, parsed, bad, node.Labels, r.st.terminating,
		func(p *cccParsed) uint64 { return p.freeBlocks(&r.st.set) })
	r.st.mu.Unlock()

	nreq := &policy.NodeRequest{Node: policy.Node{Name: node.Name, Labels: node.Labels}, Configs: views}
	d, err := r.policy.SelectNodeCIDRConfig(ctx, nreq)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("node policy for node %s: %w", node.Name, err)
	}
	var blocks []netip.Prefix
	var chosen string
	if d.Code == policy.Decided {
		blocks, chosen = r.carve(&node, d.Configs, parsed)
	}
	if chosen == "" {
		return r.waits(ctx, &node, d, unusable)
	}
	return r.assign(ctx, &node, blocks, chosen)
}

// heldLocked is what node holds, settled against node: a hold of a deleted Node of the same
// name is released; a write in doubt (node is then the live object, reconcile read it) is
// confirmed when node has pod CIDRs, released when node changed since it was sent (it can no
// longer land), and to be written again (retry) when node is unchanged (as resolveDoubt
// settles AllotNode blocks).
func (r *nodeReconciler) heldLocked(node *corev1.Node) (h *nodeHold, retry bool) {
	h = r.st.nodes[node.Name]
	if h != nil && h.uid != node.UID {
		r.releaseLocked(node.Name, h)
		return nil, false
	}
	if h == nil || h.doubtRV == "" {
		return h, false
	}
	if cidrs := nodePodCIDRs(node); len(cidrs) > 0 {
		h.doubtRV = ""
		if slices.Equal(cidrs, h.blocks) { // the write landed; its failure did not count it
			r.m.allocated.WithLabelValues(kindConfig, h.config).Inc()
		}
		return h, false
	}
	// No pod CIDRs: the write can no longer land once the Node changed (it carried the
	// resourceVersion as a precondition); unchanged, it is written again.
	if len(h.blocks) == 0 || node.ResourceVersion != h.doubtRV {
		r.releaseLocked(node.Name, h)
		return nil, false
	}
	return h, true
}

// get reads the Node from the cache or, while a pod CIDR write of it is in doubt, from the
// API server itself (the cache may lag the write, or the write may still land).
func (r *nodeReconciler) get(ctx context.Context, key client.ObjectKey, node *corev1.Node) error {
	r.st.mu.Lock()
	h := r.st.nodes[key.Name]
	doubt := h != nil && h.doubtRV != ""
	r.st.mu.Unlock()
	if !doubt {
		return r.client.Get(ctx, key, node)
	}
	if err := r.reader.Get(ctx, key, node); err != nil {
		return fmt.Errorf("read node %s with pod CIDRs in doubt: %w", key.Name, err)
	}
	return nil
}

// served handles a Node that has pod CIDRs (written by us or anyone): they are taken, so they
// are never handed out again, whoever wrote them; pod CIDRs allot did not write are reported.
// Called with st.mu held; unlocks it.
func (r *nodeReconciler) served(ctx context.Context, node *corev1.Node, h *nodeHold, cidrs []netip.Prefix, cfgs []allotv1.ClusterCIDRConfig) error {
	st, name := r.st, node.Name
	var conflicts []string
	if h == nil {
		h = &nodeHold{uid: node.UID, config: configOf(node, cidrs, cfgs)}
		for _, c := range cidrs {
			if err := st.set.Reserve(c); err != nil {
				conflicts = append(conflicts, err.Error())
				continue
			}
			h.blocks = append(h.blocks, c)
		}
		st.nodes[name] = h
	}
	delete(st.waiting, name)
	cfg := h.config
	foreign := foreignPodCIDRMessage(node, cidrs, cfgs)
	prevForeign, wasForeign := st.foreign[name]
	if foreign != "" {
		st.foreign[name] = foreign
	} else {
		delete(st.foreign, name)
	}
	st.mu.Unlock()
	if cfg != "" {
		r.configDirty.add(cfg)
	}
	if len(conflicts) > 0 {
		r.m.refusals.WithLabelValues(refusalConflict).Add(float64(len(conflicts)))
		r.event(node, corev1.EventTypeWarning, allotv1.ReasonConflictingAllocation, "Allocate",
			"pod CIDRs overlap other nodes' pod CIDRs: %s", strings.Join(conflicts, "; "))
	}
	if foreign == "" {
		return r.setConditions(ctx, node, nodeVerdict{served: true,
			assigned: corev1.ConditionTrue, reason: allotv1.ReasonPodCIDRAssigned, message: assignedMessage(node.Spec.PodCIDRs, cfg)})
	}
	// kube-controller-manager's --allocate-node-cidrs (or any other allocator) wrote these:
	// say so once per node and keep saying it in the condition.
	if !wasForeign || prevForeign != foreign {
		r.m.refusals.WithLabelValues(refusalForeign).Inc()
		r.event(node, corev1.EventTypeWarning, allotv1.ReasonForeignPodCIDR, "Allocate", "%s", foreign)
		r.log.Warn("node has pod CIDRs allot did not assign; turn off kube-controller-manager's --allocate-node-cidrs",
			"node", name, "podCIDRs", node.Spec.PodCIDRs)
	}
	return r.setConditions(ctx, node, nodeVerdict{served: true,
		assigned: corev1.ConditionFalse, reason: allotv1.ReasonForeignPodCIDR, message: foreign, always: true})
}

// candidateConfigs are the views of the configs that may serve a node (free blocks counted
// by free), and unusable the configs that match its labels but serve no node, with why.
// Pure but for free, which reads the block set.
func candidateConfigs(cfgs []allotv1.ClusterCIDRConfig, parsed map[string]*cccParsed, bad map[string]verdict,
	labels map[string]string, terminating map[string]bool, free func(*cccParsed) uint64) (views []policy.CIDRConfigView, unusable []string) {
	views = make([]policy.CIDRConfigView, 0, len(cfgs))
	for i := range cfgs {
		c := &cfgs[i]
		if c.DeletionTimestamp != nil || terminating["ccc/"+c.Name] {
			continue
		}
		p := parsed[c.Name]
		if p == nil {
			// The config's Ready condition says why; the node's message too, if it matches.
			if v, ok := bad[c.Name]; ok && selectorMatches(c, labels) {
				unusable = append(unusable, fmt.Sprintf("%q (%s: %s)", c.Name, v.reason, v.message))
			}
			continue
		}
		v := p.view
		v.FreeBlocks = free(p)
		views = append(views, v)
	}
	return views, unusable
}

// carve takes blocks for node from the first of the chosen configs that still has them, and
// records the hold.
func (r *nodeReconciler) carve(node *corev1.Node, chosen []string, parsed map[string]*cccParsed) ([]netip.Prefix, string) {
	st := r.st
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, cname := range chosen {
		p := parsed[cname]
		if p == nil || st.terminating["ccc/"+cname] {
			continue
		}
		if bs, ok := p.carve(&st.set); ok {
			st.nodes[node.Name] = &nodeHold{uid: node.UID, config: cname, blocks: bs}
			delete(st.waiting, node.Name)
			return bs, cname
		}
	}
	return nil, ""
}

// assign writes the carved blocks to the Node (fenced, with its resourceVersion). On a failure
// the API server certainly did not store (core/k8s.WriteRefused), they go back to the set
// (unless an earlier write of them is in doubt: it may still land); on an ambiguous one
// (504, 5xx, broken connection) they stay held, in doubt, until a live read settles them
// (heldLocked), as the AllotNode reconciler does.
func (r *nodeReconciler) assign(ctx context.Context, node *corev1.Node, blocks []netip.Prefix, chosen string) (reconcile.Result, error) {
	upd := podCIDRNode(node, blocks, chosen)
	err := r.fence(ctx)
	if err == nil {
		err = ctx.Err() // ended before sending: certainly not written
	}
	sent := err == nil
	if sent {
		err = r.client.Patch(ctx, upd, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{}))
	}
	r.st.mu.Lock()
	if cur := r.st.nodes[node.Name]; cur != nil && cur.uid == node.UID {
		switch {
		case err == nil:
			cur.doubtRV = ""
		case sent && !allotk8s.WriteRefused(err):
			cur.doubtRV = node.ResourceVersion
		case cur.doubtRV == "":
			r.releaseLocked(node.Name, cur)
		}
	}
	r.st.mu.Unlock()
	if err != nil {
		switch {
		case apierrors.IsConflict(err):
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		case apierrors.IsNotFound(err):
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("set pod CIDRs of node %s: %w", node.Name, err)
	}
	r.m.allocated.WithLabelValues(kindConfig, chosen).Inc()
	r.configDirty.add(chosen)
	r.event(upd, corev1.EventTypeNormal, allotv1.ReasonPodCIDRAssigned, "Allocate",
		"pod CIDRs %s from ClusterCIDRConfig %q", strings.Join(upd.Spec.PodCIDRs, ", "), chosen)
	return reconcile.Result{}, r.setConditions(ctx, upd, nodeVerdict{served: true,
		assigned: corev1.ConditionTrue, reason: allotv1.ReasonPodCIDRAssigned, message: assignedMessage(upd.Spec.PodCIDRs, chosen)})
}

// podCIDRNode is node with blocks as its pod CIDRs from config chosen. Pure.
func podCIDRNode(node *corev1.Node, blocks []netip.Prefix, chosen string) *corev1.Node {
	upd := node.DeepCopy()
	upd.Spec.PodCIDRs = nil
	for _, b := range blocks {
		upd.Spec.PodCIDRs = append(upd.Spec.PodCIDRs, b.String())
	}
	upd.Spec.PodCIDR = upd.Spec.PodCIDRs[0]
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	upd.Annotations[allotv1.AnnotationClusterCIDRConfig] = chosen
	return upd
}

func assignedMessage(cidrs []string, config string) string {
	if config == "" {
		return fmt.Sprintf("pod CIDRs %s (not from a known ClusterCIDRConfig)", strings.Join(cidrs, ", "))
	}
	return fmt.Sprintf("pod CIDRs %s from ClusterCIDRConfig %q", strings.Join(cidrs, ", "), config)
}

// The words of a waiting node's condition when the policy gave none of its own; what the
// operator does is decided by the decision's Code and Cause, never by these texts.
const (
	msgNoMatch = "no ClusterCIDRConfig matches node labels"
	msgAllFull = "every ClusterCIDRConfig matching the node is full"
)

// waits records that no config can serve the node now: the Node conditions
// AllotPodCIDRAssigned=False and NetworkUnavailable=True (so it stays unschedulable) and an
// Event (once per reason), and the node is re-queued when configs change or blocks are freed.
func (r *nodeReconciler) waits(ctx context.Context, node *corev1.Node, d policy.NodeDecision, unusable []string) (reconcile.Result, error) {
	reason, refusal, msg := waitVerdict(d, node.Name, unusable)
	r.st.mu.Lock()
	prev, was := r.st.waiting[node.Name]
	r.st.waiting[node.Name] = msg
	r.st.mu.Unlock()
	if !was || prev != msg {
		if refusal != "" {
			r.m.refusals.WithLabelValues(refusal).Inc()
		} else {
			r.m.exhausted.WithLabelValues(kindConfig, strings.Join(d.Configs, ",")).Inc()
		}
		r.event(node, corev1.EventTypeWarning, reason, "Allocate", "%s", msg)
		r.log.Info("node gets no pod CIDR yet", "node", node.Name, "reason", msg)
	}
	return reconcile.Result{}, r.setConditions(ctx, node, nodeVerdict{
		assigned: corev1.ConditionFalse, reason: reason, message: msg, always: true})
}

// waitVerdict says why no config serves node: the condition reason, the refusal counted
// ("" when the configs are full: counted as exhaustion) and the message. unusable lists
// configs that match the node but serve no node (invalid, outside the cluster pod CIDR,
// another stack). Pure.
func waitVerdict(d policy.NodeDecision, node string, unusable []string) (reason, refusal, msg string) {
	reason, refusal = allotv1.ReasonNoMatchingConfig, refusalNoMatch
	msg = d.Reason
	switch {
	case d.Code == policy.NoFit && d.Cause == policy.CauseFull:
		reason, refusal = allotv1.ReasonAllConfigsFull, ""
	case d.Code == policy.Decided:
		// Every candidate filled up between the policy's view and the carving.
		reason, refusal = allotv1.ReasonAllConfigsFull, ""
		msg = fmt.Sprintf("%s: %s matched node %q but filled up", msgAllFull, strings.Join(d.Configs, ", "), node)
	case d.Code == policy.Skip:
		msg = fmt.Sprintf("%s: the node policy had no opinion on node %q", msgNoMatch, node)
	}
	if msg == "" {
		msg = msgNoMatch
	}
	if len(unusable) > 0 {
		msg += "; matching configs that serve no node: " + strings.Join(unusable, "; ")
	}
	return reason, refusal, msg
}

// setConditions writes the Node conditions of a verdict (planNodeConditions) with a
// strategic merge patch of status, which merges conditions by type: the kubelet's and other
// components' conditions are left alone.
func (r *nodeReconciler) setConditions(ctx context.Context, node *corev1.Node, v nodeVerdict) error {
	conds, changed := planNodeConditions(node.Status.Conditions, v, metav1.Now())
	if !changed {
		return nil
	}
	orig := node.DeepCopy()
	node.Status.Conditions = conds
	if err := r.client.Status().Patch(ctx, node, client.StrategicMergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s conditions %s, %s: %w", node.Name, allotv1.NodeConditionPodCIDRAssigned,
			allotv1.NodeConditionNetworkUnavailable, err)
	}
	return nil
}

func (r *nodeReconciler) releaseLocked(name string, h *nodeHold) {
	for _, b := range h.blocks {
		r.st.set.Release(b)
	}
	if len(h.blocks) > 0 && h.config != "" {
		r.m.released.WithLabelValues(kindConfig, h.config).Inc()
	}
	delete(r.st.nodes, name)
}

// forget frees a deleted Node's blocks and re-queues the nodes waiting for a free block.
func (r *nodeReconciler) forget(name string) {
	st := r.st
	st.mu.Lock()
	var cfg string
	freed := false
	if h := st.nodes[name]; h != nil {
		cfg, freed = h.config, len(h.blocks) > 0
		r.releaseLocked(name, h)
	}
	delete(st.waiting, name)
	delete(st.foreign, name)
	waiting := st.waitingNodes()
	st.mu.Unlock()
	if cfg != "" {
		r.configDirty.add(cfg)
	}
	if freed {
		r.k8sNodeKick.add(waiting...)
	}
}

// configReconciler is the ClusterCIDRConfig reconciler: it keeps a config's finalizer,
// status and conditions, and re-queues the nodes waiting for a config. decideConfig computes
// the status from the config's verdict (clustercidr_rules.go) and what the leader's state
// says of it (pure); reconcile reads and snapshots, apply writes.
type configReconciler struct {
	client      client.Client
	st          *state
	m           *metrics
	status      *statusBatch
	event       eventFunc
	podCIDRs    []netip.Prefix // cluster.podCIDRs
	configDirty *dirtySet      // configs to re-queue (this controller's source)
	k8sNodeKick *dirtySet      // Nodes to re-queue
	ready       func(context.Context) error
}

// configSnapshot is what the leader's state says of one config.
type configSnapshot struct {
	holders []string // nodes holding pod CIDRs of it, sorted
	free    uint64   // blocks it can still hand out
	waiting []string // nodes waiting for any config
}

// configDecision is what a config's status should be.
type configDecision struct {
	status  *allotv1.ClusterCIDRConfigStatus
	events  []pendingEvent
	release bool // terminating and no node holds its pod CIDRs: remove the finalizer
}

func (r *configReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.ready(ctx); err != nil {
		return reconcile.Result{}, err
	}
	var cfg allotv1.ClusterCIDRConfig
	if err := r.client.Get(ctx, req.NamespacedName, &cfg); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, r.forget(ctx, req.Name)
		}
		return reconcile.Result{}, err
	}
	if res, done, err := ensureFinalizer(ctx, r.client, &cfg, allotv1.FinalizerConfigInUse, "ClusterCIDRConfig"); done {
		return res, err
	}
	// The stack rule judges a config against the others: read them all (from the cache).
	var all allotv1.ClusterCIDRConfigList
	if err := r.client.List(ctx, &all); err != nil {
		return reconcile.Result{}, err
	}
	parsed, bad := configVerdicts(all.Items, r.podCIDRs)
	p, bv := parsed[cfg.Name], bad[cfg.Name]
	if len(cfg.Status.Conditions) == 0 {
		// A new config may change which config is the oldest valid one (equal
		// creationTimestamps): judge the others again.
		for _, o := range all.Items {
			if o.Name != cfg.Name {
				r.configDirty.add(o.Name)
			}
		}
	}
	snap := r.snapshot(cfg.Name, cfg.DeletionTimestamp != nil, p)
	d := decideConfig(&cfg, p, bv, snap)
	r.m.blocks.WithLabelValues(kindConfig, cfg.Name, "node").Set(float64(len(snap.holders)))
	if p != nil {
		r.m.capacity.WithLabelValues(kindConfig, cfg.Name, "node").Set(float64(uint64(len(snap.holders)) + snap.free))
	}
	if d.release {
		return r.release(ctx, &cfg)
	}
	return r.apply(ctx, &cfg, d, snap.waiting)
}

// forget: a deleted config frees nothing by itself, but waiting nodes may now match another
// config, and the oldest config may be gone (the stack rule may judge the others anew).
func (r *configReconciler) forget(ctx context.Context, name string) error {
	r.st.mu.Lock()
	delete(r.st.terminating, "ccc/"+name)
	waiting := r.st.waitingNodes()
	r.st.mu.Unlock()
	r.k8sNodeKick.add(waiting...)
	var all allotv1.ClusterCIDRConfigList
	if err := r.client.List(ctx, &all); err != nil {
		return err
	}
	for _, o := range all.Items {
		r.configDirty.add(o.Name)
	}
	return nil
}

// snapshot reads the config's holders and free blocks from the state (marking a terminating
// config there first, so no node reconcile carves from it from now on).
func (r *configReconciler) snapshot(name string, terminating bool, p *cccParsed) configSnapshot {
	var snap configSnapshot
	st := r.st
	st.mu.Lock()
	if terminating {
		st.terminating["ccc/"+name] = true
	}
	for n, h := range st.nodes {
		if h.config == name {
			snap.holders = append(snap.holders, n)
		}
	}
	if p != nil {
		snap.free = p.freeBlocks(&st.set)
	}
	snap.waiting = st.waitingNodes()
	st.mu.Unlock()
	slices.Sort(snap.holders)
	return snap
}

// decideConfig computes cfg's status from its parse (p, nil when it serves no node, then bv
// says why) and the state's snapshot. Pure.
func decideConfig(cfg *allotv1.ClusterCIDRConfig, p *cccParsed, bv verdict, snap configSnapshot) configDecision {
	if p == nil && bv.ok() {
		bv = verdict{allotv1.ReasonInvalid, "not in the list of ClusterCIDRConfigs yet"}
	}
	terminating := cfg.DeletionTimestamp != nil
	want := cfg.Status.DeepCopy()
	want.AllocatedBlocks = int64(len(snap.holders))
	want.TotalBlocks = 0
	if p != nil {
		want.TotalBlocks = int64(min(p.totalBlocks(), 1<<62))
	}
	gen := cfg.Generation
	ready := metav1.Condition{Type: allotv1.ConditionReady, Status: metav1.ConditionTrue, Reason: allotv1.ReasonValid,
		Message: "nodes matching the selector get pod CIDRs from this config", ObservedGeneration: gen}
	switch {
	case p == nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, bv.reason, bv.message+"; the config serves no node"
	case terminating:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, allotv1.ReasonPoolTerminating, "the config is being deleted; it serves no new node"
	}
	var evs []pendingEvent
	if prev := meta.FindStatusCondition(cfg.Status.Conditions, allotv1.ConditionReady); p == nil && (prev == nil || prev.Message != ready.Message) {
		evs = append(evs, pendingEvent{reason: bv.reason, action: "Validate", note: ready.Message})
	}
	meta.SetStatusCondition(&want.Conditions, ready)
	cond := func(typ string, on bool, reason, msg, refusal string) {
		if !on {
			meta.RemoveStatusCondition(&want.Conditions, typ)
			return
		}
		if prev := meta.FindStatusCondition(want.Conditions, typ); prev == nil || prev.Message != msg {
			evs = append(evs, pendingEvent{reason: typ, action: "Validate", note: msg, refusal: refusal})
		}
		meta.SetStatusCondition(&want.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	cond(allotv1.ConditionExhausted, p != nil && snap.free == 0, allotv1.ReasonPoolExhausted,
		"every per-node block is taken; matching nodes get the next best config, or wait", "")
	cond(allotv1.ConditionDeletionRefused, terminating && len(snap.holders) > 0, allotv1.ReasonInUse,
		fmt.Sprintf("deletion refused: node(s) %s hold pod CIDRs of this config; it is deleted once they are gone (finalizer %s)",
			strings.Join(firstN(snap.holders, 10), ", "), allotv1.FinalizerConfigInUse), refusalConfigDeletion)
	return configDecision{status: want, events: evs, release: terminating && len(snap.holders) == 0}
}

// release removes the finalizer of a config being deleted that no node holds pod CIDRs of.
func (r *configReconciler) release(ctx context.Context, cfg *allotv1.ClusterCIDRConfig) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(cfg, allotv1.FinalizerConfigInUse) {
		return reconcile.Result{}, nil
	}
	controllerutil.RemoveFinalizer(cfg, allotv1.FinalizerConfigInUse)
	if err := r.client.Update(ctx, cfg); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("remove finalizer of ClusterCIDRConfig %s: %w", cfg.Name, err)
	}
	return reconcile.Result{}, nil
}

// apply writes the decided status (counters batched by StatusDelay, conditions at once) and
// its Events, and re-queues the waiting nodes: a new or changed config may serve them.
func (r *configReconciler) apply(ctx context.Context, cfg *allotv1.ClusterCIDRConfig, d configDecision, waiting []string) (reconcile.Result, error) {
	want := d.status
	if !equality.Semantic.DeepEqual(want, &cfg.Status) {
		if wait := r.status.wait("ccc/" + cfg.Name); wait > 0 && sameConditions(want.Conditions, cfg.Status.Conditions) {
			r.k8sNodeKick.add(waiting...)
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		upd := cfg.DeepCopy()
		upd.Status = *want
		if retry, err := writeStatus(ctx, r.client, upd, "ClusterCIDRConfig "+cfg.Name); retry || err != nil {
			return reconcile.Result{RequeueAfter: retryAfter(retry)}, err
		}
		r.status.written("ccc/" + cfg.Name)
		emitEvents(r.m, r.event, upd, d.events)
	}
	r.k8sNodeKick.add(waiting...)
	return reconcile.Result{}, nil
}

func selectorMatches(c *allotv1.ClusterCIDRConfig, labels map[string]string) bool {
	sel := allotk8s.LabelSelector(c.Spec.NodeSelector)
	return sel.Matches(labels)
}
