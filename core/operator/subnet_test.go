package operator_test

// SpiderSubnet on a real API server: workloads annotated ipam.spidernet.io/subnet get auto
// pools cut from an AllotSubnet, resized with their replicas and reclaimed with them.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/allot-ipam/allot/core/addrset"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/allot-ipam/allot/sdk/policy"
)

// subnetOpts: a quick resync; the address GC waits longer than any test here, so the claims
// a test makes stand for pods holding addresses until the test frees them.
func subnetOpts(o *operator.Options) {
	o.SharedPools.GCGrace = 10 * time.Minute
	o.SharedPools.SubnetResync = 200 * time.Millisecond
}

func testSubnet(name, cidr string, ips ...string) *allotv1.AllotSubnet {
	return &allotv1.AllotSubnet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: allotv1.AllotSubnetSpec{
		IPv4: &allotv1.SubnetFamily{Subnet: cidr, IPs: ips, Gateway: netip.MustParsePrefix(cidr).Addr().Next().String(),
			Routes: []allotv1.RouteSpec{{Dst: "10.96.0.0/12"}}}}}
}

func subnetTemplate(app string, ann map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}, Annotations: ann},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
}

func (h *harness) deployment(name string, replicas int32, ann map[string]string) *appsv1.Deployment {
	h.t.Helper()
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: subnetTemplate(name, ann)}}
	h.create(d)
	return d
}

func (h *harness) scale(o client.Object, replicas int32) {
	h.t.Helper()
	eventually(h.t, waitFor, "scale "+o.GetName(), func() error {
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return err
		}
		switch w := o.(type) {
		case *appsv1.Deployment:
			w.Spec.Replicas = &replicas
		case *appsv1.StatefulSet:
			w.Spec.Replicas = &replicas
		case *appsv1.ReplicaSet:
			w.Spec.Replicas = &replicas
		}
		return h.c.Update(h.ctx, o)
	})
}

// autoPool is the pool the operator made for application (Kind/namespace/name), nil if none.
func (h *harness) autoPool(application string) *allotv1.SharedIPPool {
	h.t.Helper()
	var l allotv1.SharedIPPoolList
	if err := h.c.List(h.ctx, &l, client.MatchingLabels{allotv1.LabelAutoPool: "true"}); err != nil {
		h.t.Fatal(err)
	}
	for i := range l.Items {
		if l.Items[i].Annotations[allotv1.AnnotationAutoPoolApp] == application {
			return &l.Items[i]
		}
	}
	return nil
}

// waitAutoPool waits until application's pool holds size addresses and returns it.
func (h *harness) waitAutoPool(application string, size uint64) *allotv1.SharedIPPool {
	h.t.Helper()
	var p *allotv1.SharedIPPool
	eventually(h.t, waitFor, fmt.Sprintf("pool of %s with %d addresses", application, size), func() error {
		p = h.autoPool(application)
		if p == nil {
			return fmt.Errorf("no pool")
		}
		if got := poolIPs(h.t, p).Size(); got != size {
			return fmt.Errorf("pool %s has %d addresses %v", p.Name, got, p.Spec.IPv4.IPs)
		}
		return nil
	})
	return p
}

