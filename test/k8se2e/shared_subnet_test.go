package k8se2e

// SpiderSubnet end to end: an AllotSubnet, a Deployment whose pod template carries
// ipam.spidernet.io/subnet, the operator cutting the Deployment's pool, an agent serving the
// shared network and the real allot-cni. The pods get addresses of their pool (priority 1 of
// Spiderpool's rules), with the subnet's gateway and routes; pods of other applications do
// not; scaling the Deployment grows the pool without moving the addresses pods hold.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/allot-ipam/allot/core/addrset"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/allot-ipam/allot/sdk/policy"
)

const annoSubnet = "ipam.spidernet.io/subnet"

// runOperator runs an operator replica in-process until the test ends.
func (se *sharedEnv) runOperator() {
	se.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- operator.Run(ctx, operator.Options{
			RESTConfig: se.env.Config, Identity: "op", Logger: logger("operator"),
			LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
			StatusDelay: 100 * time.Millisecond,
			SharedPools: operator.SharedPoolOptions{SubnetResync: 200 * time.Millisecond},
		})
	}()
	se.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			se.t.Errorf("operator: %v", err)
		}
	})
}

// autoPool waits for the pool the operator cut for application, holding size addresses.
func (se *sharedEnv) autoPool(application string, size uint64) (*allotv1.SharedIPPool, addrset.Set) {
	se.t.Helper()
	var pool *allotv1.SharedIPPool
	var ips addrset.Set
	eventually(se.t, "auto pool of "+application, 30*time.Second, func() (bool, string) {
		var l allotv1.SharedIPPoolList
		if err := se.c.List(context.Background(), &l, ctrlclient.MatchingLabels{allotv1.LabelAutoPool: "true"}); err != nil {
			return false, err.Error()
		}
		for i := range l.Items {
			if l.Items[i].Annotations[allotv1.AnnotationAutoPoolApp] != application {
				continue
			}
			pool = &l.Items[i]
			s, err := addrset.Parse("ips", policy.IPv4, pool.Spec.IPv4.IPs)
			if err != nil {
				return false, err.Error()
			}
			ips = s
			return s.Size() == size, fmt.Sprintf("pool %s holds %v", pool.Name, pool.Spec.IPv4.IPs)
		}
		return false, "no pool"
	})
	return pool, ips
}

func TestSharedSubnetAutoPool(t *testing.T) {
	se := newSharedEnv(t, map[string]map[string]string{"node-1": nil})
	ctx := context.Background()
	se.create(&allotv1.AllotSubnet{ObjectMeta: metav1.ObjectMeta{Name: "vlan60"}, Spec: allotv1.AllotSubnetSpec{
		IPv4: &allotv1.SubnetFamily{Subnet: "10.60.0.0/24", IPs: []string{"10.60.0.10-10.60.0.40"}, Gateway: "10.60.0.1",
			Routes: []allotv1.RouteSpec{{Dst: "10.96.0.0/12"}, {Dst: "192.168.0.0/16", Gw: "10.60.0.254"}}}}})
	se.runOperator()

	ann := map[string]string{annoSubnet: `{"ipv4":["vlan60"]}`, "ipam.spidernet.io/ippool-ip-number": "+0"}
	replicas := int32(2)
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: ann},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
	se.create(web)
	pool, ips := se.autoPool("Deployment/default/web", 2)

	n1 := se.startAgent("node-1")
	se.havePools(pool.Name + "/ipv4")

	// The pods the Deployment would create: its labels, its template's annotations.
	var held []string
	for i := range 2 {
		p := se.pod("default", fmt.Sprintf("web-%d", i), "node-1", map[string]string{"app": "web"}, ann)
		out := se.add(cniCall{node: n1, pod: p})
		r := out.res
		if len(r.IPs) != 1 {
			t.Fatalf("pod %s: addresses %v, want one IPv4", p.Name, out.addrs())
		}
		a, _ := netip.AddrFromSlice(r.IPs[0].Address.IP.To4())
		if !ips.Contains(a) {
			t.Errorf("pod %s got %s, outside its application's pool %v", p.Name, a, ips)
		}
		if ones, _ := r.IPs[0].Address.Mask.Size(); ones != 24 || r.IPs[0].Gateway.String() != "10.60.0.1" {
			t.Errorf("pod %s: %s gateway %v, want the subnet's /24 and gateway 10.60.0.1", p.Name, r.IPs[0].Address.String(), r.IPs[0].Gateway)
		}
		var routes []string
		for _, rt := range r.Routes {
			routes = append(routes, rt.Dst.String()+" via "+rt.GW.String())
		}
		slices.Sort(routes)
		if want := []string{"10.96.0.0/12 via 10.60.0.1", "192.168.0.0/16 via 10.60.0.254"}; !slices.Equal(routes, want) {
			t.Errorf("pod %s: routes %q, want the subnet's %q", p.Name, routes, want)
		}
		held = append(held, a.String())
	}

	t.Run("pool full: a third pod gets nothing elsewhere", func(t *testing.T) {
		se := se.with(t)
		se.waitPools("pool full", func(free map[string]uint64) bool { return free[pool.Name+"/ipv4"] == 0 })
		p := se.pod("default", "web-2", "node-1", map[string]string{"app": "web"}, ann)
		out := se.exec(cniCall{cmd: "ADD", node: n1, pod: p})
		if out.err == nil {
			t.Fatalf("ADD of a third pod into a pool of two succeeded: %v", out.addrs())
		}
		if !strings.Contains(out.err.Msg, pool.Name) {
			t.Errorf("CNI error %q does not name the pool %s", out.err.Msg, pool.Name)
		}
	})

	t.Run("scale up grows the pool, held addresses stay", func(t *testing.T) {
		se := se.with(t)
		eventually(t, "scale web", 20*time.Second, func() (bool, string) {
			var d appsv1.Deployment
			if err := se.c.Get(ctx, ctrlclient.ObjectKeyFromObject(web), &d); err != nil {
				return false, err.Error()
			}
			n := int32(3)
			d.Spec.Replicas = &n
			if err := se.c.Update(ctx, &d); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
		_, grown := se.autoPool("Deployment/default/web", 3)
		for _, h := range held {
			if !grown.Contains(netip.MustParseAddr(h)) {
				t.Errorf("held address %s left the pool on scale up: %v", h, grown)
			}
		}
		se.waitPools("pool grown", func(free map[string]uint64) bool { return free[pool.Name+"/ipv4"] == 1 })
		p := se.pod("default", "web-3", "node-1", map[string]string{"app": "web"}, ann)
		out := se.add(cniCall{node: n1, pod: p})
		a, _ := netip.AddrFromSlice(out.res.IPs[0].Address.IP.To4())
		if !grown.Contains(a) || slices.Contains(held, a.String()) {
			t.Errorf("pod web-3 got %s; want the address the pool grew by (pool %v, held %v)", a, grown, held)
		}
	})

	t.Run("another application's pod does not use the pool", func(t *testing.T) {
		se := se.with(t)
		p := se.pod("default", "other", "node-1", map[string]string{"app": "other"}, ann)
		out := se.exec(cniCall{cmd: "ADD", node: n1, pod: p})
		if out.err == nil {
			t.Fatalf("a pod of another application got %v from web's pool", out.addrs())
		}
		if !strings.Contains(out.err.Msg, "podAffinity") {
			t.Errorf("CNI error %q does not say podAffinity left the pool out", out.err.Msg)
		}
	})
}
