package operator

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// The shared-pool garbage collector frees AddressClaims and AllotEndpoints whose holder is
// gone. It runs on the leader only. Freeing an address some pod still uses hands it out twice
// (it happened in Whereabouts, k8snetworkplumbingwg/whereabouts#176, and in Spiderpool,
// spidernet-io/spiderpool#2526: a live StatefulSet pod's address was freed), so every
// decision is conservative and checked three times:
//
//  1. a scan of the informer caches marks an object stale, with a reason;
//  2. it must stay stale, unchanged (same resourceVersion), for the grace period;
//  3. right before deleting, the holder is read again from the API server itself (pod,
//     StatefulSet, Node, endpoint: no cache) and the verdict recomputed; then the object is
//     deleted with Preconditions{UID, ResourceVersion} of the version judged, so an agent
//     that took the claim over meanwhile (a recreated StatefulSet pod) makes the delete fail.
//
// Any read error means "keep". A StatefulSet pod's claim is kept as long as a pod of that
// name exists or its ordinal is within the StatefulSet's replicas, whatever its node.

// gcBeforeDelete, when set (tests), runs after the final check and before the delete.
var gcBeforeDelete atomic.Pointer[func(kind, name string)]

// sharedGC is the shared-pool collector: a leader-only runnable whose scan judges every
// claim and endpoint from the caches (judge), advances the grace-period marks
// (advanceStale, pure) and frees what is due (free: final check, delete, report).
type sharedGC struct {
	client client.Client // the manager's (cached reads, writes)
	reader client.Reader // the API server itself, for the final check
	log    *slog.Logger
	m      *sharedMetrics
	event  eventFunc
	pol    gcPolicy
	grace  time.Duration
	every  time.Duration
	ready  func(context.Context) error // waits for the term's rebuild
	now    func() time.Time
	stale  map[string]*staleMark // by item key; touched by the scan goroutine only
}

type staleMark struct {
	rv     string
	since  time.Time
	reason string
}

func newSharedGC(t *term, m *sharedMetrics) *sharedGC {
	o := t.opts.SharedPools
	return &sharedGC{client: t.client, reader: t.reader, log: t.log, m: m, event: t.event,
		pol: gcPolicy{
			terminatingReady:    o.GCTerminatingOnReadyNode == nil || *o.GCTerminatingOnReadyNode,
			terminatingNotReady: o.GCTerminatingOnNotReadyNode == nil || *o.GCTerminatingOnNotReadyNode,
		},
		grace: o.GCGrace, every: o.GCInterval, ready: t.st.waitReady, now: time.Now, stale: map[string]*staleMark{}}
}

// Setup adds the collector to the term's manager (a leader-only runnable).
func (g *sharedGC) Setup(mgr manager.Manager) error { return mgr.Add(g) }

