package main

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/test/k8senv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// claim builds an AddressClaim the way agents write them: named after the address, labelled
// with pool, node, namespace and pod.
func claim(ip, pool, ns, pod, node, ifName, sts string) *allotv1.AddressClaim {
	a := netip.MustParseAddr(ip)
	return &allotv1.AddressClaim{
		ObjectMeta: metav1.ObjectMeta{Name: allotk8s.ClaimName(a), Labels: map[string]string{
			allotv1.LabelClaimPool: allotk8s.LabelValue(pool), allotv1.LabelClaimNode: allotk8s.LabelValue(node),
			allotv1.LabelClaimNamespace: allotk8s.LabelValue(ns), allotv1.LabelClaimPod: allotk8s.LabelValue(pod),
		}},
		Spec: allotv1.AddressClaimSpec{IP: a.String(), Pool: pool, Holder: allotv1.AddressHolder{
			Namespace: ns, Pod: pod, PodUID: "uid-" + pod, Node: node, ContainerID: "ctr-" + pod, Interface: ifName, StatefulSet: sts,
		}},
	}
}

// TestSharedViews runs allotctl cluster shared-pools and claims against a real API server
// holding SharedIPPools and AddressClaims as agents and the operator write them.
func TestSharedViews(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pools := []*allotv1.SharedIPPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "underlay"}, Spec: allotv1.SharedIPPoolSpec{
			IPv4: &allotv1.SharedPoolFamily{Subnet: "172.18.0.0/16", IPs: []string{"172.18.0.2-172.18.0.101"}, Gateway: "172.18.0.1",
				Routes: []allotv1.RouteSpec{{Dst: "10.96.0.0/12", Gw: "172.18.0.254"}}},
			IPv6:          &allotv1.SharedPoolFamily{Subnet: "fd00:18::/64", IPs: []string{"fd00:18::2-fd00:18::ff"}, Gateway: "fd00:18::1"},
			PoolSelection: allotv1.PoolSelection{Default: true}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "storage"}, Spec: allotv1.SharedIPPoolSpec{
			IPv4: &allotv1.SharedPoolFamily{Subnet: "192.168.50.0/24", IPs: []string{"192.168.50.10", "192.168.50.11"}},
			PoolSelection: allotv1.PoolSelection{Disable: true, NodeName: []string{"node-a"},
				PodAffinity: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, MultusName: []string{"kube-system/storage"}}}},
		// Held by a finalizer while it is deleted: shows as Terminating.
		{ObjectMeta: metav1.ObjectMeta{Name: "going", Finalizers: []string{"test.allot.io/hold"}}, Spec: allotv1.SharedIPPoolSpec{
			IPv4: &allotv1.SharedPoolFamily{Subnet: "192.168.60.0/24", IPs: []string{"192.168.60.10-192.168.60.19"}}}},
	}
	for _, p := range pools {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	now := metav1.NewTime(time.Now())
	pools[0].Status = allotv1.SharedIPPoolStatus{
		IPv4: &allotv1.SharedFamilyStatus{TotalIPs: 100, AllocatedIPs: 3}, IPv6: &allotv1.SharedFamilyStatus{TotalIPs: 254, AllocatedIPs: 1},
		Conditions: []metav1.Condition{
			{Type: allotv1.ConditionReady, Status: metav1.ConditionTrue, Reason: allotv1.ReasonValid, LastTransitionTime: now},
			{Type: allotv1.ConditionExhausted, Status: metav1.ConditionFalse, Reason: "Free", LastTransitionTime: now},
		}}
	pools[1].Status = allotv1.SharedIPPoolStatus{
		IPv4: &allotv1.SharedFamilyStatus{TotalIPs: 2, AllocatedIPs: 2},
		Conditions: []metav1.Condition{
			{Type: allotv1.ConditionReady, Status: metav1.ConditionFalse, Reason: allotv1.ReasonOverlap, LastTransitionTime: now},
			{Type: allotv1.ConditionAddressConflict, Status: metav1.ConditionTrue, Reason: allotv1.ReasonOverlap, Message: "overlaps pool x", LastTransitionTime: now},
			{Type: allotv1.ConditionExhausted, Status: metav1.ConditionTrue, Reason: allotv1.ReasonPoolExhausted, LastTransitionTime: now},
		}}
	for _, p := range pools[:2] {
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete(ctx, pools[2]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pools[2].Finalizers = nil
		_ = c.Patch(context.Background(), pools[2], client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
	})

	// 172.18.0.9 < 172.18.0.10 numerically (not as strings); IPv4 before IPv6 in one pool.
	for _, cl := range []*allotv1.AddressClaim{
		claim("172.18.0.10", "underlay", "web", "front-1", "node-b", "eth0", ""),
		claim("fd00:18::5", "underlay", "web", "front-0", "node-a", "eth0", ""),
		claim("172.18.0.9", "underlay", "web", "front-0", "node-a", "eth0", ""),
		claim("172.18.0.100", "underlay", "db", "pg-0", "node-a", "eth0", "pg"),
		claim("192.168.50.11", "storage", "db", "pg-0", "node-a", "net1", "pg"),
		claim("192.168.50.10", "storage", "db", "pg-1", "node-b", "net1", "pg"),
	} {
		if err := c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	kc := writeKubeconfig(t, env.Config)

	out := run(t, "cluster", "shared-pools", "--kubeconfig", kc)
	t.Logf("allotctl cluster shared-pools:\n%s", out)
	wantLines(t, "shared-pools", out, []string{
		"POOL      FAMILY  SUBNET           USED/TOTAL  GATEWAY     DEFAULT  DISABLE  SELECTED BY                      CONDITIONS",
		"going     ipv4    192.168.60.0/24  0/?         -           false    false    -                                Terminating",
		"storage   ipv4    192.168.50.0/24  2/2         -           false    true     podAffinity,nodeName,multusName  AddressConflict,Exhausted,Ready=False",
		"underlay  ipv4    172.18.0.0/16    3/100       172.18.0.1  true     false    -                                Ready",
		"underlay  ipv6    fd00:18::/64     1/254       fd00:18::1  true     false    -                                Ready",
	})

	out = run(t, "cluster", "claims", "--kubeconfig", kc)
	t.Logf("allotctl cluster claims:\n%s", out)
	wantLines(t, "claims", out, []string{
		"IP             POOL      POD          NODE    INTERFACE  STATEFULSET  AGE",
		"192.168.50.10  storage   db/pg-1      node-b  net1       pg",
		"192.168.50.11  storage   db/pg-0      node-a  net1       pg",
		"172.18.0.9     underlay  web/front-0  node-a  eth0       -",
		"172.18.0.10    underlay  web/front-1  node-b  eth0       -",
		"172.18.0.100   underlay  db/pg-0      node-a  eth0       pg",
		"fd00:18::5     underlay  web/front-0  node-a  eth0       -",
	})

	for _, tc := range []struct {
		name string
		args []string
		want []string // IPs, in order
	}{
		{"all", nil, []string{"192.168.50.10", "192.168.50.11", "172.18.0.9", "172.18.0.10", "172.18.0.100", "fd00:18::5"}},
		{"pool", []string{"--pool", "underlay"}, []string{"172.18.0.9", "172.18.0.10", "172.18.0.100", "fd00:18::5"}},
		{"node", []string{"--node", "node-b"}, []string{"192.168.50.10", "172.18.0.10"}},
		{"namespace", []string{"--namespace", "db"}, []string{"192.168.50.10", "192.168.50.11", "172.18.0.100"}},
		{"all three", []string{"--pool", "underlay", "--node", "node-a", "--namespace", "web"}, []string{"172.18.0.9", "fd00:18::5"}},
		{"none", []string{"--pool", "nothing"}, []string{}},
	} {
		t.Run("json "+tc.name, func(t *testing.T) {
			args := append([]string{"cluster", "claims", "--kubeconfig", kc, "-o", "json"}, tc.args...)
			var rows []ClaimRow
			if err := json.Unmarshal([]byte(run(t, args...)), &rows); err != nil {
				t.Fatal(err)
			}
			got := make([]string, len(rows))
			for i, r := range rows {
				got[i] = r.IP
				if r.Created.IsZero() || r.ContainerID != "ctr-"+r.Pod || r.PodUID != "uid-"+r.Pod {
					t.Errorf("row %+v: missing creation time, container ID or pod UID", r)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("claims %v\n got %v\nwant %v", tc.args, got, tc.want)
			}
		})
	}

	var prow []SharedPoolRow
	if err := json.Unmarshal([]byte(run(t, "cluster", "shared-pools", "--kubeconfig", kc, "-o", "json")), &prow); err != nil {
		t.Fatal(err)
	}
	if len(prow) != 4 || prow[0].Total != nil || !prow[0].Terminating || prow[2].Pool != "underlay" || *prow[2].Total != 100 ||
		prow[2].Used != 3 || len(prow[2].Routes) != 1 || prow[2].Routes[0] != "10.96.0.0/12 via 172.18.0.254" || len(prow[1].Conditions) != 3 {
		t.Fatalf("json rows %+v", prow)
	}
}

func wantLines(t *testing.T, what, out string, want []string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != len(want) {
		t.Errorf("%s: %d lines, want %d", what, len(lines), len(want))
	}
	for i := range min(len(lines), len(want)) {
		if !strings.HasPrefix(strings.TrimRight(lines[i], " "), want[i]) {
			t.Errorf("%s line %d\n got %q\nwant %q", what, i, lines[i], want[i])
		}
	}
}

func TestClaimRowsSort(t *testing.T) {
	// Without the API server: the order is pool, then address numerically, whatever the
	// listing order.
	var cs []allotv1.AddressClaim
	for _, ip := range []string{"10.0.0.10", "fd00::a", "10.0.0.2", "fd00::9", "10.0.1.1"} {
		cs = append(cs, *claim(ip, "p", "ns", "pod", "n", "eth0", ""))
	}
	cs = append(cs, *claim("10.9.9.9", "a", "ns", "pod", "n", "eth0", ""))
	rows := claimRows(cs, claimFilter{})
	var got []string
	for _, r := range rows {
		got = append(got, r.Pool+":"+r.IP)
	}
	want := "a:10.9.9.9 p:10.0.0.2 p:10.0.0.10 p:10.0.1.1 p:fd00::9 p:fd00::a"
	if strings.Join(got, " ") != want {
		t.Fatalf("got %v want %s", got, want)
	}
}