func poolIPs(t *testing.T, p *allotv1.SharedIPPool) addrset.Set {
	t.Helper()
	s, err := addrset.Parse("ips", policy.IPv4, p.Spec.IPv4.IPs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (h *harness) getSubnet(name string) *allotv1.AllotSubnet {
	h.t.Helper()
	var s allotv1.AllotSubnet
	if err := h.c.Get(h.ctx, client.ObjectKey{Name: name}, &s); err != nil {
		h.t.Fatal(err)
	}
	return &s
}

// allocation is the subnet's record for pool, nil if none.
func allocation(s *allotv1.AllotSubnet, pool string) *allotv1.SubnetAllocation {
	for i := range s.Status.Allocations {
		if s.Status.Allocations[i].Pool == pool {
			return &s.Status.Allocations[i]
		}
	}
	return nil
}

// checkDisjoint fails if two allocations of the subnet share an address or one lies outside
// the subnet's ips, and checks the counts.
func checkSubnet(t *testing.T, s *allotv1.AllotSubnet, ips addrset.Set) {
	t.Helper()
	var seen []addrset.Set
	var n int64
	for _, al := range s.Status.Allocations {
		set, err := addrset.Parse("ips", policy.IPv4, al.IPs)
		if err != nil {
			t.Fatal(err)
		}
		if !set.Subtract(ips).Empty() {
			t.Errorf("allocation of %s: %v lies outside the subnet's ips %v", al.Pool, al.IPs, ips)
		}
		for _, o := range seen {
			if set.Overlaps(o) {
				t.Errorf("allocation of %s %v overlaps %v", al.Pool, al.IPs, o)
			}
		}
		seen = append(seen, set)
		n += int64(set.Size())
	}
	if s.Status.IPv4 == nil || s.Status.IPv4.AllocatedIPs != n || s.Status.IPv4.TotalIPs != int64(ips.Size()) {
		t.Errorf("status.ipv4 = %+v, want allocated %d total %d", s.Status.IPv4, n, ips.Size())
	}
}

func TestSubnetAutoPools(t *testing.T) {
	h := newHarness(t)
	subnetIPs := addrset.FromRanges(policy.IPv4, []addrset.Range{{From: netip.MustParseAddr("10.50.0.10"), To: netip.MustParseAddr("10.50.0.60")}})
	h.create(testSubnet("sn", "10.50.0.0/24", "10.50.0.10-10.50.0.60"), node("node-1"))
	h.run("op", subnetOpts).waitLeader(t, 30*time.Second)
	eventually(t, waitFor, "subnet counts", func() error {
		s := h.getSubnet("sn")
		if s.Status.IPv4 == nil || s.Status.IPv4.TotalIPs != 51 {
			return fmt.Errorf("status %+v", s.Status)
		}
		return nil
	})

	ann := map[string]string{"ipam.spidernet.io/subnet": `{"ipv4":["sn"]}`}
	web := h.deployment("web", 2, ann)

	t.Run("created with the default size (replicas + 1)", func(t *testing.T) {
		p := h.waitAutoPool("Deployment/default/web", 3)
		f := p.Spec.IPv4
		if f.Subnet != "10.50.0.0/24" || f.Gateway != "10.50.0.1" || len(f.Routes) != 1 || f.Routes[0].Dst != "10.96.0.0/12" {
			t.Errorf("pool family %+v: want the subnet's CIDR, gateway and routes", f)
		}
		if !poolIPs(t, p).Subtract(subnetIPs).Empty() {
			t.Errorf("pool ips %v outside the subnet's ips", f.IPs)
		}
		if p.Labels[allotv1.LabelSubnet] != "sn" || !slices.Equal(p.Spec.NamespaceName, []string{"default"}) ||
			p.Spec.PodAffinity == nil || p.Spec.PodAffinity.MatchLabels["app"] != "web" {
			t.Errorf("pool %s: labels %v namespaceName %v podAffinity %v: want it tied to the application", p.Name, p.Labels, p.Spec.NamespaceName, p.Spec.PodAffinity)
		}
		eventually(t, waitFor, "allocation recorded", func() error {
			s := h.getSubnet("sn")
			al := allocation(s, p.Name)
			if al == nil || al.Application != "Deployment/default/web" || !slices.Equal(al.IPs, f.IPs) {
				return fmt.Errorf("allocations %+v", s.Status.Allocations)
			}
			checkSubnet(t, s, subnetIPs)
			return nil
		})
	})

	t.Run("scale up keeps the addresses", func(t *testing.T) {
		before := poolIPs(t, h.autoPool("Deployment/default/web"))
		h.scale(web, 5)
		after := poolIPs(t, h.waitAutoPool("Deployment/default/web", 6))
		if !before.Subtract(after).Empty() {
			t.Errorf("scale up moved addresses: %v -> %v", before, after)
		}
	})

	t.Run("scale down keeps the addresses pods hold", func(t *testing.T) {
		p := h.autoPool("Deployment/default/web")
		ips := poolIPs(t, p)
		lo, _ := ips.Nth(0)
		hi, _ := ips.Nth(ips.Size() - 1)
		pod1, pod2 := h.pod("web-held-1", "node-1", nil), h.pod("web-held-2", "node-1", nil)
		held := []client.Object{h.claim(lo.String(), p.Name, pod1, "eth0", ""), h.claim(hi.String(), p.Name, pod2, "eth0", "")}
		defer h.mustExist("claims of the scaled-down pool", held...)
		h.scale(web, 1) // wants 2: exactly the two held ones
		got := poolIPs(t, h.waitAutoPool("Deployment/default/web", 2))
		if !got.Contains(lo) || !got.Contains(hi) {
			t.Errorf("after scale down the pool holds %v; it dropped a held address (%s, %s)", got, lo, hi)
		}
		eventually(t, waitFor, "addresses given back", func() error {
			s := h.getSubnet("sn")
			al := allocation(s, p.Name)
			if al == nil || !slices.Equal(al.IPs, got.Strings()) {
				return fmt.Errorf("allocation %+v, want %v", al, got)
			}
			checkSubnet(t, s, subnetIPs)
			return nil
		})
	})

	t.Run("two workloads get disjoint pools", func(t *testing.T) {
		n := int32(3)
		db := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"},
			Spec: appsv1.StatefulSetSpec{Replicas: &n, ServiceName: "db", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
				Template: subnetTemplate("db", map[string]string{"ipam.spidernet.io/subnets": `[{"interface":"eth0","ipv4":["sn"]}]`,
					"ipam.spidernet.io/ippool-ip-number": "4"})}}
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cache"},
			Spec: appsv1.ReplicaSetSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}},
				Template: subnetTemplate("cache", map[string]string{"ipam.spidernet.io/subnet": `{"ipv4":["sn"]}`,
					"ipam.spidernet.io/ippool-ip-number": "+2"})}}
		h.create(db, rs)
		a := poolIPs(t, h.waitAutoPool("StatefulSet/default/db", 4))
		b := poolIPs(t, h.waitAutoPool("ReplicaSet/default/cache", 5))
		c := poolIPs(t, h.autoPool("Deployment/default/web"))
		if a.Overlaps(b) || a.Overlaps(c) || b.Overlaps(c) {
			t.Errorf("pools overlap: db %v, cache %v, web %v", a, b, c)
		}
		eventually(t, waitFor, "three allocations", func() error {
			s := h.getSubnet("sn")
			if len(s.Status.Allocations) != 3 {
				return fmt.Errorf("allocations %+v", s.Status.Allocations)
			}
			checkSubnet(t, s, subnetIPs)
			return nil
		})
	})

	t.Run("deleted workload: pool reclaimed once its addresses are freed", func(t *testing.T) {
		p := h.autoPool("Deployment/default/web")
		eventually(t, waitFor, "pool protected by its finalizer", func() error {
			if cur := h.getSharedPool(p.Name); !slices.Contains(cur.Finalizers, allotv1.FinalizerSharedPoolInUse) {
				return fmt.Errorf("pool %s finalizers %v", p.Name, cur.Finalizers)
			}
			return nil
		})
		h.deleteNow(web)
		eventually(t, waitFor, "pool deleted", func() error {
			cur := h.getSharedPool(p.Name)
			if cur.DeletionTimestamp == nil {
				return fmt.Errorf("pool %s not being deleted", p.Name)
			}
			return nil
		})
		// Claims hold the pool (finalizer) and its allocation: nothing else may get them.
		if al := allocation(h.getSubnet("sn"), p.Name); al == nil {
			t.Fatalf("allocation of %s dropped while claims of it exist", p.Name)
		}
		var cl allotv1.AddressClaimList
		if err := h.c.List(h.ctx, &cl); err != nil {
			t.Fatal(err)
		}
		for i := range cl.Items {
			if cl.Items[i].Spec.Pool == p.Name {
				h.deleteNow(&cl.Items[i])
			}
		}
		h.waitGone("reclaimed pool", p)
		eventually(t, waitFor, "allocation dropped", func() error {
			if al := allocation(h.getSubnet("sn"), p.Name); al != nil {
				return fmt.Errorf("allocation %+v still there", al)
			}
			return nil
		})
	})

	t.Run("ippool-reclaim false keeps the pool for the next workload of that name", func(t *testing.T) {
		keepAnn := map[string]string{"ipam.spidernet.io/subnet": `{"ipv4":["sn"]}`, "ipam.spidernet.io/ippool-reclaim": "false",
			"ipam.spidernet.io/ippool-ip-number": "2"}
		d := h.deployment("keep", 1, keepAnn)
		p := h.waitAutoPool("Deployment/default/keep", 2)
		h.deleteNow(d)
		h.waitGone("deployment", d)
		// Give the controller resyncs to (wrongly) reclaim it.
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			cur := h.getSharedPool(p.Name)
			if cur.DeletionTimestamp != nil {
				t.Fatalf("pool %s of a workload with ippool-reclaim false is being deleted", p.Name)
			}
			if allocation(h.getSubnet("sn"), p.Name) == nil {
				t.Fatalf("allocation of kept pool %s dropped", p.Name)
			}
			time.Sleep(200 * time.Millisecond) // sleep: checks nothing happens over real resyncs
		}
		d2 := h.deployment("keep", 1, keepAnn)
		eventually(t, waitFor, "pool adopted", func() error {
			cur := h.getSharedPool(p.Name)
			if cur.Annotations[allotv1.AnnotationAutoPoolAppUID] != string(d2.UID) {
				return fmt.Errorf("pool %s belongs to UID %s, want %s", p.Name, cur.Annotations[allotv1.AnnotationAutoPoolAppUID], d2.UID)
			}
			if !slices.Equal(cur.Spec.IPv4.IPs, p.Spec.IPv4.IPs) {
				return fmt.Errorf("pool moved: %v -> %v", p.Spec.IPv4.IPs, cur.Spec.IPv4.IPs)
			}
			return nil
		})
	})

	t.Run("too few free addresses: no partial pool", func(t *testing.T) {
		h.deployment("huge", 100, ann)
		eventually(t, waitFor, "SubnetExhausted event", func() error {
			var evs corev1.EventList
			if err := h.c.List(h.ctx, &evs, client.InNamespace("default")); err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.Reason == "SubnetExhausted" && e.InvolvedObject.Name == "huge" {
					return nil
				}
			}
			return fmt.Errorf("no SubnetExhausted event for huge")
		})
		if p := h.autoPool("Deployment/default/huge"); p != nil {
			t.Errorf("pool %s made for a workload the subnet cannot hold", p.Name)
		}
		checkSubnet(t, h.getSubnet("sn"), subnetIPs)
	})
}

