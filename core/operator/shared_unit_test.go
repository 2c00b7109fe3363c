package operator

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/sharedpool"
)

func pod(ns, name, uid, node string, phase corev1.PodPhase, sts string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	if sts != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts, UID: "sts-uid"}}
	}
	return p
}

func sts(ns, name string, replicas int32, start int32) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.StatefulSetSpec{Replicas: &replicas}}
	if start > 0 {
		s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: start}
	}
	return s
}

func node(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

// TestHolderGone covers every rule of the collector's verdict, in particular the ones that
// must keep an address (a StatefulSet pod recreated elsewhere, a node gone under a
// StatefulSet pod, a pod of that name owned by a StatefulSet).
func TestHolderGone(t *testing.T) {
	tests := []struct {
		name string
		objs []client.Object
		h    gcHolder
		want string
	}{
		{"live pod", []client.Object{pod("ns", "a", "u1", "n1", corev1.PodRunning, ""), node("n1")},
			gcHolder{ns: "ns", pod: "a", uid: "u1", node: "n1"}, ""},
		{"pod gone", []client.Object{node("n1")}, gcHolder{ns: "ns", pod: "a", uid: "u1", node: "n1"}, gcPodGone},
		{"pod replaced", []client.Object{pod("ns", "a", "u2", "n1", corev1.PodRunning, ""), node("n1")},
			gcHolder{ns: "ns", pod: "a", uid: "u1", node: "n1"}, gcPodReplaced},
		{"replaced by a StatefulSet pod: keep", []client.Object{pod("ns", "a", "u2", "n1", corev1.PodRunning, "a"), node("n1")},
			gcHolder{ns: "ns", pod: "a", uid: "u1", node: "n1"}, ""},
		{"succeeded", []client.Object{pod("ns", "a", "u1", "n1", corev1.PodSucceeded, ""), node("n1")},
			gcHolder{ns: "ns", pod: "a", uid: "u1", node: "n1"}, gcPodTerminated},
		{"failed", []client.Object{pod("ns", "a", "u1", "n1", corev1.PodFailed, ""), node("n1")},
			gcHolder{ns: "ns", pod: "a", uid: "u1", node: "n1"}, gcPodTerminated},
		{"node gone", []client.Object{pod("ns", "a", "u1", "n1", corev1.PodRunning, "")},
			gcHolder{ns: "ns", pod: "a", uid: "u1", node: "n1"}, gcNodeGone},
		{"no holder recorded: keep", nil, gcHolder{}, ""},
		{"no uid recorded, pod there", []client.Object{pod("ns", "a", "u2", "n1", corev1.PodRunning, ""), node("n1")},
			gcHolder{ns: "ns", pod: "a", node: "n1"}, ""},
		{"sts pod live", []client.Object{sts("ns", "web", 3, 0), pod("ns", "web-1", "u1", "n1", corev1.PodRunning, "web")},
			gcHolder{ns: "ns", pod: "web-1", uid: "u1", node: "n1", sts: "web"}, ""},
		{"sts pod recreated on another node, old node gone: keep",
			[]client.Object{sts("ns", "web", 3, 0), pod("ns", "web-1", "u2", "n2", corev1.PodPending, "web"), node("n2")},
			gcHolder{ns: "ns", pod: "web-1", uid: "u1", node: "n1", sts: "web"}, ""},
		{"sts pod deleted, ordinal in range: keep (it comes back)", []client.Object{sts("ns", "web", 3, 0)},
			gcHolder{ns: "ns", pod: "web-2", uid: "u1", node: "n1", sts: "web"}, ""},
		{"sts scaled down, pod gone", []client.Object{sts("ns", "web", 2, 0)},
			gcHolder{ns: "ns", pod: "web-2", uid: "u1", node: "n1", sts: "web"}, gcStsScaledDown},
		{"sts scaled down, pod still terminating: keep", []client.Object{sts("ns", "web", 2, 0), pod("ns", "web-2", "u1", "n1", corev1.PodRunning, "web")},
			gcHolder{ns: "ns", pod: "web-2", uid: "u1", node: "n1", sts: "web"}, ""},
		{"sts ordinals.start: below start", []client.Object{sts("ns", "web", 2, 5)},
			gcHolder{ns: "ns", pod: "web-4", uid: "u1", sts: "web"}, gcStsScaledDown},
		{"sts ordinals.start: in range", []client.Object{sts("ns", "web", 2, 5)},
			gcHolder{ns: "ns", pod: "web-6", uid: "u1", sts: "web"}, ""},
		{"sts gone, pod gone", nil, gcHolder{ns: "ns", pod: "web-0", uid: "u1", sts: "web"}, gcStsGone},
		{"sts gone, orphaned pod still there: keep", []client.Object{pod("ns", "web-0", "u1", "n1", corev1.PodRunning, "")},
			gcHolder{ns: "ns", pod: "web-0", uid: "u1", sts: "web"}, ""},
		{"sts name not an ordinal: keep", []client.Object{sts("ns", "web", 0, 0)},
			gcHolder{ns: "ns", pod: "other", uid: "u1", sts: "web"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(allotk8s.NewScheme()).WithObjects(tt.objs...).Build()
			got, err := gcView{r: c}.holderGone(context.Background(), tt.h)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("holderGone = %q; want %q", got, tt.want)
			}
		})
	}
}

