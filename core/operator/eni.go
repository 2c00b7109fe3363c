package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/allot-ipam/allot/core/eni"
	"github.com/allot-ipam/allot/core/eni/eninode"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/cloud"
)

// ENI mode: the leader runs the ENI engine (core/eni) over a cloud backend. Nodes come from
// AllotNodes (spec.eni, status.ipam.used/pending) completed by their Node (spec.providerID,
// instance-type and zone labels); the engine's pools go to spec.ipam.pool and status.eni
// (eninode.Publisher) and the release handshake runs through status.ipam.releaseIPs
// (eninode.Handshake, operator transitions only). Each term builds a new engine, which reads
// every node's interfaces from the cloud on its first pass: a restarted or newly elected
// operator resumes from the cloud's state, never from memory. A deleted Node has its
// AllotNode deleted (as Cilium's operator deletes the CiliumNode) and leaves the engine; its
// ENIs stay with the instance.

// Node labels the operator falls back on when the agent did not fill spec.eni.
const (
	LabelInstanceType     = "node.kubernetes.io/instance-type"
	LabelInstanceTypeBeta = "beta.kubernetes.io/instance-type"
	LabelZone             = "topology.kubernetes.io/zone"
	LabelZoneBeta         = "failure-domain.beta.kubernetes.io/zone"
)

// ENIOptions turn on ENI mode.
type ENIOptions struct {
	// Backend is the cloud backend (built in, or a go-plugin process); required.
	Backend cloud.CloudBackend
	// Config is the engine's configuration (eni.DefaultConfig documents the defaults).
	Config eni.Config
	// Now is the engine's clock (tests; default time.Now).
	Now func() time.Time
	// OnEngine, if set, is called with each term's engine once it runs (tests).
	OnEngine func(*eni.Engine)
	// NodeConfigs are named per-node ENI settings; a node uses the one its label
	// NodeConfigLabel names (the AWS VPC CNI's ENIConfig, chosen by the node label
	// k8s.amazonaws.com/eniConfig, or by zone with ENI_CONFIG_LABEL_DEF). Fields of the
	// node's spec.eni win over them, and they over the cluster-wide Config.
	NodeConfigs map[string]NodeENIConfig
	// GCInterval and GCTags run the garbage collection of leaked interfaces (eni.GC) while
	// this replica leads, when the backend offers it (eni.InterfaceCollector) and there are
	// tags: GCTags plus the cluster's (eni.ClusterTag = Config.ClusterName). Interval 0:
	// eni.DefaultGCInterval; negative: off.
	GCInterval time.Duration
	GCTags     map[string]string
	// NodeConfigLabel is the node label naming a node's entry of NodeConfigs (default
	// DefaultNodeConfigLabel; topology.kubernetes.io/zone picks one entry per zone).
	NodeConfigLabel string

	metrics *eni.Metrics // registered once per Run, shared by the terms
}

// DefaultNodeConfigLabel is the node label naming a node's ENI settings (ENIOptions).
const DefaultNodeConfigLabel = "allot.io/eni-config"

// NodeENIConfig is one named set of per-node ENI settings (ENIOptions.NodeConfigs): where a
// node's new ENIs go and which security groups they get.
type NodeENIConfig struct {
	SubnetIDs         []string
	SubnetTags        map[string]string
	SecurityGroups    []string
	SecurityGroupTags map[string]string
}

func (o *ENIOptions) label() string {
	if o.NodeConfigLabel == "" {
		return DefaultNodeConfigLabel
	}
	return o.NodeConfigLabel
}

// nodeConfig returns the settings the node's label selects: nil when the node carries no
// such label (or there are no node configs), an error naming the label when it names an
// entry that does not exist.
func (o *ENIOptions) nodeConfig(node *corev1.Node) (*NodeENIConfig, error) {
	if len(o.NodeConfigs) == 0 {
		return nil, nil
	}
	name, ok := node.Labels[o.label()]
	if !ok || name == "" {
		return nil, nil
	}
	c, ok := o.NodeConfigs[name]
	if !ok {
		return nil, fmt.Errorf("label %s=%s names no entry of cluster.eni.nodeConfigs", o.label(), name)
	}
	return &c, nil
}

func (o *ENIOptions) validate() error {
	if o.Backend == nil {
		return errors.New("operator: ENI.Backend: must be set")
	}
	if err := o.Config.Validate(); err != nil {
		return fmt.Errorf("operator: ENI.Config: %w", err)
	}
	return nil
}

// eniReconciler is one term's ENI engine and the AllotNode controller feeding it: each
// node's state (its AllotNode completed by its Node) goes to the engine when it changes.
type eniReconciler struct {
	client  client.Client
	reader  client.Reader // the API server itself (a Node's deletion is confirmed)
	log     *slog.Logger
	event   eventFunc
	o       *ENIOptions
	workers int
	ready   func(context.Context) error

	engine *eni.Engine
	mu     sync.Mutex
	last   map[string]eni.NodeState // last state handed to the engine, per node
	lastHS map[string]string        // last handshake answers seen, per node
}

