package operator_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
)

const testGrace = 600 * time.Millisecond

// sharedOpts: multi-pool off (nothing of it here), a short GC grace.
func sharedOpts(o *operator.Options) {
	o.SharedPools.GCGrace = testGrace
	o.SharedPools.GCInterval = 100 * time.Millisecond
}

func sharedPool(name, subnet string, ips ...string) *allotv1.SharedIPPool {
	return &allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: allotv1.SharedIPPoolSpec{IPv4: &allotv1.SharedPoolFamily{Subnet: subnet, IPs: ips}}}
}

// claim creates an AddressClaim as an agent would.
func (h *harness) claim(ip, pool string, p *corev1.Pod, iface, sts string) *allotv1.AddressClaim {
	h.t.Helper()
	a := netip.MustParseAddr(ip)
	c := &allotv1.AddressClaim{
		ObjectMeta: metav1.ObjectMeta{Name: allotk8s.ClaimName(a), Labels: map[string]string{
			allotv1.LabelClaimPool: allotk8s.LabelValue(pool), allotv1.LabelClaimNode: p.Spec.NodeName,
			allotv1.LabelClaimNamespace: p.Namespace, allotv1.LabelClaimPod: allotk8s.LabelValue(p.Name)}},
		Spec: allotv1.AddressClaimSpec{IP: ip, Pool: pool, Holder: allotv1.AddressHolder{
			Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID), Node: p.Spec.NodeName,
			ContainerID: "c-" + string(p.UID), Interface: iface, StatefulSet: sts}},
	}
	h.create(c)
	return c
}

func (h *harness) endpoint(p *corev1.Pod, sts string, ifaces map[string][]string) *allotv1.AllotEndpoint {
	h.t.Helper()
	e := &allotv1.AllotEndpoint{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		Spec: allotv1.AllotEndpointSpec{PodUID: string(p.UID), Node: p.Spec.NodeName, StatefulSet: sts}}
	for _, name := range []string{"eth0", "net1"} {
		ips, ok := ifaces[name]
		if !ok {
			continue
		}
		i := allotv1.EndpointInterface{Interface: name, ContainerID: "c-" + string(p.UID)}
		for _, ip := range ips {
			i.IPs = append(i.IPs, allotv1.EndpointIP{Family: "ipv4", Address: ip + "/24", Pool: "p"})
		}
		e.Spec.Interfaces = append(e.Spec.Interfaces, i)
	}
	h.create(e)
	return e
}

func (h *harness) pod(name, nodeName string, set *appsv1.StatefulSet) *corev1.Pod {
	h.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	if set != nil {
		p.Labels = set.Spec.Selector.MatchLabels
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: set.Name, UID: set.UID, Controller: ptrTo(true)}}
	}
	h.create(p)
	return p
}

func ptrTo[T any](v T) *T { return &v }

func (h *harness) statefulSet(name string, replicas int32) *appsv1.StatefulSet {
	h.t.Helper()
	labels := map[string]string{"app": name}
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, ServiceName: name,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}}}
	h.create(s)
	return s
}

func (h *harness) deleteNow(o client.Object) {
	h.t.Helper()
	if err := h.c.Delete(h.ctx, o, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		h.t.Fatalf("delete %s: %v", o.GetName(), err)
	}
}

func (h *harness) exists(o client.Object) bool {
	h.t.Helper()
	err := h.c.Get(h.ctx, client.ObjectKeyFromObject(o), o)
	if err != nil && !apierrors.IsNotFound(err) {
		h.t.Fatal(err)
	}
	return err == nil
}

func (h *harness) waitGone(what string, objs ...client.Object) {
	h.t.Helper()
	eventually(h.t, waitFor, what, func() error {
		for _, o := range objs {
			if h.exists(o) {
				return fmt.Errorf("%T %s still exists", o, o.GetName())
			}
		}
		return nil
	})
}

