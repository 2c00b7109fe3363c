package k8se2e

// Shared pools across ten simulated nodes on a real API server, with the operator (status,
// garbage collection) running: a pool sized exactly for the pods raced for by every node,
// exhaustion and recovery, a StatefulSet pod recreated on another node, a Multus-style pod
// with two interfaces, and pods deleted without a CNI DEL.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/cniplugin"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	bigPoolSize = 200
	gcGrace     = 2 * time.Second
)

func TestSharedTenNodes(t *testing.T) {
	nodes := map[string]map[string]string{}
	for i := range 10 {
		nodes[fmt.Sprintf("node-%d", i)] = map[string]string{"zone": fmt.Sprintf("z%d", i%2)}
	}
	se := newSharedEnv(t, nodes)
	ctx := context.Background()
	se.namespace("race", nil, nil)
	se.namespace("apps", nil, nil)
	se.create(
		// Exactly one address per pod of the race, and the cluster default.
		sharedPool("big", &allotv1.SharedPoolFamily{Subnet: "10.40.0.0/16", IPs: []string{"10.40.0.1-10.40.0.200"}, Gateway: "10.40.255.254"},
			nil, allotv1.PoolSelection{Default: true}),
		sharedPool("apps", &allotv1.SharedPoolFamily{Subnet: "10.42.0.0/24", IPs: []string{"10.42.0.10-10.42.0.50"}, Gateway: "10.42.0.1"},
			&allotv1.SharedPoolFamily{Subnet: "fd00:42::/64", IPs: []string{"fd00:42::10-fd00:42::50"}, Gateway: "fd00:42::1"}, allotv1.PoolSelection{}),
		sharedPool("storage-pool", &allotv1.SharedPoolFamily{Subnet: "10.43.0.0/24", IPs: []string{"10.43.0.10-10.43.0.50"},
			Routes: []allotv1.RouteSpec{{Dst: "10.44.0.0/16", Gw: "10.43.0.254"}}}, nil, allotv1.PoolSelection{}),
	)
	se.startOperator(gcGrace)
	var names []string
	for _, n := range sortedKeys(nodes) {
		se.startAgent(n)
		names = append(names, n)
	}
	se.havePools("big/ipv4", "apps/ipv4", "apps/ipv6", "storage-pool/ipv4")

	var racers []*corev1.Pod
	racerNode := map[string]*node{}
	t.Run("ten nodes race for a pool sized exactly for the pods", func(t *testing.T) {
		se := se.with(t)
		for i := range bigPoolSize {
			nd := se.nodes[names[i%len(names)]]
			p := se.pod("race", fmt.Sprintf("r-%03d", i), nd.name, nil, nil)
			racers = append(racers, p)
			racerNode[p.Name] = nd
		}
		begin := time.Now()
		outs := make([]cniOut, len(racers))
		errs := make([]error, len(racers))
		var wg sync.WaitGroup
		sem := make(chan struct{}, 40)
		for i, p := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				outs[i], errs[i] = se.execRaw(ctx, cniCall{cmd: "ADD", node: racerNode[p.Name], pod: p})
			}()
		}
		wg.Wait()
		t.Logf("%d ADDs across 10 nodes in %s", len(racers), time.Since(begin).Round(time.Millisecond))
		seen := map[string]string{}
		for i, p := range racers {
			if errs[i] != nil {
				t.Fatalf("%s: %v", p.Name, errs[i])
			}
			if outs[i].err != nil {
				t.Fatalf("%s on %s: %s", p.Name, racerNode[p.Name].name, outs[i])
			}
			a := outs[i].addrs()
			if len(a) != 1 || !inRange(a[0], "10.40.0.1", "10.40.0.200") || !strings.HasSuffix(a[0], "/16") {
				t.Fatalf("%s got %v", p.Name, a)
			}
			if who, dup := seen[a[0]]; dup {
				t.Errorf("%s handed to %s and %s", a[0], who, p.Name)
			}
			seen[a[0]] = p.Name
			if gw := outs[i].res.IPs[0].Gateway.String(); gw != "10.40.255.254" {
				t.Errorf("%s: gateway %s", p.Name, gw)
			}
		}
		// The records agree: one claim per address, held by the pod that got it.
		claims := se.claims()
		if len(claims) != bigPoolSize {
			t.Errorf("%d claims, want %d", len(claims), bigPoolSize)
		}
		for a, c := range claims {
			want := seen[netip.PrefixFrom(a, 16).String()]
			h := c.Spec.Holder
			if h.Pod != want || h.Namespace != "race" || h.Node != racerNode[want].name || h.Interface != "eth0" || c.Spec.Pool != "big" {
				t.Errorf("claim %s: %+v (pool %s), want pod race/%s on %s", c.Name, h, c.Spec.Pool, want, racerNode[want].name)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("allotctl shows used/total and every holder", func(t *testing.T) {
		se := se.with(t)
		ctl := buildCmd(t, t.TempDir(), "allotctl")
		type poolRow struct {
			Pool   string `json:"pool"`
			Family string `json:"family"`
			Used   int64  `json:"used"`
			Total  *int64 `json:"total"`
		}
		eventually(t, "pool big 200/200 in allotctl cluster shared-pools", 20*time.Second, func() (bool, string) {
			var rows []poolRow
			if err := runJSON(ctl, &rows, "cluster", "shared-pools", "--kubeconfig", se.kc, "-o", "json"); err != nil {
				return false, err.Error()
			}
			for _, r := range rows {
				if r.Pool == "big" && r.Family == "ipv4" {
					return r.Used == bigPoolSize && r.Total != nil && *r.Total == bigPoolSize, fmt.Sprintf("%+v", r)
				}
			}
			return false, fmt.Sprintf("%+v", rows)
		})
		type claimRow struct {
			IP, Pool, Namespace, Pod, Node, Interface string
		}
		var rows []claimRow
		if err := runJSON(ctl, &rows, "cluster", "claims", "--kubeconfig", se.kc, "--pool", "big", "--node", "node-3", "-o", "json"); err != nil {
			t.Fatal(err)
		}
		if len(rows) != bigPoolSize/10 {
			t.Errorf("node-3 holds %d addresses of big, want %d", len(rows), bigPoolSize/10)
		}
		for i, r := range rows {
			if racerNode[r.Pod] == nil || racerNode[r.Pod].name != "node-3" || r.Interface != "eth0" || r.Namespace != "race" {
				t.Errorf("row %+v", r)
			}
			if i > 0 && !netip.MustParseAddr(rows[i-1].IP).Less(netip.MustParseAddr(r.IP)) {
				t.Errorf("rows not sorted by address: %s before %s", rows[i-1].IP, r.IP)
			}
		}
		out, err := exec.Command(ctl, "cluster", "claims", "--kubeconfig", se.kc, "--pool", "big", "--node", "node-3").CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		t.Logf("allotctl cluster claims --pool big --node node-3:\n%s", out)
	})

	late := se.pod("race", "late", "node-7", nil, nil)
	t.Run("exhaustion gives a clear CNI error, then succeeds once an address is freed", func(t *testing.T) {
		se := se.with(t)
		out := se.exec(cniCall{cmd: "ADD", node: se.nodes["node-7"], pod: late})
		if out.err == nil {
			t.Fatalf("ADD into a full pool succeeded: %v", out.addrs())
		}
		if (out.err.Code != cniplugin.ErrNoPool && out.err.Code != cniplugin.ErrExhausted) || !strings.Contains(out.err.Msg, `"big"`) ||
			!strings.Contains(out.err.Msg, "exhausted") {
			t.Errorf("CNI error %d %q: want code %d or %d naming pool \"big\" as exhausted", out.err.Code, out.err.Msg, cniplugin.ErrNoPool, cniplugin.ErrExhausted)
		}
		t.Logf("full pool: CNI error %d: %s", out.err.Code, out.err.Msg)
		// A pod on another node goes away (CNI DEL); its address comes back.
		gone := racers[3]
		freed := se.claimsOf(gone)
		if len(freed) != 1 {
			t.Fatalf("claims of %s: %+v", gone.Name, freed)
		}
		se.del(cniCall{node: racerNode[gone.Name], pod: gone})
		if len(se.claimsOf(gone)) != 0 {
			t.Fatalf("CNI DEL left the claim of %s", gone.Name)
		}
		if se.endpoint("race", gone.Name) != nil {
			t.Errorf("CNI DEL left the AllotEndpoint of %s (not a StatefulSet pod)", gone.Name)
		}
		var got []string
		eventually(t, "the late pod gets the freed address", 15*time.Second, func() (bool, string) {
			out := se.exec(cniCall{cmd: "ADD", node: se.nodes["node-7"], pod: late})
			if out.err != nil {
				return false, out.String()
			}
			got = out.addrs()
			return true, ""
		})
		if len(got) != 1 || got[0] != freed[0].Spec.IP+"/16" {
			t.Fatalf("late pod got %v, want the freed %s", got, freed[0].Spec.IP)
		}
	})

	t.Run("StatefulSet pod recreated on another node keeps its address", func(t *testing.T) {
		se := se.with(t)
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db"},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To[int32](2), ServiceName: "db",
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
				},
			},
		}
		se.create(sts)
		stsPod := func(name, nodeName string) *corev1.Pod {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, Labels: map[string]string{"app": "db"},
					Annotations: map[string]string{annoIPPool: poolsJSON([]string{"apps"}, []string{"apps"})},
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: sts.UID,
						Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
				Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			}
			se.create(p)
			return p
		}
		db0 := stsPod("db-0", "node-1")
		first := se.add(cniCall{node: se.nodes["node-1"], pod: db0}).addrs()
		if len(first) != 2 {
			t.Fatalf("db-0 got %v", first)
		}
		// The pod goes: the runtime's DEL, then the object. Its addresses stay reserved for
		// the StatefulSet, even past the garbage collector's grace.
		se.del(cniCall{node: se.nodes["node-1"], pod: db0})
		if err := se.c.Delete(ctx, db0, ctrlclient.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * gcGrace) // sleep: checks the collector, running several times meanwhile, keeps them
		if n := len(se.claimsOf(db0)); n != 2 {
			t.Fatalf("db-0's claims after its pod was deleted: %d, want 2 (kept for the StatefulSet)", n)
		}
		// Recreated on node-2 (new UID): same addresses.
		db0b := stsPod("db-0", "node-2")
		again := se.add(cniCall{node: se.nodes["node-2"], pod: db0b}).addrs()
		if !slices.Equal(again, first) {
			t.Fatalf("recreated db-0 got %v, want %v", again, first)
		}
		for _, c := range se.claimsOf(db0b) {
			if h := c.Spec.Holder; h.Node != "node-2" || h.PodUID != string(db0b.UID) || h.StatefulSet != "db" {
				t.Errorf("claim %s holder %+v, want node-2, UID %s, StatefulSet db", c.Name, h, db0b.UID)
			}
		}
		ep := se.endpoint("apps", "db-0")
		if ep == nil || ep.Spec.Node != "node-2" || ep.Spec.PodUID != string(db0b.UID) || ep.Spec.StatefulSet != "db" {
			t.Fatalf("AllotEndpoint %+v", ep)
		}
		// Scaled down to zero and the pod gone: the collector frees the removed ordinal.
		se.del(cniCall{node: se.nodes["node-2"], pod: db0b})
		sts.Spec.Replicas = ptr.To[int32](0)
		if err := se.c.Update(ctx, sts); err != nil {
			t.Fatal(err)
		}
		if err := se.c.Delete(ctx, db0b, ctrlclient.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		eventually(t, "db-0's addresses freed after scale-down", 10*gcGrace, func() (bool, string) {
			cs := se.claimsOf(db0b)
			return len(cs) == 0 && se.endpoint("apps", "db-0") == nil, fmt.Sprint(cs)
		})
	})

	t.Run("Multus-style pod: per-interface pools, one AllotEndpoint", func(t *testing.T) {
		se := se.with(t)
		p := se.pod("apps", "two-nics", "node-4", nil, map[string]string{
			annoIPPools: `[{"interface":"eth0","ipv4":["apps"],"ipv6":["apps"]},{"interface":"net1","ipv4":["storage-pool"]}]`,
		})
		nd := se.nodes["node-4"]
		eth0 := se.add(cniCall{node: nd, pod: p})
		net1 := se.add(cniCall{node: nd, pod: p, ifName: "net1", network: netStorage})
		if a := eth0.addrs(); len(a) != 2 || !inRange(a[0], "10.42.0.10", "10.42.0.50") || !inRange(a[1], "fd00:42::10", "fd00:42::50") {
			t.Errorf("eth0 got %v, want pool apps (both families)", a)
		}
		if a := net1.addrs(); len(a) != 1 || !inRange(a[0], "10.43.0.10", "10.43.0.50") {
			t.Errorf("net1 got %v, want storage-pool", a)
		}
		if len(net1.res.Routes) != 1 || net1.res.Routes[0].Dst.String() != "10.44.0.0/16" || net1.res.Routes[0].GW.String() != "10.43.0.254" {
			t.Errorf("net1 routes %v, want 10.44.0.0/16 via 10.43.0.254", net1.res.Routes)
		}
		ep := se.endpoint("apps", "two-nics")
		if ep == nil || len(ep.Spec.Interfaces) != 2 {
			t.Fatalf("AllotEndpoint %+v, want two interfaces", ep)
		}
		byIf := map[string]allotv1.EndpointInterface{}
		for _, it := range ep.Spec.Interfaces {
			byIf[it.Interface] = it
		}
		e0, e1 := byIf["eth0"], byIf["net1"]
		if e0.Network != netUnderlay || len(e0.IPs) != 2 || e0.IPs[0].Pool != "apps" || e0.IPs[0].Gateway != "10.42.0.1" ||
			e0.IPs[0].Address != eth0.addrs()[0] || e0.IPs[1].Address != eth0.addrs()[1] {
			t.Errorf("endpoint eth0 %+v, want network %s, pool apps, %v", e0, netUnderlay, eth0.addrs())
		}
		if e1.Network != netStorage || len(e1.IPs) != 1 || e1.IPs[0].Pool != "storage-pool" || e1.IPs[0].Address != net1.addrs()[0] ||
			len(e1.Routes) != 1 || e1.Routes[0].Dst != "10.44.0.0/16" {
			t.Errorf("endpoint net1 %+v, want network %s, pool storage-pool, %v", e1, netStorage, net1.addrs())
		}
		if n := len(se.claimsOf(p)); n != 3 {
			t.Errorf("%d claims, want 3", n)
		}
		// CHECK, as the runtime sends it with the ADD's result.
		for _, c := range []cniCall{{node: nd, pod: p, cmd: "CHECK", prev: eth0.raw}, {node: nd, pod: p, cmd: "CHECK", ifName: "net1", network: netStorage, prev: net1.raw}} {
			if out := se.exec(c); out.err != nil {
				t.Errorf("CHECK %s: %s", c.withDefaults().ifName, out)
			}
		}
		// DEL of one interface leaves the other.
		se.del(cniCall{node: nd, pod: p, ifName: "net1", network: netStorage})
		if ep := se.endpoint("apps", "two-nics"); ep == nil || len(ep.Spec.Interfaces) != 1 || ep.Spec.Interfaces[0].Interface != "eth0" {
			t.Errorf("after DEL net1: endpoint %+v, want eth0 only", ep)
		}
		if n := len(se.claimsOf(p)); n != 2 {
			t.Errorf("after DEL net1: %d claims, want 2", n)
		}
		if out := se.exec(cniCall{node: nd, pod: p, cmd: "CHECK", ifName: "net1", network: netStorage, prev: net1.raw}); out.err == nil {
			t.Errorf("CHECK net1 after its DEL succeeded")
		} else {
			t.Logf("CHECK net1 after its DEL: %s", out)
		}
		se.del(cniCall{node: nd, pod: p})
		if ep := se.endpoint("apps", "two-nics"); ep != nil {
			t.Errorf("after DEL of both: endpoint %+v remains", ep)
		}
	})

	t.Run("pods deleted without a CNI DEL are garbage collected", func(t *testing.T) {
		se := se.with(t)
		gone := racers[10:20]
		for _, p := range gone {
			if err := se.c.Delete(ctx, p, ctrlclient.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
		}
		begin := time.Now()
		eventually(t, "claims of deleted pods freed", 30*gcGrace, func() (bool, string) {
			var left []string
			for _, p := range gone {
				for _, c := range se.claimsOf(p) {
					left = append(left, c.Name)
				}
			}
			return len(left) == 0, fmt.Sprint(left)
		})
		t.Logf("claims of %d deleted pods freed after %s (GC grace %s)", len(gone), time.Since(begin).Round(time.Millisecond), gcGrace)
		// Every live racer still holds its address.
		held := map[string]int{}
		for _, c := range se.claims() {
			if c.Spec.Holder.Namespace == "race" {
				held[c.Spec.Holder.Pod]++
			}
		}
		for _, p := range racers[20:] {
			if held[p.Name] != 1 {
				t.Errorf("%s: %d claims, want 1", p.Name, held[p.Name])
			}
		}
	})
}

// buildCmd builds ./cmd/<name> into dir.
func buildCmd(t *testing.T, dir, name string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = filepath.Dir(mustGoMod(t))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, b)
	}
	return bin
}

// runJSON runs a command printing JSON and decodes its output into v.
func runJSON(bin string, v any, args ...string) error {
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s %v: %v: %s", filepath.Base(bin), args, err, stderr.String())
	}
	return json.Unmarshal(out, v)
}