// terminating is pod deleted at del with a grace period of grace seconds, as the API server
// leaves a pod whose kubelet never confirms (deletionTimestamp = delete time + grace).
func terminating(p *corev1.Pod, del time.Time, grace int64) *corev1.Pod {
	p.DeletionTimestamp = &metav1.Time{Time: del.Add(time.Duration(grace) * time.Second)}
	p.DeletionGracePeriodSeconds = &grace
	p.Finalizers = []string{"test/keep"} // the fake client refuses a deleted object without one
	return p
}

func readyNode(name string, ready corev1.ConditionStatus) *corev1.Node {
	n := node(name)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	return n
}

// TestHolderGoneTerminating: Spiderpool's GC of stateless pods stuck Terminating, per node
// readiness and per setting; StatefulSet pods and pods within their grace period keep.
func TestHolderGoneTerminating(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := gcHolder{ns: "ns", pod: "a", uid: "u1", node: "n1"}
	long := now.Add(-2 * time.Minute) // deleted two minutes ago, 30 s grace: overdue for a minute
	tests := []struct {
		name                string
		objs                []client.Object
		h                   gcHolder
		onReady, onNotReady bool
		want                string
	}{
		{"overdue on a Ready node", []client.Object{terminating(pod("ns", "a", "u1", "n1", corev1.PodRunning, ""), long, 30), readyNode("n1", corev1.ConditionTrue)},
			h, true, true, gcTerminating},
		{"overdue on a NotReady node", []client.Object{terminating(pod("ns", "a", "u1", "n1", corev1.PodRunning, ""), long, 30), readyNode("n1", corev1.ConditionFalse)},
			h, true, true, gcTerminating},
		{"overdue on a node without status (not Ready)", []client.Object{terminating(pod("ns", "a", "u1", "n1", corev1.PodRunning, ""), long, 30), node("n1")},
			h, false, true, gcTerminating},
		{"overdue on a Ready node, setting off: keep", []client.Object{terminating(pod("ns", "a", "u1", "n1", corev1.PodRunning, ""), long, 30), readyNode("n1", corev1.ConditionTrue)},
			h, false, true, ""},
		{"overdue on a NotReady node, setting off: keep", []client.Object{terminating(pod("ns", "a", "u1", "n1", corev1.PodRunning, ""), long, 30), readyNode("n1", corev1.ConditionUnknown)},
			h, true, false, ""},
		{"within deletionTimestamp + grace: keep", []client.Object{terminating(pod("ns", "a", "u1", "n1", corev1.PodRunning, ""), now.Add(-40*time.Second), 30), readyNode("n1", corev1.ConditionFalse)},
			h, true, true, ""},
		{"StatefulSet pod overdue: keep", []client.Object{sts("ns", "web", 3, 0), terminating(pod("ns", "web-0", "u1", "n1", corev1.PodRunning, "web"), long, 30), readyNode("n1", corev1.ConditionFalse)},
			gcHolder{ns: "ns", pod: "web-0", uid: "u1", node: "n1", sts: "web"}, true, true, ""},
		{"StatefulSet-owned pod, holder without sts: keep", []client.Object{terminating(pod("ns", "a", "u1", "n1", corev1.PodRunning, "web"), long, 30), readyNode("n1", corev1.ConditionFalse)},
			h, true, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(allotk8s.NewScheme()).WithObjects(tt.objs...).Build()
			v := gcView{r: c, pol: gcPolicy{now: func() time.Time { return now }, terminatingReady: tt.onReady, terminatingNotReady: tt.onNotReady}}
			got, err := v.holderGone(context.Background(), tt.h)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("holderGone = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestStsOrdinal(t *testing.T) {
	for _, tt := range []struct {
		pod, set string
		want     int64
		ok       bool
	}{
		{"web-0", "web", 0, true}, {"web-12", "web", 12, true}, {"web-01", "web", 0, false},
		{"web-", "web", 0, false}, {"web-x", "web", 0, false}, {"web-a-1", "web", 0, false},
		{"web-a-1", "web-a", 1, true}, {"other-1", "web", 0, false},
	} {
		got, ok := stsOrdinal(tt.pod, tt.set)
		if got != tt.want || ok != tt.ok {
			t.Errorf("stsOrdinal(%q, %q) = %d, %v; want %d, %v", tt.pod, tt.set, got, ok, tt.want, tt.ok)
		}
	}
}

func claimFor(ip, pool, ns, podName, uid, iface string) *allotv1.AddressClaim {
	a := netip.MustParseAddr(ip)
	return &allotv1.AddressClaim{ObjectMeta: metav1.ObjectMeta{Name: allotk8s.ClaimName(a)},
		Spec: allotv1.AddressClaimSpec{IP: ip, Pool: pool, Holder: allotv1.AddressHolder{
			Namespace: ns, Pod: podName, PodUID: uid, Node: "n1", Interface: iface}}}
}

// TestDuplicates: extra claims of one interface are those the endpoint does not list; with no
// endpoint (or one listing none of them) nothing is decided.
func TestDuplicates(t *testing.T) {
	ep := &allotv1.AllotEndpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"},
		Spec: allotv1.AllotEndpointSpec{PodUID: "u1", Interfaces: []allotv1.EndpointInterface{{Interface: "eth0",
			IPs: []allotv1.EndpointIP{{Family: "ipv4", Address: "10.0.0.2/24"}, {Family: "ipv6", Address: "fd00::2/64"}}}}}}
	items := func(cs ...*allotv1.AddressClaim) []*gcItem {
		var out []*gcItem
		for _, c := range cs {
			out = append(out, claimItem(c))
		}
		return out
	}
	c := fake.NewClientBuilder().WithScheme(allotk8s.NewScheme()).WithObjects(ep).Build()
	v := gcView{r: c}
	got, err := v.duplicates(context.Background(), items(
		claimFor("10.0.0.2", "p", "ns", "a", "u1", "eth0"),
		claimFor("10.0.0.3", "p", "ns", "a", "u1", "eth0"),
		claimFor("fd00::2", "p", "ns", "a", "u1", "eth0"),  // the v6 one: alone in its family
		claimFor("10.0.0.9", "p", "ns", "a", "u1", "net1"), // another interface, alone
		claimFor("10.0.0.7", "p", "ns", "b", "u7", "eth0"), // no endpoint
		claimFor("10.0.0.8", "p", "ns", "b", "u7", "eth0"),
	))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got["claim/v4-10.0.0.3"] {
		t.Fatalf("duplicates = %v; want only claim/v4-10.0.0.3", got)
	}
}

func testPool(name, created string, subnet string, ips ...string) allotv1.SharedIPPool {
	ts, _ := time.Parse(time.RFC3339, created)
	return allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(ts)},
		Spec: allotv1.SharedIPPoolSpec{IPv4: &allotv1.SharedPoolFamily{Subnet: subnet, IPs: ips}}}
}