func (h *harness) mustExist(what string, objs ...client.Object) {
	h.t.Helper()
	for _, o := range objs {
		if !h.exists(o) {
			h.t.Errorf("%s: %T %s was freed", what, o, o.GetName())
		}
	}
}

func (h *harness) getSharedPool(name string) *allotv1.SharedIPPool {
	h.t.Helper()
	var p allotv1.SharedIPPool
	if err := h.c.Get(h.ctx, client.ObjectKey{Name: name}, &p); err != nil {
		h.t.Fatal(err)
	}
	return &p
}

// TestSharedPoolStatus: counts, Exhausted, AddressConflict for the newer of two overlapping
// pools, an address removed while held, and a deletion held by the finalizer until the last
// claim is gone.
func TestSharedPoolStatus(t *testing.T) {
	h := newHarness(t)
	h.create(node("n1"))
	h.create(sharedPool("p", "10.0.0.0/24", "10.0.0.10-10.0.0.13"),
		&allotv1.ReservedIP{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: allotv1.ReservedIPSpec{IPs: []string{"10.0.0.13"}}})
	r := h.run("op", sharedOpts)
	r.waitLeader(t, waitFor)
	a := h.pod("a", "n1", nil)
	c1 := h.claim("10.0.0.10", "p", a, "eth0", "")
	h.claim("10.0.0.11", "p", a, "net1", "")
	status := func(total, allocated int64, conds ...string) func() error {
		return func() error {
			p := h.getSharedPool("p")
			s := p.Status.IPv4
			if s == nil || s.TotalIPs != total || s.AllocatedIPs != allocated {
				return fmt.Errorf("ipv4 status %+v; want total %d allocated %d", s, total, allocated)
			}
			if p.Status.ObservedGeneration != p.Generation {
				return fmt.Errorf("observedGeneration %d; generation %d", p.Status.ObservedGeneration, p.Generation)
			}
			for _, c := range conds {
				typ, reason, _ := strings.Cut(c, "=")
				got := condition(p.Status.Conditions, typ)
				if got == nil || got.Reason != reason {
					return fmt.Errorf("condition %s: %+v; want reason %s", typ, got, reason)
				}
			}
			return nil
		}
	}
	eventually(t, waitFor, "status counts", status(3, 2, "Ready=Valid"))
	if p := h.getSharedPool("p"); !strings.Contains(strings.Join(p.Finalizers, ","), allotv1.FinalizerSharedPoolInUse) {
		t.Fatalf("finalizers %v", p.Finalizers)
	}
	h.claim("10.0.0.12", "p", a, "net2", "")
	eventually(t, waitFor, "exhausted", status(3, 3, "Exhausted="+allotv1.ReasonPoolExhausted))

	// A second pool sharing an address (no webhook here): the newer one is marked.
	h.create(sharedPool("q", "10.0.0.0/24", "10.0.0.12-10.0.0.20"))
	eventually(t, waitFor, "conflict", func() error {
		q := h.getSharedPool("q")
		c := condition(q.Status.Conditions, allotv1.ConditionAddressConflict)
		if c == nil || !strings.Contains(c.Message, `"p"`) {
			return fmt.Errorf("q conditions %+v", q.Status.Conditions)
		}
		if condition(h.getSharedPool("p").Status.Conditions, allotv1.ConditionAddressConflict) != nil {
			return errors.New("the older pool p is marked too")
		}
		return nil
	})
	h.deleteNow(h.getSharedPool("q"))

	// Removing a held address: the claim stays and the pool says so.
	// The operator writes the pool's status meanwhile: retry on conflict.
	eventually(t, waitFor, "shrink pool p", func() error {
		p := h.getSharedPool("p")
		p.Spec.IPv4.IPs = []string{"10.0.0.11-10.0.0.13"}
		return h.c.Update(h.ctx, p)
	})
	eventually(t, waitFor, "removal refused", func() error {
		p := h.getSharedPool("p")
		c := condition(p.Status.Conditions, allotv1.ConditionReady)
		if c == nil || c.Reason != allotv1.ReasonAddressRemovalRefused || !strings.Contains(c.Message, "10.0.0.10 held by default/a") {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	h.mustExist("held address removed from the spec", c1)

	// Deletion waits for the claims.
	h.deleteNow(h.getSharedPool("p"))
	eventually(t, waitFor, "deletion refused", status(2, 3, "DeletionRefused="+allotv1.ReasonInUse))
	var claims allotv1.AddressClaimList
	if err := h.c.List(h.ctx, &claims); err != nil {
		t.Fatal(err)
	}
	for i := range claims.Items {
		h.deleteNow(&claims.Items[i])
	}
	h.waitGone("pool deleted once its claims are gone", &allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}})
}

func node(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

// TestSharedGC: each reason to free, each reason to keep, on the real API server; nothing is
// freed before the grace period, and live holders keep everything.
func TestSharedGC(t *testing.T) {
	h := newHarness(t)
	h.create(node("n1"), node("n2"), node("n3"), sharedPool("p", "10.0.0.0/24", "10.0.0.10-10.0.0.250"))
	r := h.run("op", sharedOpts)
	r.waitLeader(t, waitFor)

	// Kept throughout.
	live := h.pod("live", "n1", nil)
	liveC := h.claim("10.0.0.10", "p", live, "eth0", "")
	liveE := h.endpoint(live, "", map[string][]string{"eth0": {"10.0.0.10"}})
	// Freed: pod deleted (claim and endpoint).
	gone := h.pod("gone", "n1", nil)
	goneC := h.claim("10.0.0.11", "p", gone, "eth0", "")
	goneE := h.endpoint(gone, "", map[string][]string{"eth0": {"10.0.0.11"}})
	// Freed: pod recreated with a new UID (not a StatefulSet pod).
	re := h.pod("re", "n1", nil)
	reC := h.claim("10.0.0.12", "p", re, "eth0", "")
	// Freed: pod Succeeded.
	done := h.pod("done", "n1", nil)
	doneC := h.claim("10.0.0.13", "p", done, "eth0", "")
	// Freed: node deleted under a running (non-StatefulSet) pod.
	orphan := h.pod("orphan", "n2", nil)
	orphanC := h.claim("10.0.0.14", "p", orphan, "eth0", "")
	// Duplicate: two claims for live's sibling interface, the endpoint lists one.
	dup := h.pod("dup", "n1", nil)
	dupKeep := h.claim("10.0.0.15", "p", dup, "eth0", "")
	dupFree := h.claim("10.0.0.16", "p", dup, "eth0", "")
	h.endpoint(dup, "", map[string][]string{"eth0": {"10.0.0.15"}})
	// StatefulSet web, 3 replicas, then scaled to 1.
	web := h.statefulSet("web", 3)
	var webC []*allotv1.AddressClaim
	var webE []*allotv1.AllotEndpoint
	var webP []*corev1.Pod
	for i := range 3 {
		p := h.pod(fmt.Sprintf("web-%d", i), "n3", web)
		webP = append(webP, p)
		ip := fmt.Sprintf("10.0.0.%d", 20+i)
		webC = append(webC, h.claim(ip, "p", p, "eth0", "web"))
		webE = append(webE, h.endpoint(p, "web", map[string][]string{"eth0": {ip}}))
	}
	// StatefulSet db: its pod is deleted and recreated on another node, and the old node goes.
	db := h.statefulSet("db", 1)
	db0 := h.pod("db-0", "n2", db)
	dbC := h.claim("10.0.0.30", "p", db0, "eth0", "db")
	dbE := h.endpoint(db0, "db", map[string][]string{"eth0": {"10.0.0.30"}})

	// Now make them stale.
	start := time.Now()
	h.deleteNow(gone)
	h.deleteNow(re)
	h.pod("re", "n1", nil)
	done.Status.Phase = corev1.PodSucceeded
	if err := h.c.Status().Update(h.ctx, done); err != nil {
		t.Fatal(err)
	}
	h.deleteNow(node("n2"))
	web.Spec.Replicas = ptrTo[int32](1)
	if err := h.c.Update(h.ctx, web); err != nil {
		t.Fatal(err)
	}
	h.deleteNow(webP[1])
	h.deleteNow(webP[2])
	h.deleteNow(db0)
	h.pod("db-0", "n1", db) // recreated by the (absent) StatefulSet controller elsewhere

	h.waitGone("stale claims and endpoints freed", goneC, goneE, reC, doneC, orphanC, dupFree, webC[1], webC[2], webE[1], webE[2])
	if el := time.Since(start); el < testGrace {
		t.Fatalf("freed after %v, before the grace period %v", el, testGrace)
	}
	// A few more scans: nothing in use goes.
	time.Sleep(3 * testGrace) // sleep: checks nothing happens over real scans
	h.mustExist("in use", liveC, liveE, dupKeep, webC[0], webE[0], dbC, dbE)
	for reason, want := range map[string]float64{"pod_gone": 1, "pod_replaced": 1, "pod_terminated": 1, "node_gone": 1,
		"duplicate": 1, "statefulset_scaled_down": 2} {
		if got := metricValue(t, r, "allot_operator_shared_claims_freed_total", "reason", reason); got != want {
			t.Errorf("claims freed for %s: %v; want %v", reason, got, want)
		}
	}
	h.waitEvent(waitFor, "p", "AddressFreed", "10.0.0.11 held by default/gone")

	// The StatefulSet deleted: its remaining claim and endpoint go once its pod is gone.
	h.deleteNow(web)
	time.Sleep(2 * testGrace) // sleep: checks nothing happens over real scans
	h.mustExist("StatefulSet gone but its pod still there", webC[0])
	h.deleteNow(webP[0])
	h.waitGone("StatefulSet and pod gone", webC[0], webE[0])
}

// TestSharedGCRace: the collector has decided to free a StatefulSet pod's claim when the
// StatefulSet is scaled back up and the recreated pod's agent takes the claim over: the
// delete's precondition fails, the claim stays with the new pod and is not freed later.
func TestSharedGCRace(t *testing.T) {
	h := newHarness(t)
	h.create(node("n1"), sharedPool("p", "10.0.0.0/24", "10.0.0.10-10.0.0.250"))
	web := h.statefulSet("web", 1)
	p1 := h.pod("web-1", "n1", web) // ordinal 1 of a 1-replica set: stale once the pod goes
	c := h.claim("10.0.0.40", "p", p1, "eth0", "web")
	took := make(chan error, 1)
	restore := operator.SetGCBeforeDelete(func(kind, name string) {
		if name != c.Name {
			return
		}
		took <- func() error {
			var s appsv1.StatefulSet
			if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(web), &s); err != nil {
				return err
			}
			s.Spec.Replicas = ptrTo[int32](2)
			if err := h.c.Update(h.ctx, &s); err != nil {
				return err
			}
			np := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: web.Spec.Selector.MatchLabels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: web.Name, UID: web.UID, Controller: ptrTo(true)}}},
				Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
			if err := h.c.Create(h.ctx, np); err != nil {
				return err
			}
			var cur allotv1.AddressClaim
			if err := h.c.Get(h.ctx, client.ObjectKey{Name: c.Name}, &cur); err != nil {
				return err
			}
			cur.Spec.Holder.PodUID = string(np.UID)
			return h.c.Update(h.ctx, &cur)
		}()
	})
	t.Cleanup(restore)
	h.deleteNow(p1)
	r := h.run("op", sharedOpts)
	r.waitLeader(t, waitFor)
	select {
	case err := <-took:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitFor):
		t.Fatal("the collector never decided to free the claim")
	}
	eventually(t, waitFor, "precondition failure counted", func() error {
		if v := metricValue(t, r, "allot_operator_shared_gc_precondition_failed_total", "kind", "addressclaim"); v != 1 {
			return fmt.Errorf("precondition failures %v", v)
		}
		return nil
	})
	time.Sleep(3 * testGrace) // sleep: checks nothing happens over real scans
	var cur allotv1.AddressClaim
	if err := h.c.Get(h.ctx, client.ObjectKey{Name: c.Name}, &cur); err != nil {
		t.Fatalf("claim taken over by the recreated pod was freed: %v", err)
	}
	if cur.Spec.Holder.PodUID == string(p1.UID) {
		t.Fatal("claim still names the old pod")
	}
	if got := metricValue(t, r, "allot_operator_shared_claims_freed_total", "", ""); got != 0 {
		t.Fatalf("%v claims freed; want 0", got)
	}
}