// Two cutters at once, each through its own client (as two operator replicas would), never
// get overlapping addresses: every cut is a status write with the subnet's resourceVersion.
func TestSubnetConcurrentCuts(t *testing.T) {
	h := newHarness(t)
	h.create(testSubnet("race", "10.51.0.0/24", "10.51.0.10-10.51.0.209"))
	const cutters, each = 10, 20
	var wg sync.WaitGroup
	got := make([][]string, cutters)
	errs := make([]error, cutters)
	for i := range cutters {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
			defer cancel()
			got[i], errs[i] = operator.SubnetCut(ctx, h.env.Config, "race", fmt.Sprintf("pool-%d", i), each)
		})
	}
	wg.Wait()
	var all []addrset.Set
	for i := range cutters {
		if errs[i] != nil {
			t.Fatalf("cutter %d: %v", i, errs[i])
		}
		s, err := addrset.Parse("ips", policy.IPv4, got[i])
		if err != nil {
			t.Fatal(err)
		}
		if s.Size() != each {
			t.Errorf("cutter %d got %d addresses, want %d", i, s.Size(), each)
		}
		for j, o := range all {
			if s.Overlaps(o) {
				t.Errorf("cutters %d and %d got overlapping addresses: %v and %v", i, j, got[i], got[j])
			}
		}
		all = append(all, s)
	}
	s := h.getSubnet("race")
	if len(s.Status.Allocations) != cutters {
		t.Errorf("subnet records %d allocations, want %d", len(s.Status.Allocations), cutters)
	}
	checkSubnet(t, s, addrset.FromRanges(policy.IPv4, []addrset.Range{{From: netip.MustParseAddr("10.51.0.10"), To: netip.MustParseAddr("10.51.0.209")}}))
	// Full: one more cut fails, naming the subnet.
	if _, err := operator.SubnetCut(h.ctx, h.env.Config, "race", "pool-x", 1); err == nil {
		t.Error("a cut from a full subnet succeeded")
	}
}

