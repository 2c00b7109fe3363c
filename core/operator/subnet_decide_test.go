package operator

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/allot-ipam/allot/core/addrset"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

func v4set(t *testing.T, items ...string) addrset.Set {
	t.Helper()
	s, err := addrset.Parse("test", policy.IPv4, items)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCutAddresses: growth takes the lowest free addresses, and nothing when too few are free
// (no partial pool).
func TestCutAddresses(t *testing.T) {
	tests := []struct {
		name      string
		cur, free []string
		size      uint64
		want      string
		need      uint64
		ok        bool
	}{
		{"new pool", nil, []string{"10.0.0.10-10.0.0.20"}, 3, "10.0.0.10-10.0.0.12", 3, true},
		{"grow keeps what it has", []string{"10.0.0.5"}, []string{"10.0.0.10-10.0.0.20"}, 3, "10.0.0.5,10.0.0.10-10.0.0.11", 2, true},
		{"large enough already", []string{"10.0.0.5-10.0.0.7"}, []string{"10.0.0.10"}, 2, "10.0.0.5-10.0.0.7", 0, true},
		{"gaps are filled lowest first", nil, []string{"10.0.0.1", "10.0.0.3", "10.0.0.9"}, 2, "10.0.0.1,10.0.0.3", 2, true},
		{"too few free: nothing", []string{"10.0.0.5"}, []string{"10.0.0.10"}, 3, "10.0.0.5", 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, need, ok := cutAddresses(v4set(t, tt.cur...), v4set(t, tt.free...), tt.size)
			if got := strings.Join(out.Strings(), ","); got != tt.want || need != tt.need || ok != tt.ok {
				t.Errorf("cutAddresses = %s, %d, %v; want %s, %d, %v", got, need, ok, tt.want, tt.need, tt.ok)
			}
		})
	}
}

// TestShrinkPlan: a shrink drops the highest unclaimed addresses, never a claimed one.
func TestShrinkPlan(t *testing.T) {
	tests := []struct {
		name             string
		held, claimed    []string
		size             uint64
		wantDrop, wantKp string
	}{
		{"highest go", []string{"10.0.0.1-10.0.0.5"}, nil, 3, "10.0.0.4-10.0.0.5", "10.0.0.1-10.0.0.3"},
		{"claimed stay", []string{"10.0.0.1-10.0.0.5"}, []string{"10.0.0.5"}, 3, "10.0.0.3-10.0.0.4", "10.0.0.1-10.0.0.2,10.0.0.5"},
		{"everything claimed: nothing dropped", []string{"10.0.0.1-10.0.0.2"}, []string{"10.0.0.1-10.0.0.2"}, 1, "", "10.0.0.1-10.0.0.2"},
		{"not larger: nothing dropped", []string{"10.0.0.1-10.0.0.2"}, nil, 3, "", "10.0.0.1-10.0.0.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			drop, keep := shrinkPlan(v4set(t, tt.held...), v4set(t, tt.claimed...), tt.size)
			if d, k := strings.Join(drop.Strings(), ","), strings.Join(keep.Strings(), ","); d != tt.wantDrop || k != tt.wantKp {
				t.Errorf("shrinkPlan = drop %s keep %s; want drop %s keep %s", d, k, tt.wantDrop, tt.wantKp)
			}
		})
	}
}

// TestAutoPool: the pool belongs to the application (podAffinity, namespace), carries the
// subnet's gateway and routes, and is born with the in-use finalizer; an existing pool keeps
// its other metadata and gains no finalizer.
func TestAutoPool(t *testing.T) {
	a := &app{Kind: "Deployment", Namespace: "ns", Name: "web", UID: "uid-1",
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
	w := poolWant{Pool: "auto4-web-eth0-x", Subnet: "sub", Family: policy.IPv4, Interface: "eth0", Size: 2, Reclaim: true}
	sf := &allotv1.SubnetFamily{Subnet: "10.0.0.0/24", Gateway: "10.0.0.1", Routes: []allotv1.RouteSpec{{Dst: "10.9.0.0/16"}}}
	ips := v4set(t, "10.0.0.10-10.0.0.11")

	fresh := autoPool(&allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: w.Pool}}, sf, a, w, ips)
	if fresh.Spec.IPv4 == nil || fresh.Spec.IPv6 != nil || fresh.Spec.IPv4.Gateway != "10.0.0.1" ||
		!slices.Equal(fresh.Spec.IPv4.IPs, []string{"10.0.0.10-10.0.0.11"}) || len(fresh.Spec.IPv4.Routes) != 1 {
		t.Errorf("spec = %+v", fresh.Spec.IPv4)
	}
	if fresh.Labels[allotv1.LabelAutoPool] != "true" || fresh.Labels[allotv1.LabelSubnet] != "sub" ||
		fresh.Annotations[allotv1.AnnotationAutoPoolApp] != "Deployment/ns/web" || fresh.Annotations[allotv1.AnnotationAutoPoolReclaim] != "true" {
		t.Errorf("metadata = %v %v", fresh.Labels, fresh.Annotations)
	}
	if !slices.Equal(fresh.Spec.NamespaceName, []string{"ns"}) || fresh.Spec.PodAffinity.MatchLabels["app"] != "web" {
		t.Errorf("selection = %+v", fresh.Spec.PoolSelection)
	}
	if !controllerutil.ContainsFinalizer(fresh, allotv1.FinalizerSharedPoolInUse) {
		t.Error("a new pool has no in-use finalizer")
	}
	existing := &allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: w.Pool, ResourceVersion: "7", Labels: map[string]string{"team": "a"}}}
	upd := autoPool(existing, sf, a, w, ips)
	if upd.Labels["team"] != "a" || controllerutil.ContainsFinalizer(upd, allotv1.FinalizerSharedPoolInUse) || existing.Labels[allotv1.LabelAutoPool] != "" {
		t.Errorf("update: labels %v finalizers %v; the read pool changed: %v", upd.Labels, upd.Finalizers, existing.Labels)
	}
	existing.Spec.IPv4 = &allotv1.SharedPoolFamily{Subnet: "10.0.0.0/24", IPs: []string{"10.0.0.10-10.0.0.12"}, ExcludeIPs: []string{"10.0.0.12"}}
	if upd := autoPool(existing, sf, a, w, ips); !slices.Equal(upd.Spec.IPv4.ExcludeIPs, []string{"10.0.0.12"}) {
		t.Errorf("an adopted pool's excludeIPs were dropped: %+v", upd.Spec.IPv4)
	}
}