// TestPoolProblems: the webhook's verdicts agree with sharedpool.Conflicts (what it lets in is
// never marked AddressConflict), and each refusal names the field.
func TestPoolProblems(t *testing.T) {
	existing := []allotv1.SharedIPPool{
		testPool("a", "2024-01-01T00:00:00Z", "10.0.0.0/24", "10.0.0.10-10.0.0.20"),
		testPool("b", "2024-01-02T00:00:00Z", "10.1.0.0/16", "10.1.0.10"),
	}
	tests := []struct {
		name   string
		pool   allotv1.SharedIPPool
		claims []allotv1.AddressClaim
		want   []string // substrings, one per problem; none: allowed
	}{
		{"disjoint in one subnet", testPool("c", "2025-01-01T00:00:00Z", "10.0.0.0/24", "10.0.0.21-10.0.0.30"), nil, nil},
		{"shares addresses", testPool("c", "2025-01-01T00:00:00Z", "10.0.0.0/24", "10.0.0.20-10.0.0.30"), nil,
			[]string{`spec.ipv4.ips: 1 address(es) (10.0.0.20) are also in SharedIPPool "a"`}},
		{"overlapping subnet", testPool("c", "2025-01-01T00:00:00Z", "10.1.2.0/24", "10.1.2.5"), nil,
			[]string{`spec.ipv4.subnet: 10.1.2.0/24 overlaps the subnet 10.1.0.0/16 of SharedIPPool "b"`}},
		{"update of an existing pool against itself only", existing[0], nil, nil},
		{"held address removed", testPool("a", "2024-01-01T00:00:00Z", "10.0.0.0/24", "10.0.0.10-10.0.0.14"),
			[]allotv1.AddressClaim{*claimFor("10.0.0.15", "a", "ns", "p1", "u", "eth0"), *claimFor("10.0.0.12", "a", "ns", "p2", "u", "eth0")},
			[]string{"cannot remove addresses pods hold: 10.0.0.15 held by ns/p1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := sharedpool.Resolve(&tt.pool, sharedpool.Reserved{})
			if err != nil {
				t.Fatal(err)
			}
			got := poolProblems(&tt.pool, res, existing, tt.claims)
			if len(got) != len(tt.want) {
				t.Fatalf("problems = %q; want %d matching %q", got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("problem %d = %q; want it to contain %q", i, got[i], tt.want[i])
				}
			}
			// Agreement with the deterministic verdict the agents use.
			all := []allotv1.SharedIPPool{tt.pool}
			for _, e := range existing {
				if e.Name != tt.pool.Name {
					all = append(all, e)
				}
			}
			conflicted := sharedpool.Conflicts(all)[tt.pool.Name] != ""
			overlapRefused := len(got) > 0 && !strings.Contains(got[0], "cannot remove")
			if conflicted != overlapRefused {
				t.Errorf("webhook refused overlap = %v but Conflicts says %v", overlapRefused, conflicted)
			}
		})
	}
}