// Start runs the collector until ctx ends (a manager runnable: leader only).
func (g *sharedGC) Start(ctx context.Context) error {
	if err := g.ready(ctx); err != nil {
		return nil
	}
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		if err := g.scan(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("shared-pool GC scan failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// gcHolder is the pod an AddressClaim or AllotEndpoint says holds it.
type gcHolder struct {
	ns, pod, uid, node, sts string
	// vm is the KubeVirt VirtualMachine that owns the addresses (then the pod does not).
	vm string
}

func (h gcHolder) String() string { return h.ns + "/" + h.pod }

// gcItem is one claim or endpoint being judged.
type gcItem struct {
	kind string // gcKindClaim or gcKindEndpoint
	key  string
	obj  client.Object // the version judged (its UID and resourceVersion guard the delete)
	h    gcHolder
	// claims only
	iface string
	addr  netip.Addr
	pool  string
}

func claimItem(c *allotv1.AddressClaim) *gcItem {
	h := c.Spec.Holder
	a, _ := netip.ParseAddr(c.Spec.IP)
	return &gcItem{kind: gcKindClaim, key: "claim/" + c.Name, obj: c,
		h:     gcHolder{ns: h.Namespace, pod: h.Pod, uid: h.PodUID, node: h.Node, sts: h.StatefulSet, vm: h.VirtualMachine},
		iface: h.Interface, addr: a.Unmap(), pool: c.Spec.Pool}
}

func endpointItem(e *allotv1.AllotEndpoint) *gcItem {
	return &gcItem{kind: gcKindEndpoint, key: "aep/" + e.Namespace + "/" + e.Name, obj: e,
		h: gcHolder{ns: e.Namespace, pod: e.Name, uid: e.Spec.PodUID, node: e.Spec.Node, sts: e.Spec.StatefulSet, vm: e.Spec.VirtualMachine}}
}

// gcView answers the collector's questions from a reader: the cache for the scan, the API
// server itself for the final check. Not found is (nil, nil).
type gcView struct {
	r client.Reader
	// direct reads KubeVirt objects (always from the API server: the operator caches no
	// KubeVirt kind, which may not even be installed).
	direct client.Reader
	pol    gcPolicy
}

// gcPolicy are the collector's settings that change a verdict.
type gcPolicy struct {
	now func() time.Time // nil: time.Now
	// terminatingReady / terminatingNotReady: free pods stuck Terminating past their grace
	// period on a Ready / not Ready node (SharedPoolOptions.GCTerminatingOn...).
	terminatingReady, terminatingNotReady bool
}

// view answers from r (the cache for the scan, the API server for the final check).
func (g *sharedGC) view(r client.Reader) gcView {
	return gcView{r: r, direct: g.reader, pol: g.pol}
}

// terminatingOverdue says whether pod is being deleted and is past its grace period:
// deletionTimestamp (the time the kubelet was given to stop it) plus the grace period
// again, as Spiderpool waits, so a pod whose kubelet is merely slow is not cut short.
func (p gcPolicy) terminatingOverdue(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	deadline := pod.DeletionTimestamp.Time
	if g := pod.DeletionGracePeriodSeconds; g != nil && *g > 0 {
		deadline = deadline.Add(time.Duration(*g) * time.Second)
	}
	now := time.Now
	if p.now != nil {
		now = p.now
	}
	return now().After(deadline)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func getOrNil[T any, PT interface {
	*T
	client.Object
}](ctx context.Context, r client.Reader, ns, name string) (PT, error) {
	obj := PT(new(T))
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return obj, nil
}

func (v gcView) pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return getOrNil[corev1.Pod](ctx, v.r, ns, name)
}

func (v gcView) statefulSet(ctx context.Context, ns, name string) (*appsv1.StatefulSet, error) {
	return getOrNil[appsv1.StatefulSet](ctx, v.r, ns, name)
}

func (v gcView) node(ctx context.Context, name string) (*corev1.Node, error) {
	return getOrNil[corev1.Node](ctx, v.r, "", name)
}

// KubeVirt's kinds (https://kubevirt.io/api-reference/): a VirtualMachine owns the
// VirtualMachineInstance of the same name, which owns the virt-launcher pod.
var (
	gvkVM  = schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"}
	gvkVMI = schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachineInstance"}
)

// vmGone says whether neither a VirtualMachine nor a VirtualMachineInstance named name
// exists in ns. KubeVirt not installed (no such kind) counts as gone: no VM can exist.
func (v gcView) vmGone(ctx context.Context, ns, name string) (bool, error) {
	r := v.direct
	if r == nil {
		r = v.r
	}
	for _, gvk := range []schema.GroupVersionKind{gvkVM, gvkVMI} {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)
		switch {
		case err == nil:
			return false, nil
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		default:
			return false, fmt.Errorf("read %s %s/%s: %w", gvk.Kind, ns, name, err)
		}
	}
	return true, nil
}

func (v gcView) endpoint(ctx context.Context, ns, name string) (*allotv1.AllotEndpoint, error) {
	return getOrNil[allotv1.AllotEndpoint](ctx, v.r, ns, name)
}

// holderGone says why h no longer holds its addresses, or "" while it (may) still does. It
// reads only what the verdict needs; the verdicts themselves are pure (statefulSetVerdict,
// podVerdict, holderNodeVerdict).
func (v gcView) holderGone(ctx context.Context, h gcHolder) (string, error) {
	if h.ns == "" || h.pod == "" {
		return "", nil // not written by an agent: never guess
	}
	if h.vm != "" {
		// A VM's addresses outlive its virt-launcher pods (restart, live migration): they
		// go when the VM does (Spiderpool's kubevirt static IP).
		gone, err := v.vmGone(ctx, h.ns, h.vm)
		if err != nil || !gone {
			return "", err
		}
		return gcVMGone, nil
	}
	pod, err := v.pod(ctx, h.ns, h.pod)
	if err != nil {
		return "", err
	}
	if h.sts != "" {
		// A StatefulSet pod's addresses outlive the pod: any pod of that name (even on
		// another node, even one being deleted) takes them back.
		if pod != nil {
			return "", nil
		}
		set, err := v.statefulSet(ctx, h.ns, h.sts)
		if err != nil {
			return "", err
		}
		return statefulSetVerdict(h, set), nil
	}
	if reason, decided := podVerdict(h, pod); decided {
		return reason, nil
	}
	name := pod.Spec.NodeName
	if name == "" {
		name = h.node
	}
	var node *corev1.Node
	if name != "" {
		if node, err = v.node(ctx, name); err != nil {
			return "", err
		}
	}
	return holderNodeVerdict(pod, name != "", node, v.pol), nil
}

// statefulSetVerdict judges the holder of a StatefulSet pod whose pod is gone: kept while
// its ordinal is within the StatefulSet's replicas.
func statefulSetVerdict(h gcHolder, set *appsv1.StatefulSet) string {
	if set == nil {
		return gcStsGone
	}
	ord, ok := stsOrdinal(h.pod, h.sts)
	if !ok {
		return "" // not a name of this StatefulSet: keep
	}
	start, replicas := int64(0), int64(1)
	if set.Spec.Ordinals != nil {
		start = int64(set.Spec.Ordinals.Start)
	}
	if set.Spec.Replicas != nil {
		replicas = int64(*set.Spec.Replicas)
	}
	if ord < start || ord >= start+replicas {
		return gcStsScaledDown
	}
	return ""
}

// podVerdict judges a holder from its pod alone; decided is false when the node must be
// looked at too.
func podVerdict(h gcHolder, pod *corev1.Pod) (reason string, decided bool) {
	if pod == nil {
		return gcPodGone, true
	}
	if h.uid != "" && string(pod.UID) != h.uid {
		if ownedByStatefulSet(pod) {
			// The claim says "not a StatefulSet pod" but the pod of that name is one: the
			// agent will take the address back; keep it.
			return "", true
		}
		return gcPodReplaced, true
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return gcPodTerminated, true
	}
	return "", false
}

// holderNodeVerdict judges a live pod from its node (named: the pod or holder names one; node nil:
// it does not exist).
func holderNodeVerdict(pod *corev1.Pod, named bool, node *corev1.Node, pol gcPolicy) string {
	if named && node == nil {
		return gcNodeGone
	}
	// A pod stuck Terminating (its node down or NotReady, its kubelet gone) never gets a
	// CNI DEL: Spiderpool's GC of stateless terminating pods. StatefulSet pods returned
	// above: their addresses stay fixed.
	if pol.terminatingOverdue(pod) && !ownedByStatefulSet(pod) {
		ready := node != nil && nodeReady(node)
		if (ready && pol.terminatingReady) || (!ready && pol.terminatingNotReady) {
			return gcTerminating
		}
	}
	return ""
}

// stsOrdinal parses the ordinal of a StatefulSet pod name ("<set>-<n>").
func stsOrdinal(pod, set string) (int64, bool) {
	rest, ok := strings.CutPrefix(pod, set+"-")
	if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

func ownedByStatefulSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "StatefulSet" && strings.HasPrefix(o.APIVersion, "apps/") {
			return true
		}
	}
	return false
}

// dupKey groups claims of one pod interface and family.
type dupKey struct {
	uid, iface string
	v4         bool
}

// duplicates returns the claims of live holders that are extra: several claims for one
// (pod UID, interface, family) of which the pod's endpoint lists some, not these (an agent
// killed between creating a claim and writing the endpoint, then retried with another
// address). When the endpoint lists none of a group, nothing is decided.
func (v gcView) duplicates(ctx context.Context, live []*gcItem) (map[string]bool, error) {
	groups := map[dupKey][]*gcItem{}
	for _, it := range live {
		if it.h.uid == "" || !it.addr.IsValid() {
			continue
		}
		k := dupKey{uid: it.h.uid, iface: it.iface, v4: it.addr.Is4()}
		groups[k] = append(groups[k], it)
	}
	out := map[string]bool{}
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		ep, err := v.endpoint(ctx, g[0].h.ns, g[0].h.pod)
		if err != nil {
			return nil, err
		}
		listed := endpointAddrs(ep, g[0].h.uid, g[0].iface)
		n := 0
		for _, it := range g {
			if listed[it.addr] {
				n++
			}
		}
		if n == 0 {
			continue
		}
		for _, it := range g {
			if !listed[it.addr] {
				out[it.key] = true
			}
		}
	}
	return out, nil
}