func newENIReconciler(t *term) (*eniReconciler, error) {
	o := t.opts.ENI
	clients := eninode.Clients{Live: t.reader, Writer: t.client, Cached: t.client}
	e, err := eni.New(o.Backend, o.Config, eni.Options{
		Handshake: eni.Checked(eninode.Handshake{Clients: clients}, eni.OperatorMayApply, "operator"),
		Publisher: eninode.Publisher{Clients: clients},
		Logger:    t.log.With("component", "eni"),
		Now:       o.Now,
		Metrics:   o.metrics,
	})
	if err != nil {
		return nil, fmt.Errorf("eni: %w", err)
	}
	return &eniReconciler{client: t.client, reader: t.reader, log: t.log, event: t.event, o: o,
		workers: t.opts.Workers, ready: t.st.waitReady,
		engine: e, last: map[string]eni.NodeState{}, lastHS: map[string]string{}}, nil
}

// Setup registers the engine (run while this replica leads) and the AllotNode controller,
// which also watches Nodes of the same name.
func (r *eniReconciler) Setup(mgr ctrl.Manager) error {
	if err := mgr.Add(manager.RunnableFunc(r.run)); err != nil {
		return err
	}
	toName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: nameKey(obj.GetName())}}
	})
	return ctrl.NewControllerManagedBy(mgr).Named("allot-eni-node").
		For(&allotv1.AllotNode{}).
		Watches(&corev1.Node{}, toName).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.workers}).
		Complete(quiet(r.reconcile))
}

// run runs the engine while this replica leads, once the state is rebuilt.
func (r *eniReconciler) run(ctx context.Context) error {
	if err := r.ready(ctx); err != nil {
		return nil
	}
	if r.o.OnEngine != nil {
		r.o.OnEngine(r.engine)
	}
	r.log.Info("ENI engine running", "nodes", len(r.engine.Nodes()))
	if gc := r.gc(); gc != nil {
		go gc.Run(ctx)
	}
	if err := r.engine.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// gc is the garbage collection of leaked interfaces this term runs, or nil.
func (r *eniReconciler) gc() *eni.GC {
	o := r.o
	tags := maps.Clone(o.GCTags)
	if o.Config.ClusterName != "" {
		if tags == nil {
			tags = map[string]string{}
		}
		tags[eni.ClusterTag] = o.Config.ClusterName
	}
	if o.GCInterval < 0 || len(tags) == 0 {
		return nil
	}
	col, ok := o.Backend.(eni.InterfaceCollector)
	if !ok {
		r.log.Info("ENI garbage collection off: the cloud backend cannot list and delete detached interfaces")
		return nil
	}
	return &eni.GC{Collector: col, Tags: tags, Interval: o.GCInterval, Log: r.log.With("component", "eni-gc")}
}

// reconcile hands one node's state to the engine, or removes the node: its AllotNode
// is gone, or its Node is (then the AllotNode is deleted too).
func (r *eniReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.ready(ctx); err != nil {
		return reconcile.Result{}, err
	}
	name := req.Name
	var an allotv1.AllotNode
	if err := r.client.Get(ctx, req.NamespacedName, &an); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	var node corev1.Node
	nodeErr := r.client.Get(ctx, req.NamespacedName, &node)
	if nodeErr != nil && !apierrors.IsNotFound(nodeErr) {
		return reconcile.Result{}, nodeErr
	}
	nodeGone := apierrors.IsNotFound(nodeErr) || node.DeletionTimestamp != nil
	if nodeGone && ownedByNode(&an) {
		return r.deleteNode(ctx, &an)
	}
	nc, err := r.o.nodeConfig(&node)
	if err != nil {
		// As the AWS VPC CNI with a missing ENIConfig: no new addresses rather than
		// addresses from subnets the node was not meant to use.
		r.event(&an, corev1.EventTypeWarning, "ENIConfigNotFound", "Allocate", "%v; the node gets no ENI addresses until it does", err)
		r.forget(name)
		return reconcile.Result{}, nil
	}
	r.upsert(&an, eniNodeState(&an, &node, r.o.Config.Params, nc))
	return reconcile.Result{}, nil
}

// deleteNode deletes the AllotNode of a Node that is gone (its informer says so; the API
// server confirms before: a new Node of the same name may just not be cached yet).
func (r *eniReconciler) deleteNode(ctx context.Context, an *allotv1.AllotNode) (reconcile.Result, error) {
	var live corev1.Node
	err := r.reader.Get(ctx, client.ObjectKey{Name: an.Name}, &live)
	switch {
	case err == nil && live.DeletionTimestamp == nil:
		return reconcile.Result{RequeueAfter: time.Second}, nil
	case err != nil && !apierrors.IsNotFound(err):
		return reconcile.Result{}, err
	}
	uid := an.UID
	if err := r.client.Delete(ctx, an, &client.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("delete AllotNode %s of deleted Node: %w", an.Name, err)
	}
	r.forget(an.Name)
	r.log.Info("Node deleted; AllotNode deleted (its ENIs stay with the instance)", "node", an.Name)
	return reconcile.Result{}, nil
}

// upsert hands the node's state to the engine when it changed, and wakes the engine
// when only the agent's handshake answers did.
func (r *eniReconciler) upsert(an *allotv1.AllotNode, s eni.NodeState) {
	name, hs, m := an.Name, answers(an), r
	m.mu.Lock()
	prev, known := m.last[name]
	upsert, trigger := eniNodeChange(prev, known, s, m.lastHS[name], hs)
	if upsert {
		m.last[name] = s
	}
	m.lastHS[name] = hs
	m.mu.Unlock()
	if trigger {
		m.engine.Trigger() // the agent answered the handshake: carry on now
	}
	if !upsert {
		return
	}
	if err := m.engine.UpsertNode(s); err != nil {
		// Bad overrides in spec.eni (the CRD bounds them; min above max is what is left).
		r.event(an, corev1.EventTypeWarning, "InvalidENISpec", "Allocate", "%v", err)
		m.mu.Lock()
		delete(m.last, name)
		m.mu.Unlock()
	}
}

// eniNodeChange decides what a node's reconcile does: upsert its state into the engine when
// it differs from the last one handed over (or none was), else trigger a pass when the
// agent's handshake answers changed and are not empty.
func eniNodeChange(prev eni.NodeState, known bool, s eni.NodeState, prevHS, hs string) (upsert, trigger bool) {
	if !known || !reflect.DeepEqual(prev, s) {
		return true, false
	}
	return false, prevHS != hs && hs != ""
}

// answers fingerprints the agent's side of the node's handshake (entries it answered or
// dropped), so an answer wakes the engine at once instead of at its next resync.
func answers(an *allotv1.AllotNode) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(an.Status.IPAM.ReleaseIPs)) {
		if st := eni.ReleaseState(an.Status.IPAM.ReleaseIPs[k]); st == eni.StateReady || st == eni.StateDoNotRelease || st == eni.StateReleased {
			b.WriteString(k + "=" + string(st) + ";")
		}
	}
	return b.String()
}