// TestFieldsWithoutEffectRefused: on the real API server, the CEL rules refuse the IPPool
// fields multi-pool mode never reads, and AllotSubnet's own rules hold; no operator runs.
func TestFieldsWithoutEffectRefused(t *testing.T) {
	h := newHarness(t)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
	for _, tc := range []struct {
		field string
		mod   func(*allotv1.IPPool)
	}{
		{"default", func(p *allotv1.IPPool) { p.Spec.Default = true }},
		{"nodeName", func(p *allotv1.IPPool) { p.Spec.NodeName = []string{"n1"} }},
		{"nodeAffinity", func(p *allotv1.IPPool) { p.Spec.NodeAffinity = sel }},
		{"namespaceName", func(p *allotv1.IPPool) { p.Spec.NamespaceName = []string{"ns"} }},
		{"multusName", func(p *allotv1.IPPool) { p.Spec.MultusName = []string{"kube-system/net"} }},
	} {
		t.Run("IPPool/"+tc.field, func(t *testing.T) {
			p := newPool("p-"+strings.ToLower(tc.field), []string{"10.0.0.0/16"}, 24, nil, 0)
			tc.mod(p)
			err := h.c.Create(h.ctx, p, client.DryRunAll)
			want := "spec." + tc.field + " has no effect on an IPPool: in multi-pool mode"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v; want a refusal containing %q", err, want)
			}
		})
	}
	t.Run("IPPool/podAffinity and namespaceAffinity are Cilium's pool selectors, so allowed", func(t *testing.T) {
		p := newPool("p-selectors", []string{"10.0.0.0/16"}, 24, nil, 0)
		p.Spec.PodAffinity, p.Spec.NamespaceAffinity = sel, sel
		if err := h.c.Create(h.ctx, p, client.DryRunAll); err != nil {
			t.Fatalf("podAffinity and namespaceAffinity refused: %v", err)
		}
	})
	t.Run("IPPool/disable is honoured, so allowed", func(t *testing.T) {
		p := newPool("p-disable", []string{"10.0.0.0/16"}, 24, nil, 0)
		p.Spec.Disable = true
		if err := h.c.Create(h.ctx, p, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
	})

	h.create(testSubnet("s", "10.0.0.0/24", "10.0.0.10-10.0.0.20"))
	for _, tc := range []struct {
		name string
		obj  func() *allotv1.AllotSubnet
		want string
	}{
		{"no family", func() *allotv1.AllotSubnet {
			s := testSubnet("x", "10.0.0.0/24", "10.0.0.10")
			s.Spec.IPv4 = nil
			return s
		},
			"at least one of spec.ipv4 and spec.ipv6"},
		{"host bits", func() *allotv1.AllotSubnet { return testSubnet("x", "10.0.0.1/24", "10.0.0.10") }, "no host bits"},
		{"gateway outside", func() *allotv1.AllotSubnet {
			s := testSubnet("x", "10.0.0.0/24", "10.0.0.10")
			s.Spec.IPv4.Gateway = "10.9.0.1"
			return s
		}, "gateway must lie inside subnet"},
		{"v6 subnet as ipv4", func() *allotv1.AllotSubnet {
			s := testSubnet("x", "10.0.0.0/24", "10.0.0.10")
			s.Spec.IPv4.Subnet, s.Spec.IPv4.Gateway = "fd00::/64", ""
			return s
		}, "spec.ipv4.subnet must be an IPv4 subnet"},
		{"name too long for the pools' label", func() *allotv1.AllotSubnet {
			return testSubnet(strings.Repeat("s", 64), "10.0.0.0/24", "10.0.0.10")
		}, "metadata.name: at most 63 characters"},
	} {
		t.Run("AllotSubnet/"+tc.name, func(t *testing.T) {
			err := h.c.Create(h.ctx, tc.obj(), client.DryRunAll)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want a refusal containing %q", err, tc.want)
			}
		})
	}
	t.Run("AllotSubnet/subnet immutable", func(t *testing.T) {
		s := h.getSubnet("s")
		s.Spec.IPv4.Subnet = "10.0.0.0/16"
		if err := h.c.Update(h.ctx, s, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "subnet is immutable") {
			t.Fatalf("got %v", err)
		}
	})
}