// endpointAddrs is the set of addresses ep lists for interface iface, if ep belongs to uid.
func endpointAddrs(ep *allotv1.AllotEndpoint, uid, iface string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	if ep == nil || ep.Spec.PodUID != uid {
		return out
	}
	for _, i := range ep.Spec.Interfaces {
		if i.Interface != iface {
			continue
		}
		for _, ip := range i.IPs {
			if p, err := netip.ParsePrefix(ip.Address); err == nil {
				out[p.Addr().Unmap()] = true
			} else if a, err := netip.ParseAddr(ip.Address); err == nil {
				out[a.Unmap()] = true
			}
		}
	}
	return out
}

// judge returns the stale items of a listing, by key, with their reasons.
func (v gcView) judge(ctx context.Context, claims []*gcItem, endpoints []*gcItem) (map[string]string, error) {
	stale := map[string]string{}
	var live []*gcItem
	for _, it := range claims {
		r, err := v.holderGone(ctx, it.h)
		if err != nil {
			return nil, err
		}
		if r != "" {
			stale[it.key] = r
		} else {
			live = append(live, it)
		}
	}
	dups, err := v.duplicates(ctx, live)
	if err != nil {
		return nil, err
	}
	for k := range dups {
		stale[k] = gcDuplicate
	}
	for _, it := range endpoints {
		r, err := v.holderGone(ctx, it.h)
		if err != nil {
			return nil, err
		}
		if r != "" {
			stale[it.key] = r
		}
	}
	return stale, nil
}

