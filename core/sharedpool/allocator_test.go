package sharedpool

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	spiderpoolpriority "github.com/allot-ipam/allot/plugins/policy/spiderpoolpriority"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func nodes(cl *cluster, n int) []*simNode {
	out := make([]*simNode, n)
	for i := range out {
		out[i] = cl.node(fmt.Sprintf("node-%02d", i), nil)
	}
	return out
}

// Ten nodes allocate from one shared pool at once: every pod gets an address, none twice,
// and claims and endpoints agree.
func TestTenNodesConcurrently(t *testing.T) {
	cl := newCluster(t)
	cl.pool("shared", "172.18.0.0/16", []string{"172.18.0.10-172.18.0.209"}, func(p *v1alpha1.SharedIPPool) {
		p.Spec.IPv4.Gateway = "172.18.0.1"
		p.Spec.IPv4.Routes = []v1alpha1.RouteSpec{{Dst: "10.96.0.0/12"}}
	})
	ns := nodes(cl, 10)
	waitPool(t, "shared", ns...)
	pods := make([][]*corev1.Pod, len(ns))
	for i, n := range ns {
		for j := range 20 {
			pods[i] = append(pods[i], cl.pod("default", fmt.Sprintf("p-%d-%d", i, j), n.name))
		}
	}
	results := make(chan *api.Allocation, 200)
	errs := storm(ns, pods, 20, func(n *simNode, p *corev1.Pod) error {
		al, err := n.a.Allocate(context.Background(), addReq(p, "c-"+p.Name, "eth0"))
		if err == nil {
			results <- al
		}
		return err
	})
	close(results)
	for _, err := range errs {
		t.Error(err)
	}
	seen := map[string]bool{}
	for al := range results {
		if len(al.IPs) != 1 || al.IPs[0].Gateway != "172.18.0.1" || !strings.HasSuffix(al.IPs[0].Address, "/16") {
			t.Fatalf("allocation %+v", al)
		}
		if len(al.Routes) != 1 || al.Routes[0] != (api.Route{Dst: "10.96.0.0/12", GW: "172.18.0.1"}) {
			t.Fatalf("routes %+v", al.Routes)
		}
		if seen[al.IPs[0].Address] {
			t.Fatalf("address %s handed out twice", al.IPs[0].Address)
		}
		seen[al.IPs[0].Address] = true
	}
	claims := cl.consistency(t)
	if len(claims) != 200 {
		t.Fatalf("%d claims, want 200", len(claims))
	}
	var conflicts int64
	for _, n := range ns {
		conflicts += n.a.Stats().Conflicts
	}
	t.Logf("200 pods on 10 nodes, pool of 200: %d conflicts retried", conflicts)

	// The pool is full: the next pod gets a clear error naming the pool.
	extra := cl.pod("default", "extra", ns[0].name)
	_, err := ns[0].a.Allocate(context.Background(), addReq(extra, "c-extra", "eth0"))
	if api.CodeOf(err) != api.CodeExhausted || !strings.Contains(err.Error(), `"shared"`) {
		t.Fatalf("full pool: %v", err)
	}
}

// An exhausted pool gives a clear CNI error; once an address is freed the pod gets it.
func TestExhaustionThenFreed(t *testing.T) {
	cl := newCluster(t)
	cl.pool("tiny", "10.9.0.0/24", []string{"10.9.0.10-10.9.0.12"}, nil)
	n := cl.node("n1", nil)
	waitPool(t, "tiny", n)
	var pods []*corev1.Pod
	for i := range 4 {
		pods = append(pods, cl.pod("default", fmt.Sprintf("p%d", i), "n1"))
	}
	ctx := context.Background()
	for _, p := range pods[:3] {
		if _, err := n.a.Allocate(ctx, addReq(p, "c-"+p.Name, "eth0")); err != nil {
			t.Fatal(err)
		}
	}
	// Exhausted pools are filtered by the policy, or found full at claim time.
	_, err := n.a.Allocate(ctx, addReq(pods[3], "c-p3", "eth0"))
	if err == nil || !strings.Contains(err.Error(), `"tiny"`) || api.CodeOf(err) != api.CodeExhausted {
		t.Fatalf("exhausted: %v", err)
	}
	t.Logf("exhausted: %v", err)
	if err := n.a.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: "c-p1", IfName: "eth0"}, Network: "underlay",
		Pod: api.PodRef{Namespace: "default", Name: "p1"}}); err != nil {
		t.Fatal(err)
	}
	// DEL of a non-StatefulSet pod deletes the claim and the endpoint.
	var ep v1alpha1.AllotEndpoint
	if err := cl.c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "p1"}, &ep); !apierrors.IsNotFound(err) {
		t.Fatalf("endpoint after DEL: %v %+v", err, ep.Spec)
	}
	al, err := n.a.Allocate(ctx, addReq(pods[3], "c-p3", "eth0"))
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	t.Logf("p3 got %s", al.IPs[0].Address)
	if got := cl.consistency(t); len(got) != 3 {
		t.Fatalf("claims %v", sortedAddrs(got))
	}
}