// TestSharedGCTerminating: pods stuck Terminating past their grace period (no kubelet
// confirms the delete, as when their node is down) lose their addresses, on a Ready and on a
// NotReady node (Spiderpool's GC of stateless terminating pods); a StatefulSet pod stuck the
// same way, and a pod still within its grace period, keep theirs.
func TestSharedGCTerminating(t *testing.T) {
	h := newHarness(t)
	ready, notReady := node("ready"), node("notready")
	h.create(ready, notReady, sharedPool("p", "10.1.0.0/24", "10.1.0.10-10.1.0.250"))
	for n, st := range map[*corev1.Node]corev1.ConditionStatus{ready: corev1.ConditionTrue, notReady: corev1.ConditionFalse} {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, Reason: "Test", LastHeartbeatTime: metav1.Now()}}
		if err := h.c.Status().Update(h.ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	r := h.run("op", sharedOpts)
	r.waitLeader(t, waitFor)

	onReady := h.pod("on-ready", "ready", nil)
	onReadyC := h.claim("10.1.0.10", "p", onReady, "eth0", "")
	onReadyE := h.endpoint(onReady, "", map[string][]string{"eth0": {"10.1.0.10"}})
	onNotReady := h.pod("on-notready", "notready", nil)
	onNotReadyC := h.claim("10.1.0.11", "p", onNotReady, "eth0", "")
	web := h.statefulSet("web", 1)
	web0 := h.pod("web-0", "notready", web)
	webC := h.claim("10.1.0.12", "p", web0, "eth0", "web")
	webE := h.endpoint(web0, "web", map[string][]string{"eth0": {"10.1.0.12"}})
	patient := h.pod("patient", "notready", nil)
	patientC := h.claim("10.1.0.13", "p", patient, "eth0", "")

	// Bound pods stay Terminating until a kubelet confirms; none runs here.
	for o, grace := range map[*corev1.Pod]int64{onReady: 1, onNotReady: 1, web0: 1, patient: 3600} {
		if err := h.c.Delete(h.ctx, o, client.GracePeriodSeconds(grace)); err != nil {
			t.Fatal(err)
		}
	}
	if !h.exists(onReady) || onReady.DeletionTimestamp == nil {
		t.Fatalf("pod %s is not Terminating: %+v", onReady.Name, onReady.ObjectMeta)
	}
	overdue := onReady.DeletionTimestamp.Add(time.Second) // deletionTimestamp + the grace period again
	h.waitGone("terminating pods' claims and endpoint freed", onReadyC, onReadyE, onNotReadyC)
	if now := time.Now(); now.Before(overdue.Add(testGrace)) {
		t.Errorf("freed at %v: before deletionTimestamp + grace period (%v) + GC grace %v", now, overdue, testGrace)
	}
	// Judged in the same scans as the freed ones.
	h.mustExist("StatefulSet pod and pod within its grace period", webC, webE, patientC)
	if got := metricValue(t, r, "allot_operator_shared_claims_freed_total", "reason", "pod_terminating_overdue"); got != 2 {
		t.Errorf("claims freed as terminating: %v; want 2", got)
	}
	h.waitEvent(waitFor, "p", "AddressFreed", "10.1.0.10 held by default/on-ready")
}