func (r *eniReconciler) forget(name string) {
	r.mu.Lock()
	delete(r.last, name)
	delete(r.lastHS, name)
	r.mu.Unlock()
	r.engine.DeleteNode(name)
}

// ownedByNode: the agent made the Node the AllotNode's owner (it does when the Node exists),
// so the AllotNode belongs to that Node's lifetime.
func ownedByNode(an *allotv1.AllotNode) bool {
	for _, r := range an.OwnerReferences {
		if r.Kind == "Node" && r.APIVersion == "v1" {
			return true
		}
	}
	return false
}

// eniNodeState builds the engine's view of a node from its AllotNode and Node (node may be
// empty when the Node does not exist) and the node config its label selects (nc, may be
// nil): a field of spec.eni wins over nc's, which wins over the cluster-wide configuration.
// Subnet IDs and tags go together, as in the engine: a node's own either replaces both.
func eniNodeState(an *allotv1.AllotNode, node *corev1.Node, def eni.Params, nc *NodeENIConfig) eni.NodeState {
	spec := an.Spec.ENI
	ref := cloud.NodeRef{Name: an.Name, ProviderID: eninode.ProviderID(node.Spec.ProviderID, spec)}
	if spec != nil {
		ref.InstanceType, ref.Zone = spec.InstanceType, spec.Zone
	}
	if ref.InstanceType == "" {
		ref.InstanceType = firstLabel(node.Labels, LabelInstanceType, LabelInstanceTypeBeta)
	}
	if ref.Zone == "" {
		ref.Zone = firstLabel(node.Labels, LabelZone, LabelZoneBeta)
	}
	s := eni.NodeState{
		Ref:     ref,
		Used:    eninode.Used(an),
		Pending: int(max(an.Status.IPAM.Pending, 0)),
		Params:  eninode.Params(spec, def),
	}
	if spec != nil {
		if spec.FirstInterfaceIndex != nil {
			v := int(*spec.FirstInterfaceIndex)
			s.FirstInterfaceIndex = &v
		}
		s.SubnetIDs = spec.SubnetIDs
		s.SubnetTags = spec.SubnetTags
		s.SecurityGroups = spec.SecurityGroups
		s.PrefixDelegation, s.IPv6PrefixDelegation = spec.PrefixDelegation, spec.IPv6PrefixDelegation
		s.SecurityGroupTags = spec.SecurityGroupTags
	}
	if nc != nil {
		if len(s.SubnetIDs) == 0 && len(s.SubnetTags) == 0 {
			s.SubnetIDs, s.SubnetTags = nc.SubnetIDs, nc.SubnetTags
		}
		if len(s.SecurityGroups) == 0 && len(s.SecurityGroupTags) == 0 {
			s.SecurityGroups, s.SecurityGroupTags = nc.SecurityGroups, nc.SecurityGroupTags
		}
	}
	return s
}

func firstLabel(labels map[string]string, keys ...string) string {
	for _, k := range keys {
		if v := labels[k]; v != "" {
			return v
		}
	}
	return ""
}