// A StatefulSet pod deleted and recreated on another node gets its address back; DEL keeps
// it meanwhile.
func TestStatefulSetKeepsAddressAcrossNodes(t *testing.T) {
	cl := newCluster(t)
	cl.pool("sts", "10.20.0.0/24", []string{"10.20.0.10-10.20.0.100"}, nil)
	a, b := cl.node("node-a", nil), cl.node("node-b", nil)
	waitPool(t, "sts", a, b)
	ctx := context.Background()
	if err := cl.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "db"}}); err != nil {
		t.Fatal(err)
	}
	p := cl.pod("db", "web-0", "node-a", statefulSet("web"))
	first, err := a.a.Allocate(ctx, addReq(p, "c1", "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.a.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: "c1", IfName: "eth0"}, Network: "underlay",
		Pod: api.PodRef{Namespace: "db", Name: "web-0", UID: string(p.UID)}}); err != nil {
		t.Fatal(err)
	}
	if err := cl.c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	// Other pods come and go meanwhile; none gets web-0's address.
	for i := range 5 {
		o := cl.pod("db", fmt.Sprintf("other-%d", i), "node-b")
		al, err := b.a.Allocate(ctx, addReq(o, "co"+fmt.Sprint(i), "eth0"))
		if err != nil {
			t.Fatal(err)
		}
		if al.IPs[0].Address == first.IPs[0].Address {
			t.Fatalf("web-0's address went to %s", o.Name)
		}
	}
	p2 := cl.pod("db", "web-0", "node-b", statefulSet("web"))
	second, err := b.a.Allocate(ctx, addReq(p2, "c2", "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	if second.IPs[0].Address != first.IPs[0].Address {
		t.Fatalf("recreated StatefulSet pod got %s, had %s", second.IPs[0].Address, first.IPs[0].Address)
	}
	claims := cl.consistency(t)
	h := claims[netip.MustParsePrefix(first.IPs[0].Address).Addr().String()].Spec.Holder
	if h.Node != "node-b" || h.PodUID != string(p2.UID) || h.ContainerID != "c2" || h.StatefulSet != "web" {
		t.Fatalf("claim holder after takeover %+v", h)
	}
}