// An application adopts an auto pool made for it under another name (imported from
// Spiderpool), matched by application, interface and family as Spiderpool matches its owner
// labels; its own pool's name wins when that exists.
func TestAdoptable(t *testing.T) {
	w := poolWant{Pool: "auto4-web-eth0-x", Subnet: "sub", Family: policy.IPv4, Interface: "eth0", Size: 2}
	pool := func(name, app, iface string, v6 bool) allotv1.SharedIPPool {
		p := allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			allotv1.AnnotationAutoPoolApp: app}}}
		if iface != "" {
			p.Annotations[allotv1.AnnotationAutoPoolInterface] = iface
		}
		fam := &allotv1.SharedPoolFamily{Subnet: "10.0.0.0/24", IPs: []string{"10.0.0.5"}}
		if v6 {
			p.Spec.IPv6 = fam
		} else {
			p.Spec.IPv4 = fam
		}
		return p
	}
	const app = "Deployment/ns/web"
	deleting := pool("auto4-web-eth0-00000", app, "eth0", false)
	deleting.DeletionTimestamp = &metav1.Time{}
	for _, tc := range []struct {
		name  string
		pools []allotv1.SharedIPPool
		want  string // "" = none
	}{
		{"imported", []allotv1.SharedIPPool{pool("auto4-web-eth0-1a2b3", app, "eth0", false)}, "auto4-web-eth0-1a2b3"},
		{"no interface annotation is eth0", []allotv1.SharedIPPool{pool("old", app, "", false)}, "old"},
		{"own name exists", []allotv1.SharedIPPool{pool("a", app, "eth0", false), pool(w.Pool, app, "eth0", false)}, ""},
		{"first by name", []allotv1.SharedIPPool{pool("b", app, "eth0", false), pool("a", app, "eth0", false)}, "a"},
		{"other application", []allotv1.SharedIPPool{pool("a", "Deployment/ns/db", "eth0", false)}, ""},
		{"other interface", []allotv1.SharedIPPool{pool("a", app, "net1", false)}, ""},
		{"other family", []allotv1.SharedIPPool{pool("a", app, "eth0", true)}, ""},
		{"being deleted", []allotv1.SharedIPPool{deleting}, ""},
	} {
		name := ""
		if p := adoptable(tc.pools, app, w); p != nil {
			name = p.Name
		}
		if name != tc.want {
			t.Errorf("%s: adopted %q, want %q", tc.name, name, tc.want)
		}
	}
}

// An adopted pool without a subnet allocation keeps those of its addresses still free.
func TestSeedAdopted(t *testing.T) {
	w := poolWant{Pool: "p", Family: policy.IPv4, Existing: []string{"10.0.0.5-10.0.0.7"}}
	cur, rest, err := seedAdopted(w, v4set(t, "10.0.0.6-10.0.0.20"))
	if err != nil || !slices.Equal(cur.Strings(), []string{"10.0.0.6-10.0.0.7"}) || !slices.Equal(rest.Strings(), []string{"10.0.0.8-10.0.0.20"}) {
		t.Errorf("seed %v rest %v, %v", cur.Strings(), rest.Strings(), err)
	}
	w.Existing = []string{"nope"}
	if _, _, err := seedAdopted(w, v4set(t, "10.0.0.6")); err == nil || !strings.Contains(err.Error(), "SharedIPPool p: spec.ips") {
		t.Errorf("bad address: %v", err)
	}
}