// scan is one pass: judge from the caches, free what has been stale for the grace period.
func (g *sharedGC) scan(ctx context.Context) error {
	cis, eis, err := g.list(ctx)
	if err != nil {
		return err
	}
	stale, err := g.view(g.client).judge(ctx, cis, eis)
	if err != nil {
		return err
	}
	items := map[string]*gcItem{}
	for _, it := range append(slices.Clone(cis), eis...) {
		items[it.key] = it
	}
	var due []string
	g.stale, due = advanceStale(g.stale, stale, items, g.now(), g.grace)
	for _, key := range due {
		if ctx.Err() != nil {
			return nil
		}
		g.free(ctx, items[key])
	}
	g.m.gcStale.Set(float64(len(g.stale)))
	return nil
}

// list reads every claim and endpoint from the cache.
func (g *sharedGC) list(ctx context.Context) (claims, endpoints []*gcItem, err error) {
	var cl allotv1.AddressClaimList
	if err := g.client.List(ctx, &cl); err != nil {
		return nil, nil, fmt.Errorf("list AddressClaims: %w", err)
	}
	var eps allotv1.AllotEndpointList
	if err := g.client.List(ctx, &eps); err != nil {
		return nil, nil, fmt.Errorf("list AllotEndpoints: %w", err)
	}
	for i := range cl.Items {
		claims = append(claims, claimItem(&cl.Items[i]))
	}
	for i := range eps.Items {
		endpoints = append(endpoints, endpointItem(&eps.Items[i]))
	}
	return claims, endpoints, nil
}