// An agent killed after creating a claim leaves one claim; the kubelet's retry (new
// container ID), on the same process or a restarted one, reuses it.
func TestKilledMidAllocation(t *testing.T) {
	cl := newCluster(t)
	cl.pool("k", "10.30.0.0/24", []string{"10.30.0.10-10.30.0.50"}, nil)
	kill := errors.New("SIGKILL")
	dying := cl.node("node-k", func(context.Context, *v1alpha1.AddressClaim) error { return kill })
	waitPool(t, "k", dying)
	ctx := context.Background()
	p := cl.pod("default", "victim", "node-k")
	q := cl.pod("default", "victim2", "node-k")
	for _, pod := range []*corev1.Pod{p, q} {
		if _, err := dying.a.Allocate(ctx, addReq(pod, "c1-"+pod.Name, "eth0")); err == nil {
			t.Fatal("the hook should have ended the ADD")
		}
	}
	var claims v1alpha1.AddressClaimList
	if err := cl.c.List(ctx, &claims); err != nil || len(claims.Items) != 2 {
		t.Fatalf("claims after the kill: %v %d", err, len(claims.Items))
	}
	held := map[string]string{}
	for _, c := range claims.Items {
		held[c.Spec.Holder.Pod] = c.Spec.IP
	}
	// Same process (its index learnt the claim from its own write), new container ID.
	dying.a.opts.AfterClaim = nil
	al, err := dying.a.Allocate(ctx, addReq(p, "c2-victim", "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	if got := netip.MustParsePrefix(al.IPs[0].Address).Addr().String(); got != held["victim"] {
		t.Fatalf("retry got %s, the claim holds %s", got, held["victim"])
	}
	// A restarted agent (fresh index from the API server).
	dying.shutdown()
	fresh := cl.node("node-k", nil)
	al, err = fresh.a.Allocate(ctx, addReq(q, "c2-victim2", "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	if got := netip.MustParsePrefix(al.IPs[0].Address).Addr().String(); got != held["victim2"] {
		t.Fatalf("retry after restart got %s, the claim holds %s", got, held["victim2"])
	}
	got := cl.consistency(t)
	if len(got) != 2 {
		t.Fatalf("claims %v", sortedAddrs(got))
	}
	for _, c := range got {
		if !strings.HasPrefix(c.Spec.Holder.ContainerID, "c2-") {
			t.Fatalf("claim holder not updated: %+v", c.Spec.Holder)
		}
	}
	// The repeat of the ADD answers the same, and DEL of the old container ID frees nothing.
	again, err := fresh.a.Allocate(ctx, addReq(q, "c2-victim2", "eth0"))
	if err != nil || again.IPs[0].Address != al.IPs[0].Address {
		t.Fatalf("repeat: %v %+v", err, again)
	}
	if err := fresh.a.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: "c1-victim2", IfName: "eth0"}, Network: "underlay",
		Pod: api.PodRef{Namespace: "default", Name: "victim2"}}); err != nil {
		t.Fatal(err)
	}
	if len(cl.consistency(t)) != 2 {
		t.Fatal("DEL of the abandoned container freed the live claim")
	}
	if _, err := fresh.a.Check(ctx, &api.CheckRequest{Owner: api.Owner{ContainerID: "c2-victim2", IfName: "eth0"}}); err != nil {
		t.Fatal(err)
	}
}

// Two interfaces of one pod (Multus style) from two pools chosen per interface by the
// spiderpool annotation; the endpoint lists both; dual stack on eth0.
func TestMultipleInterfaces(t *testing.T) {
	cl := newCluster(t)
	cl.pool("a4", "10.40.0.0/24", []string{"10.40.0.10-10.40.0.20"}, func(p *v1alpha1.SharedIPPool) {
		p.Spec.Default = false
		p.Spec.IPv4.Gateway = "10.40.0.1"
	})
	cl.pool("a6", "fd00:40::/64", []string{"fd00:40::10-fd00:40::20"}, func(p *v1alpha1.SharedIPPool) { p.Spec.Default = false })
	cl.pool("b4", "10.41.0.0/24", []string{"10.41.0.10-10.41.0.20"}, func(p *v1alpha1.SharedIPPool) { p.Spec.Default = false })
	n := cl.node("n", nil)
	waitPool(t, "b4", n)
	waitPool(t, "a6", n)
	p := cl.pod("default", "multi", "n", annotations(map[string]string{
		spiderpoolpriority.AnnoIPPools: `[{"interface":"eth0","ipv4":["a4"],"ipv6":["a6"]},{"interface":"net1","ipv4":["b4"]}]`,
	}))
	ctx := context.Background()
	eth0, err := n.a.Allocate(ctx, addReq(p, "c", "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	net1, err := n.a.Allocate(ctx, addReq(p, "c", "net1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(eth0.IPs) != 2 || eth0.IPs[0].Pool != "a4" || eth0.IPs[1].Pool != "a6" || eth0.IPs[0].Gateway != "10.40.0.1" ||
		!strings.HasSuffix(eth0.IPs[1].Address, "/64") || len(net1.IPs) != 1 || net1.IPs[0].Pool != "b4" {
		t.Fatalf("eth0 %+v net1 %+v", eth0.IPs, net1.IPs)
	}
	var ep v1alpha1.AllotEndpoint
	if err := cl.c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "multi"}, &ep); err != nil {
		t.Fatal(err)
	}
	if len(ep.Spec.Interfaces) != 2 || ep.Spec.Interfaces[0].Interface != "eth0" || ep.Spec.Interfaces[1].Interface != "net1" || len(ep.Spec.Interfaces[0].IPs) != 2 {
		t.Fatalf("endpoint %+v", ep.Spec)
	}
	if len(cl.consistency(t)) != 3 {
		t.Fatal("want 3 claims")
	}
	// DEL of net1 leaves eth0.
	if err := n.a.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: "c", IfName: "net1"}}); err != nil {
		t.Fatal(err)
	}
	if err := cl.c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "multi"}, &ep); err != nil || len(ep.Spec.Interfaces) != 1 {
		t.Fatalf("endpoint after DEL net1: %v %+v", err, ep.Spec)
	}
	if len(cl.consistency(t)) != 2 {
		t.Fatal("want 2 claims")
	}
	// A requested address that another pod holds is a conflict naming the field.
	q := cl.pod("default", "q", "n", annotations(map[string]string{spiderpoolpriority.AnnoIPPool: `{"ipv4":["a4"]}`}))
	held := netip.MustParsePrefix(eth0.IPs[0].Address).Addr().String()
	req := addReq(q, "cq", "eth0")
	req.IPs = []string{held}
	if _, err := n.a.Allocate(ctx, req); api.CodeOf(err) != api.CodeConflict || !strings.Contains(err.Error(), "ips[0]") {
		t.Fatalf("requested held address: %v", err)
	}
	_ = k8s.ClaimName
}

