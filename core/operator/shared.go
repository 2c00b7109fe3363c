package operator

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// Shared pools (SharedIPPool, AddressClaim, AllotEndpoint, ReservedIP): the operator keeps each
// pool's status and finalizer (shared_status.go), frees the claims and endpoints of pods that
// are gone (shared_gc.go), and serves the admission webhook that refuses conflicting pools
// (webhook*.go). Agents allocate on their own (core/sharedpool); nothing here is on the
// allocation path.

// Shared-pool defaults.
const (
	DefaultSharedGCGrace = 30 * time.Second
	// maxSharedGCInterval bounds the scan period derived from the grace.
	maxSharedGCInterval = 10 * time.Second
)

// SharedPoolOptions configure the shared-pool side of the operator.
type SharedPoolOptions struct {
	// Disable turns the shared-pool controllers off. When not disabled they run only if the
	// API server serves allot.io/v1alpha1 sharedippools (the CRDs are installed), checked
	// when a term starts.
	Disable bool
	// GCGrace is how long a claim or endpoint must stay stale, unchanged, before the
	// collector frees it (default 30 s). A change of the object restarts the wait.
	GCGrace time.Duration
	// GCInterval is how often the collector scans (default GCGrace/3, at most 10 s).
	GCInterval time.Duration
	// SubnetResync is how often the SpiderSubnet controller re-checks every AllotSubnet's
	// pools against their workloads (default 10 s).
	SubnetResync time.Duration
	// GCTerminatingOnReadyNode and GCTerminatingOnNotReadyNode free the addresses of a
	// pod stuck Terminating past its grace period (deletionTimestamp plus
	// deletionGracePeriodSeconds) whose node is Ready, or not Ready (Spiderpool's
	// enableGCStatelessTerminatingPodOnReadyNode and ...OnNotReadyNode). StatefulSet and
	// KubeVirt VM pods keep theirs. nil means true (Spiderpool's default).
	GCTerminatingOnReadyNode    *bool
	GCTerminatingOnNotReadyNode *bool
	// Webhook is the admission webhook (off unless Webhook.Address is set). It runs on every
	// replica, leader or not, so a standby answers too.
	Webhook WebhookOptions
}

func (o *SharedPoolOptions) defaults() error {
	if o.GCGrace < 0 {
		return fmt.Errorf("operator: SharedPools.GCGrace: %v must not be negative", o.GCGrace)
	}
	if o.GCGrace == 0 {
		o.GCGrace = DefaultSharedGCGrace
	}
	if o.GCInterval < 0 {
		return fmt.Errorf("operator: SharedPools.GCInterval: %v must not be negative", o.GCInterval)
	}
	if o.GCInterval == 0 {
		o.GCInterval = min(max(o.GCGrace/3, 10*time.Millisecond), maxSharedGCInterval)
	}
	if o.SubnetResync < 0 {
		return fmt.Errorf("operator: SharedPools.SubnetResync: %v must not be negative", o.SubnetResync)
	}
	if o.SubnetResync == 0 {
		o.SubnetResync = DefaultSubnetResync
	}
	for _, b := range []**bool{&o.GCTerminatingOnReadyNode, &o.GCTerminatingOnNotReadyNode} {
		if *b == nil {
			t := true
			*b = &t
		}
	}
	return o.Webhook.defaults()
}

// sharedCRDsInstalled asks the API server whether it serves SharedIPPool and the other
// shared-pool kinds. A missing group is "no"; any other error is returned.
func sharedCRDsInstalled(cfg *rest.Config) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, err
	}
	list, err := dc.ServerResourcesForGroupVersion(allotv1.SchemeGroupVersion.String())
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	want := map[string]bool{"sharedippools": false, "addressclaims": false, "allotendpoints": false, "reservedips": false}
	for _, r := range list.APIResources {
		if _, ok := want[r.Name]; ok {
			want[r.Name] = true
		}
	}
	for _, ok := range want {
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// sharedCacheByObject trims cached Pods to what the collector reads (identity, owners, node,
// phase): the operator caches every Pod of the cluster only for this.
func sharedCacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Transform: func(obj any) (any, error) {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return obj, nil
			}
			out := &corev1.Pod{TypeMeta: p.TypeMeta}
			out.ObjectMeta = *p.ObjectMeta.DeepCopy()
			out.ManagedFields = nil
			out.Annotations = nil
			out.Spec.NodeName = p.Spec.NodeName
			out.Status.Phase = p.Status.Phase
			return out, nil
		}},
	}
}