// advanceStale is the grace-period bookkeeping of one scan: the marks of the items judged
// stale now (a new or changed item starts its wait again), and the keys due for freeing,
// claims before endpoints. Pure.
func advanceStale(prev map[string]*staleMark, stale map[string]string, items map[string]*gcItem,
	now time.Time, grace time.Duration) (map[string]*staleMark, []string) {
	next := make(map[string]*staleMark, len(stale))
	var due []string
	for key, reason := range stale {
		rv := items[key].obj.GetResourceVersion()
		m := prev[key]
		if m == nil || m.rv != rv {
			// New, or changed since it was first seen stale: the wait starts again.
			m = &staleMark{rv: rv, since: now}
		}
		m.reason = reason
		next[key] = m
		if now.Sub(m.since) >= grace {
			due = append(due, key)
		}
	}
	// Claims before endpoints: a StatefulSet pod scaled back up finds its endpoint and takes
	// the (still claimed) addresses back, or finds both gone; never an endpoint without claims
	// it could read as "mine".
	slices.SortFunc(due, func(a, b string) int {
		ka, kb := items[a].kind == gcKindEndpoint, items[b].kind == gcKindEndpoint
		if ka != kb {
			if ka {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	return next, due
}

// free re-checks it against the API server and deletes it with preconditions.
func (g *sharedGC) free(ctx context.Context, it *gcItem) {
	reason, err := g.finalCheck(ctx, it)
	if err != nil {
		g.log.Warn("shared-pool GC: final check failed; keeping", "object", it.key, "err", err)
		return
	}
	if reason == "" {
		g.log.Info("shared-pool GC: holder is back; keeping", "object", it.key, "holder", it.h.String())
		delete(g.stale, it.key)
		return
	}
	if f := gcBeforeDelete.Load(); f != nil {
		(*f)(it.kind, it.obj.GetName())
	}
	uid, rv := it.obj.GetUID(), it.obj.GetResourceVersion()
	err = g.client.Delete(ctx, it.obj, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	delete(g.stale, it.key)
	switch {
	case apierrors.IsConflict(err):
		// Changed since judged (an agent took it over): not freed; judged again afresh.
		g.m.gcRaces.WithLabelValues(it.kind).Inc()
		g.log.Info("shared-pool GC: object changed before delete; kept", "object", it.key, "reason", reason)
	case apierrors.IsNotFound(err):
	case err != nil:
		g.log.Warn("shared-pool GC: delete failed", "object", it.key, "err", err)
	default:
		g.report(ctx, it, reason)
	}
}

// finalCheck recomputes it's verdict from the API server itself; duplicates are judged
// within their group, so the group's endpoint is read again.
func (g *sharedGC) finalCheck(ctx context.Context, it *gcItem) (string, error) {
	direct := g.view(g.reader)
	reason, err := direct.holderGone(ctx, it.h)
	if err != nil || reason != "" || it.kind != gcKindClaim || g.stale[it.key].reason != gcDuplicate {
		return reason, err
	}
	ep, err := direct.endpoint(ctx, it.h.ns, it.h.pod)
	if err != nil {
		return "", err
	}
	listed := endpointAddrs(ep, it.h.uid, it.iface)
	if len(listed) > 0 && !listed[it.addr] && sameFamilyListed(listed, it.addr) {
		return gcDuplicate, nil
	}
	return "", nil
}

// report counts, logs and records an Event for a freed item.
func (g *sharedGC) report(ctx context.Context, it *gcItem, reason string) {
	if it.kind == gcKindClaim {
		g.m.claimsFreed.WithLabelValues(reason).Inc()
		g.log.Info("shared-pool GC: address freed", "address", it.addr, "pool", it.pool, "holder", it.h.String(),
			"interface", it.iface, "reason", reason)
		var pool allotv1.SharedIPPool
		target := client.Object(it.obj)
		if g.client.Get(ctx, types.NamespacedName{Name: it.pool}, &pool) == nil {
			target = &pool
		}
		g.event(target, corev1.EventTypeNormal, "AddressFreed", "GarbageCollect",
			"freed %s held by %s (%s): %s", it.addr, it.h, it.iface, gcReasonText(reason))
		return
	}
	g.m.endpointsFreed.WithLabelValues(reason).Inc()
	g.log.Info("shared-pool GC: endpoint deleted", "endpoint", it.h.String(), "reason", reason)
	g.event(it.obj, corev1.EventTypeNormal, "EndpointFreed", "GarbageCollect",
		"deleted AllotEndpoint %s: %s", it.h, gcReasonText(reason))
}

func sameFamilyListed(listed map[netip.Addr]bool, a netip.Addr) bool {
	for l := range listed {
		if l.Is4() == a.Is4() {
			return true
		}
	}
	return false
}

func gcReasonText(r string) string {
	switch r {
	case gcPodGone:
		return "the pod no longer exists"
	case gcPodReplaced:
		return "a new pod of that name (another UID) replaced the holder"
	case gcPodTerminated:
		return "the pod has terminated (Succeeded or Failed)"
	case gcNodeGone:
		return "the pod's node no longer exists"
	case gcStsGone:
		return "the StatefulSet no longer exists and no pod of that name does"
	case gcStsScaledDown:
		return "the StatefulSet was scaled down below this ordinal and the pod is gone"
	case gcDuplicate:
		return "a duplicate claim of the interface its endpoint does not list"
	case gcTerminating:
		return "the pod is stuck Terminating past its grace period"
	case gcVMGone:
		return "the KubeVirt VirtualMachine (and its VirtualMachineInstance) no longer exists"
	}
	return r
}