// An agent killed between its IPv4 and IPv6 claims: the retry keeps the IPv4 claim and
// completes the IPv6 one. And a repeat ADD still answers once every pool is full.
func TestKilledBetweenFamiliesAndRepeatWhenFull(t *testing.T) {
	cl := newCluster(t)
	cl.pool("d4", "10.50.0.0/24", []string{"10.50.0.10-10.50.0.11"}, nil)
	cl.pool("d6", "fd00:50::/64", []string{"fd00:50::10-fd00:50::11"}, nil)
	kill := errors.New("SIGKILL")
	claims := 0
	n := cl.node("node-d", func(context.Context, *v1alpha1.AddressClaim) error {
		claims++
		if claims == 1 {
			return kill // after the first family's claim
		}
		return nil
	})
	waitPool(t, "d4", n)
	waitPool(t, "d6", n)
	ctx := context.Background()
	p := cl.pod("default", "dual", "node-d")
	if _, err := n.a.Allocate(ctx, addReq(p, "c1", "eth0")); err == nil {
		t.Fatal("the hook should have ended the ADD")
	}
	var list v1alpha1.AddressClaimList
	if err := cl.c.List(ctx, &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("claims after the kill: %v %d", err, len(list.Items))
	}
	al, err := n.a.Allocate(ctx, addReq(p, "c2", "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	if len(al.IPs) != 2 {
		t.Fatalf("retry should complete both families, got %+v", al.IPs)
	}
	// Fill both pools, then repeat the first pod's ADD.
	q := cl.pod("default", "filler", "node-d")
	if _, err := n.a.Allocate(ctx, addReq(q, "cq", "eth0")); err != nil {
		t.Fatal(err)
	}
	r := cl.pod("default", "late", "node-d")
	if _, err := n.a.Allocate(ctx, addReq(r, "cr", "eth0")); api.CodeOf(err) != api.CodeExhausted {
		t.Fatalf("pools full: %v", err)
	}
	again, err := n.a.Allocate(ctx, addReq(p, "c2", "eth0"))
	if err != nil || len(again.IPs) != 2 || again.IPs[0].Address != al.IPs[0].Address || again.IPs[1].Address != al.IPs[1].Address {
		t.Fatalf("repeat ADD with full pools: %v %+v", err, again)
	}
	if len(cl.consistency(t)) != 4 {
		t.Fatal("want 4 claims")
	}
}

// A StatefulSet pod recreated with an annotation naming another pool gets an address of that
// pool; its last address is freed, not leaked.
func TestStatefulSetPoolChangedIsReallocated(t *testing.T) {
	cl := newCluster(t)
	cl.pool("old", "10.60.0.0/24", []string{"10.60.0.10-10.60.0.20"}, nil)
	cl.pool("new", "10.61.0.0/24", []string{"10.61.0.10-10.61.0.20"}, func(p *v1alpha1.SharedIPPool) { p.Spec.Default = false })
	n := cl.node("node-s", nil)
	waitPool(t, "new", n)
	ctx := context.Background()
	p := cl.pod("default", "db-0", "node-s", statefulSet("db"))
	first, err := n.a.Allocate(ctx, addReq(p, "c1", "eth0"))
	if err != nil || first.IPs[0].Pool != "old" {
		t.Fatalf("first: %v %+v", err, first)
	}
	if err := cl.c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	p2 := cl.pod("default", "db-0", "node-s", statefulSet("db"), annotations(map[string]string{spiderpoolpriority.AnnoIPPool: `{"ipv4":["new"]}`}))
	second, err := n.a.Allocate(ctx, addReq(p2, "c2", "eth0"))
	if err != nil || second.IPs[0].Pool != "new" {
		t.Fatalf("recreated with another pool: %v %+v", err, second)
	}
	claims := cl.consistency(t)
	if len(claims) != 1 {
		t.Fatalf("the old address should be freed: %v", sortedAddrs(claims))
	}
	// Recreated again without a change: it keeps the new address.
	if err := cl.c.Delete(ctx, p2, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	p3 := cl.pod("default", "db-0", "node-s", statefulSet("db"), annotations(map[string]string{spiderpoolpriority.AnnoIPPool: `{"ipv4":["new"]}`}))
	third, err := n.a.Allocate(ctx, addReq(p3, "c3", "eth0"))
	if err != nil || third.IPs[0].Address != second.IPs[0].Address {
		t.Fatalf("recreated unchanged: %v %+v, had %s", err, third, second.IPs[0].Address)
	}
}

// CNI GC for one network frees this node's claims of that network whose owners the runtime
// no longer lists, including one the agent never wrote an endpoint for; it leaves other
// networks, StatefulSet pods and valid owners alone.
func TestCNIGCPerNetwork(t *testing.T) {
	cl := newCluster(t)
	cl.pool("g", "10.70.0.0/24", []string{"10.70.0.10-10.70.0.50"}, nil)
	killed := false
	n := cl.node("node-g", func(context.Context, *v1alpha1.AddressClaim) error {
		if killed {
			return errors.New("SIGKILL")
		}
		return nil
	})
	waitPool(t, "g", n)
	ctx := context.Background()
	live := cl.pod("default", "live", "node-g")
	gone := cl.pod("default", "gone", "node-g")
	other := cl.pod("default", "other-net", "node-g")
	sts := cl.pod("default", "st-0", "node-g", statefulSet("st"))
	half := cl.pod("default", "half", "node-g")
	for _, p := range []*corev1.Pod{live, gone, sts} {
		if _, err := n.a.Allocate(ctx, addReq(p, "c-"+p.Name, "eth0")); err != nil {
			t.Fatal(err)
		}
	}
	req := addReq(other, "c-other-net", "eth0")
	req.Network = "storage"
	if _, err := n.a.Allocate(ctx, req); err != nil {
		t.Fatal(err)
	}
	killed = true
	if _, err := n.a.Allocate(ctx, addReq(half, "c-half", "eth0")); err == nil {
		t.Fatal("the hook should have ended the ADD")
	}
	time.Sleep(1100 * time.Millisecond) // sleep: claims must be older than the GC (real 1 s timestamps)
	resp, err := n.a.GC(ctx, &api.GCRequest{Network: "underlay", Valid: []api.Owner{{ContainerID: "c-live", IfName: "eth0"}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range resp.Released {
		got = append(got, o.ContainerID)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"c-gone", "c-half"}) {
		t.Fatalf("released %v, want c-gone and c-half", got)
	}
	var list v1alpha1.AddressClaimList
	if err := cl.c.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	var pods []string
	for _, c := range list.Items {
		pods = append(pods, c.Spec.Holder.Pod+"@"+c.Spec.Holder.Network)
	}
	slices.Sort(pods)
	if !slices.Equal(pods, []string{"live@underlay", "other-net@storage", "st-0@underlay"}) {
		t.Fatalf("claims left: %v", pods)
	}
}