// TestSubnetAndModeWebhook: the real API server calls the operator's webhook, which refuses
// an AllotSubnet overlapping another or taking out a pool's addresses, and, with multi-pool
// off (ClusterCIDRConfig mode), any IPPool, naming the mode.
func TestSubnetAndModeWebhook(t *testing.T) {
	h := newHarness(t)
	h.create(testSubnet("a", "10.0.0.0/24", "10.0.0.10-10.0.0.50"))
	r := h.run("op", func(o *operator.Options) {
		subnetOpts(o)
		o.DisableMultiPool, o.ClusterCIDRConfig = true, true
		o.SharedPools.Webhook = operator.WebhookOptions{Address: "127.0.0.1:0", Register: true}
	})
	r.waitLeader(t, waitFor)
	var err error
	eventually(t, waitFor, "webhook answering", func() error {
		err = h.c.Create(h.ctx, testSubnet("b", "10.0.0.0/24", "10.0.0.40-10.0.0.60"), client.DryRunAll)
		if err == nil {
			return fmt.Errorf("overlapping subnet not refused yet")
		}
		return nil
	})
	if want := `spec.ipv4.ips: 11 address(es) (10.0.0.40-10.0.0.50) are also in AllotSubnet "a"`; !strings.Contains(err.Error(), want) {
		t.Errorf("got %v; want %q", err, want)
	}
	if err := h.c.Create(h.ctx, testSubnet("c", "10.0.0.0/24", "10.0.0.60-10.0.0.70"), client.DryRunAll); err != nil {
		t.Errorf("disjoint subnet refused: %v", err)
	}
	h.deployment("web", 2, map[string]string{"ipam.spidernet.io/subnet": `{"ipv4":["a"]}`})
	p := h.waitAutoPool("Deployment/default/web", 3)
	eventually(t, waitFor, "allocation", func() error {
		if allocation(h.getSubnet("a"), p.Name) == nil {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	s := h.getSubnet("a")
	s.Spec.IPv4.IPs = []string{"10.0.0.30-10.0.0.50"}
	err = h.c.Update(h.ctx, s, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "cannot take out addresses given to pools") || !strings.Contains(err.Error(), p.Name) {
		t.Errorf("taking out a pool's addresses: got %v", err)
	}
	err = h.c.Create(h.ctx, newPool("x", []string{"10.9.0.0/16"}, 24, nil, 0), client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "IPPool has no effect in ClusterCIDRConfig mode") {
		t.Errorf("IPPool with multi-pool off: got %v", err)
	}
}