func TestValidateReservedIP(t *testing.T) {
	ok := &allotv1.ReservedIP{Spec: allotv1.ReservedIPSpec{IPs: []string{"10.0.0.1", "fd00::1-fd00::9"}}}
	if p := validateReservedIP(ok); len(p) != 0 {
		t.Fatalf("valid ReservedIP refused: %q", p)
	}
	bad := &allotv1.ReservedIP{Spec: allotv1.ReservedIPSpec{IPs: []string{"10.0.0.1", "10.0.0.9-10.0.0.2"}}}
	if p := validateReservedIP(bad); len(p) != 1 || !strings.Contains(p[0], "spec.ips[1]") {
		t.Fatalf("problems = %q; want one naming spec.ips[1]", p)
	}
}

// TestMergeCABundle: a replica's CA is added to the others', expired ones and copies of ours
// are dropped, and the bundle stays bounded.
func TestMergeCABundle(t *testing.T) {
	var cas [][]byte
	for range maxCABundleCerts + 2 {
		_, ca, err := generateCerts([]string{"localhost"})
		if err != nil {
			t.Fatal(err)
		}
		cas = append(cas, ca)
	}
	bundle := []byte{}
	for _, ca := range cas {
		bundle = mergeCABundle(bundle, ca, time.Now())
	}
	bundle = mergeCABundle(bundle, cas[len(cas)-1], time.Now()) // same replica again
	n := 0
	for rest := bundle; ; n++ {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Fatal(err)
		}
	}
	if n != maxCABundleCerts {
		t.Fatalf("bundle holds %d certificates; want %d", n, maxCABundleCerts)
	}
	if !strings.HasPrefix(string(bundle), string(cas[len(cas)-1])) {
		t.Fatal("the newest CA is not first")
	}
	if got := mergeCABundle(bundle, cas[0], time.Now().AddDate(20, 0, 0)); string(got) != string(cas[0]) {
		t.Fatal("expired CAs were kept")
	}
}