// newShared makes the shared-pool reconcilers (pool status, the collector, the SpiderSubnet
// controller) when the API server serves their CRDs.
func newShared(t *term) ([]reconciler, error) {
	o := t.opts
	if o.SharedPools.Disable {
		return nil, nil
	}
	ok, err := sharedCRDsInstalled(o.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("operator: shared pools: discovery: %w", err)
	}
	if !ok {
		t.log.Info("shared pools: CRDs not installed; SharedIPPool status and address GC are off")
		return nil, nil
	}
	sm, err := newSharedMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	rs := []reconciler{newSharedPoolStatus(t, sm), newSharedGC(t, sm)}
	subnets, err := newSubnetCtl(t)
	if err != nil || subnets == nil {
		return rs, err
	}
	return append(rs, subnets), nil
}

// crdServed asks the API server whether it serves resource of allot.io/v1alpha1.
func crdServed(cfg *rest.Config, resource string) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, err
	}
	list, err := dc.ServerResourcesForGroupVersion(allotv1.SchemeGroupVersion.String())
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// sharedMetrics are the shared-pool series.
type sharedMetrics struct {
	claimsFreed    *prometheus.CounterVec // claims deleted by the collector, by reason
	endpointsFreed *prometheus.CounterVec // endpoints deleted by the collector, by reason
	gcRaces        *prometheus.CounterVec // deletes refused by a precondition (object changed), by kind
	gcStale        prometheus.Gauge       // claims and endpoints waiting out the grace period
	allocated      *prometheus.GaugeVec   // addresses held, by pool and family
	total          *prometheus.GaugeVec   // addresses a pool can hand out, by pool and family
	conflicts      prometheus.Gauge       // pools with AddressConflict
	admission      *prometheus.CounterVec // webhook answers, by kind and result
}

// GC reasons (label "reason").
const (
	gcPodGone        = "pod_gone"
	gcPodReplaced    = "pod_replaced"
	gcPodTerminated  = "pod_terminated"
	gcNodeGone       = "node_gone"
	gcStsGone        = "statefulset_gone"
	gcStsScaledDown  = "statefulset_scaled_down"
	gcTerminating    = "pod_terminating_overdue"
	gcVMGone         = "virtualmachine_gone"
	gcDuplicate      = "duplicate"
	gcKindClaim      = "addressclaim"
	gcKindEndpoint   = "allotendpoint"
	admissionAllowed = "allowed"
	admissionDenied  = "denied"
	admissionError   = "error"
)

func newSharedMetrics(reg prometheus.Registerer) (*sharedMetrics, error) {
	m := &sharedMetrics{
		claimsFreed: counterVec("shared_claims_freed_total",
			"AddressClaims deleted by the shared-pool garbage collector, by reason.", "reason"),
		endpointsFreed: counterVec("shared_endpoints_freed_total",
			"AllotEndpoints deleted by the shared-pool garbage collector, by reason.", "reason"),
		gcRaces: counterVec("shared_gc_precondition_failed_total",
			"Garbage-collector deletes refused because the object changed (taken over) after the decision.", "kind"),
		gcStale: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "allot", Subsystem: "operator", Name: "shared_gc_stale",
			Help: "AddressClaims and AllotEndpoints that look stale and wait out the grace period.",
		}),
		allocated: gaugeVec("shared_pool_allocated_ips", "Addresses of a SharedIPPool held by pods (AddressClaims).", "pool", "family"),
		total: gaugeVec("shared_pool_total_ips",
			"Addresses a SharedIPPool can hand out (ips - excludeIPs - reserved).", "pool", "family"),
		conflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "allot", Subsystem: "operator", Name: "shared_pools_conflicting",
			Help: "SharedIPPools that hand out nothing because they overlap an older pool (AddressConflict).",
		}),
		admission: counterVec("shared_admission_total",
			"Admission webhook answers, by kind and result (allowed, denied, error).", "kind", "result"),
	}
	err := registerAll(reg, into(&m.claimsFreed), into(&m.endpointsFreed), into(&m.gcRaces), into(&m.gcStale),
		into(&m.allocated), into(&m.total), into(&m.conflicts), into(&m.admission))
	if err != nil {
		return nil, fmt.Errorf("operator: shared-pool metrics: %w", err)
	}
	return m, nil
}
