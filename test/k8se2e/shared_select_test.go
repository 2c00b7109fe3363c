package k8se2e

// Spiderpool's pool selection (the spiderpool-priority policy), end to end: real Pod and
// Namespace objects on a real API server, SharedIPPools and ReservedIPs as an operator writes
// them, two agents, and the real allot-cni exec'd against an agent's socket. Every candidate
// source, every filter and the affinity ordering (with the three examples of Spiderpool's
// documentation) is exercised through a CNI ADD.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/cniplugin"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Multus's annotations: the cluster network of eth0, and the extra networks of a pod.
const (
	annoMultusDefault = "v1.multus-cni.io/default-network"
)

// v4pool is an IPv4-only pool on subnet 10.30.<n>.0/24 handing out count addresses from
// 10.30.<n>.10.
func v4pool(name string, n, count int, sel allotv1.PoolSelection) *allotv1.SharedIPPool {
	ips := fmt.Sprintf("10.30.%d.10", n)
	if count > 1 {
		ips += fmt.Sprintf("-10.30.%d.%d", n, 10+count-1)
	}
	return sharedPool(name, fam(fmt.Sprintf("10.30.%d.0/24", n), ips), nil, sel)
}

func labels(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

// poolOf says which pool of the test an address belongs to (by its 10.30.<n>. subnet).
func inSubnet(addr string, n int) bool {
	return strings.HasPrefix(addr, fmt.Sprintf("10.30.%d.", n))
}

func TestSharedSelection(t *testing.T) {
	se := newSharedEnv(t, map[string]map[string]string{
		"node-1": {"zone": "z1"},
		"node-2": {"zone": "z2"},
	})
	ctx := context.Background()
	se.namespace("plain", map[string]string{"team": "none"}, nil)
	se.namespace("team-a", map[string]string{"team": "a"}, nil)
	se.namespace("nsdef", nil, map[string]string{annoNSDefV4: jsonList("ns-v4"), annoNSDefV6: jsonList("ns-v6")})

	anno := sharedPool("anno",
		&allotv1.SharedPoolFamily{Subnet: "10.30.1.0/24", IPs: []string{"10.30.1.10-10.30.1.19"}, Gateway: "10.30.1.1",
			Routes: []allotv1.RouteSpec{{Dst: "10.96.0.0/12"}, {Dst: "192.168.0.0/16", Gw: "10.30.1.254"}}},
		&allotv1.SharedPoolFamily{Subnet: "fd00:30:1::/64", IPs: []string{"fd00:30:1::10-fd00:30:1::1f"}, Gateway: "fd00:30:1::1",
			Routes: []allotv1.RouteSpec{{Dst: "fd00:96::/108"}}},
		allotv1.PoolSelection{})
	pools := []*allotv1.SharedIPPool{
		anno,
		v4pool("anno-b", 2, 10, allotv1.PoolSelection{}),
		v4pool("ns-v4", 3, 10, allotv1.PoolSelection{}),
		sharedPool("ns-v6", nil, fam("fd00:30:3::/64", "fd00:30:3::10-fd00:30:3::1f"), allotv1.PoolSelection{}),
		v4pool("cni-a", 4, 10, allotv1.PoolSelection{NodeAffinity: labels("zone", "z2")}),
		v4pool("cni-b", 5, 10, allotv1.PoolSelection{}),
		v4pool("cluster-def", 6, 10, allotv1.PoolSelection{Default: true}),

		v4pool("fallback", 10, 20, allotv1.PoolSelection{}),
		v4pool("f-disable", 11, 5, allotv1.PoolSelection{Disable: true}),
		v4pool("f-nodename", 12, 5, allotv1.PoolSelection{NodeName: []string{"node-2"}}),
		v4pool("f-nodeaff", 13, 5, allotv1.PoolSelection{NodeAffinity: labels("zone", "z2")}),
		v4pool("f-nsname", 14, 5, allotv1.PoolSelection{NamespaceName: []string{"team-a"}}),
		v4pool("f-nsaff", 15, 5, allotv1.PoolSelection{NamespaceAffinity: labels("team", "a")}),
		v4pool("f-podaff", 16, 5, allotv1.PoolSelection{PodAffinity: labels("app", "db")}),
		sharedPool("f-excluded", &allotv1.SharedPoolFamily{Subnet: "10.30.18.0/24", IPs: []string{"10.30.18.10-10.30.18.11"},
			ExcludeIPs: []string{"10.30.18.10", "10.30.18.11"}}, nil, allotv1.PoolSelection{}),
		v4pool("f-reserved", 19, 2, allotv1.PoolSelection{}),
		v4pool("f-exhausted", 20, 1, allotv1.PoolSelection{}),
		v4pool("f-terminating", 21, 5, allotv1.PoolSelection{}),

		// Spiderpool's three documented ordering examples: A ranks above B in each.
		v4pool("o1-a", 40, 5, allotv1.PoolSelection{PodAffinity: labels("app", "web"), NodeName: []string{"node-1"}}),
		v4pool("o1-b", 41, 5, allotv1.PoolSelection{PodAffinity: labels("app", "web")}),
		v4pool("o2-a", 42, 5, allotv1.PoolSelection{PodAffinity: labels("app", "web")}),
		v4pool("o2-b", 43, 5, allotv1.PoolSelection{NodeName: []string{"node-1"}, NamespaceName: []string{"team-a"}}),
		v4pool("o3-a", 44, 5, allotv1.PoolSelection{PodAffinity: labels("app", "web"), NodeName: []string{"node-1"}}),
		v4pool("o3-b", 45, 5, allotv1.PoolSelection{PodAffinity: labels("app", "web"), NamespaceName: []string{"team-a"},
			MultusName: []string{"kube-system/underlay"}}),

		// One address each: every ADD takes the best-ranked pool that still has one.
		v4pool("r-podaff", 50, 1, allotv1.PoolSelection{PodAffinity: labels("app", "web")}),
		v4pool("r-nodename", 51, 1, allotv1.PoolSelection{NodeName: []string{"node-1"}}),
		v4pool("r-nodeaff", 52, 1, allotv1.PoolSelection{NodeAffinity: labels("zone", "z1")}),
		v4pool("r-nsname", 53, 1, allotv1.PoolSelection{NamespaceName: []string{"team-a"}}),
		v4pool("r-nsaff", 54, 1, allotv1.PoolSelection{NamespaceAffinity: labels("team", "a")}),
		v4pool("r-none", 56, 1, allotv1.PoolSelection{}),

		// Some addresses excluded, one reserved: only the rest are ever handed out.
		sharedPool("part", &allotv1.SharedPoolFamily{Subnet: "10.30.22.0/24", IPs: []string{"10.30.22.10-10.30.22.14"},
			ExcludeIPs: []string{"10.30.22.13"}}, nil, allotv1.PoolSelection{}),

		// Multus network filter and rank (lowest affinity kind, above none).
		v4pool("m-storage", 60, 5, allotv1.PoolSelection{MultusName: []string{"kube-system/storage"}}),
		v4pool("m-underlay", 61, 1, allotv1.PoolSelection{MultusName: []string{"kube-system/underlay"}}),
		v4pool("m-nsaff", 62, 1, allotv1.PoolSelection{NamespaceAffinity: labels("team", "a")}),
		v4pool("m-none", 63, 1, allotv1.PoolSelection{}),
	}
	keys := []string{"anno/ipv6", "ns-v6/ipv6"}
	for _, p := range pools {
		se.create(p)
		if p.Spec.IPv4 != nil {
			keys = append(keys, p.Name+"/ipv4")
		}
	}
	se.create(&allotv1.ReservedIP{ObjectMeta: metav1.ObjectMeta{Name: "outside-k8s"},
		Spec: allotv1.ReservedIPSpec{IPs: []string{"10.30.19.10-10.30.19.11", "10.30.22.11"}}})
	// A finalizer keeps the pool while it is deleted: it is terminating.
	term := pools[len(pools)-1]
	for _, p := range pools {
		if p.Name == "f-terminating" {
			term = p
		}
	}
	term.Finalizers = []string{"test.allot.io/hold"}
	if err := se.c.Update(ctx, term); err != nil {
		t.Fatal(err)
	}
	if err := se.c.Delete(ctx, term); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		term.Finalizers = nil
		_ = se.c.Update(context.Background(), term)
	})

	n1 := se.startAgent("node-1")
	n2 := se.startAgent("node-2")
	se.havePools(keys...)
	se.waitPools("f-reserved has no free address", func(free map[string]uint64) bool { return free["f-reserved/ipv4"] == 0 })

	cniDefaults := map[string]any{"default_ipv4_ippool": []string{"cni-a", "cni-b"}}
	seq := 0
	newPod := func(ns string, nd *node, lbls, annos map[string]string) *corev1.Pod {
		seq++
		return se.pod(ns, fmt.Sprintf("p%d", seq), nd.name, lbls, annos)
	}

	// --- Candidate sources, highest priority first; each overrides all below it. ---

	t.Run("pod annotation ippool overrides namespace, CNI and cluster defaults; result has gateway and routes", func(t *testing.T) {
		se := se.with(t)
		p := newPod("nsdef", n1, nil, map[string]string{annoIPPool: poolsJSON([]string{"anno"}, []string{"anno"})})
		out := se.add(cniCall{node: n1, pod: p, ipam: cniDefaults})
		r := out.res
		if len(r.IPs) != 2 || !inRange(r.IPs[0].Address.String(), "10.30.1.10", "10.30.1.19") ||
			!inRange(r.IPs[1].Address.String(), "fd00:30:1::10", "fd00:30:1::1f") {
			t.Fatalf("addresses %v, want one of pool anno per family", out.addrs())
		}
		if ones, _ := r.IPs[0].Address.Mask.Size(); ones != 24 {
			t.Errorf("IPv4 %s: want the subnet's prefix length /24", r.IPs[0].Address.String())
		}
		if ones, _ := r.IPs[1].Address.Mask.Size(); ones != 64 {
			t.Errorf("IPv6 %s: want the subnet's prefix length /64", r.IPs[1].Address.String())
		}
		if r.IPs[0].Gateway.String() != "10.30.1.1" || r.IPs[1].Gateway.String() != "fd00:30:1::1" {
			t.Errorf("gateways %v %v, want 10.30.1.1 and fd00:30:1::1", r.IPs[0].Gateway, r.IPs[1].Gateway)
		}
		// A route without its own next hop goes via the pool's gateway (RouteSpec.Gw).
		var routes []string
		for _, rt := range r.Routes {
			s := rt.Dst.String()
			if rt.GW != nil {
				s += " via " + rt.GW.String()
			}
			routes = append(routes, s)
		}
		slices.Sort(routes)
		want := []string{"10.96.0.0/12 via 10.30.1.1", "192.168.0.0/16 via 10.30.1.254", "fd00:96::/108 via fd00:30:1::1"}
		if !slices.Equal(routes, want) {
			t.Errorf("routes %q, want %q", routes, want)
		}
		ep := se.endpoint("nsdef", p.Name)
		if ep == nil || len(ep.Spec.Interfaces) != 1 || len(ep.Spec.Interfaces[0].IPs) != 2 ||
			ep.Spec.Interfaces[0].IPs[0].Gateway != "10.30.1.1" || ep.Spec.Node != "node-1" {
			t.Fatalf("AllotEndpoint %+v", ep)
		}
		se.del(cniCall{node: n1, pod: p})
	})

	t.Run("ippools has precedence over ippool", func(t *testing.T) {
		se := se.with(t)
		p := newPod("plain", n1, nil, map[string]string{
			annoIPPools: `[{"interface":"eth0","ipv4":["anno-b"]}]`,
			annoIPPool:  poolsJSON([]string{"anno"}, nil),
		})
		out := se.add(cniCall{node: n1, pod: p})
		if a := out.addrs(); len(a) != 1 || !inSubnet(a[0], 2) {
			t.Fatalf("got %v, want one IPv4 address of anno-b (10.30.2.0/24)", a)
		}
		se.del(cniCall{node: n1, pod: p})
	})

	t.Run("namespace default pools override CNI and cluster defaults", func(t *testing.T) {
		se := se.with(t)
		p := newPod("nsdef", n1, nil, nil)
		out := se.add(cniCall{node: n1, pod: p, ipam: cniDefaults})
		if a := out.addrs(); len(a) != 2 || !inSubnet(a[0], 3) || !inRange(a[1], "fd00:30:3::10", "fd00:30:3::1f") {
			t.Fatalf("got %v, want ns-v4 and ns-v6", a)
		}
		se.del(cniCall{node: n1, pod: p})
	})

	t.Run("CNI config default pools tried in order, node affinity decides", func(t *testing.T) {
		se := se.with(t)
		// Spiderpool's rule: each replica tries the array in order; a node outside the first pool's node
		// affinity gets the next one.
		p1 := newPod("plain", n1, nil, nil)
		p2 := newPod("plain", n2, nil, nil)
		a1 := se.add(cniCall{node: n1, pod: p1, ipam: cniDefaults}).addrs()
		a2 := se.add(cniCall{node: n2, pod: p2, ipam: cniDefaults}).addrs()
		if len(a1) != 1 || !inSubnet(a1[0], 5) {
			t.Errorf("node-1 (zone z1) got %v, want cni-b (cni-a is for zone z2)", a1)
		}
		if len(a2) != 1 || !inSubnet(a2[0], 4) {
			t.Errorf("node-2 (zone z2) got %v, want cni-a, the first of the array", a2)
		}
		se.del(cniCall{node: n1, pod: p1})
		se.del(cniCall{node: n2, pod: p2})
	})

	t.Run("cluster default pool when nothing else names one", func(t *testing.T) {
		se := se.with(t)
		p := newPod("plain", n2, nil, nil)
		out := se.add(cniCall{node: n2, pod: p})
		if a := out.addrs(); len(a) != 1 || !inSubnet(a[0], 6) {
			t.Fatalf("got %v, want cluster-def (spec.default)", a)
		}
		se.del(cniCall{node: n2, pod: p})
	})

	// --- Filters: a pool failing one is skipped for the next candidate; alone, the CNI error
	// names the pool and the filter. Where the filter can pass, a matching pod gets the pool.

	// The exhausted pool's only address goes to another pod first.
	holder := newPod("plain", n2, nil, map[string]string{annoIPPool: poolsJSON([]string{"f-exhausted"}, nil)})
	if a := se.add(cniCall{node: n2, pod: holder}).addrs(); len(a) != 1 || a[0] != "10.30.20.10/24" {
		t.Fatalf("f-exhausted's holder got %v", a)
	}
	se.waitPools("f-exhausted seen full", func(free map[string]uint64) bool { return free["f-exhausted/ipv4"] == 0 })

	type podSpec struct {
		ns     string
		nd     *node
		labels map[string]string
	}
	plainOn1 := podSpec{ns: "plain", nd: n1}
	for _, tc := range []struct {
		pool   string
		subnet int
		fails  podSpec
		reason []string
		passes *podSpec // nil: no pod can get the pool
		code   uint     // default ErrNoPool
	}{
		{"f-disable", 11, plainOn1, []string{`pool "f-disable": disabled`}, nil, 0},
		{"f-nodename", 12, plainOn1, []string{`pool "f-nodename": nodeName ["node-2"] does not include node "node-1"`}, &podSpec{ns: "plain", nd: n2}, 0},
		{"f-nodeaff", 13, plainOn1, []string{`pool "f-nodeaff": nodeAffinity {zone=z2} does not match node "node-1"`}, &podSpec{ns: "plain", nd: n2}, 0},
		{"f-nsname", 14, plainOn1, []string{`pool "f-nsname": namespaceName ["team-a"] does not include namespace "plain"`}, &podSpec{ns: "team-a", nd: n1}, 0},
		{"f-nsaff", 15, plainOn1, []string{`pool "f-nsaff": namespaceAffinity {team=a} does not match namespace "plain"`}, &podSpec{ns: "team-a", nd: n1}, 0},
		{"f-podaff", 16, podSpec{ns: "plain", nd: n1, labels: map[string]string{"app": "web"}},
			[]string{`pool "f-podaff": podAffinity {app=db} does not match pod plain/`}, &podSpec{ns: "plain", nd: n1, labels: map[string]string{"app": "db"}}, 0},
		{"f-excluded", 18, plainOn1, []string{`pool "f-excluded": all addresses are excluded (excludeIPs)`}, nil, 0},
		{"f-reserved", 19, plainOn1, []string{`pool "f-reserved": all addresses are reserved (ReservedIP)`}, nil, 0},
		{"f-exhausted", 20, plainOn1, []string{`pool "f-exhausted": exhausted (no free address)`}, nil, cniplugin.ErrExhausted},
		{"f-terminating", 21, plainOn1, []string{`pool "f-terminating": terminating`}, nil, 0},
	} {
		t.Run("filter "+tc.pool, func(t *testing.T) {
			se := se.with(t)
			// Next candidate.
			p := newPod(tc.fails.ns, tc.fails.nd, tc.fails.labels, map[string]string{annoIPPool: poolsJSON([]string{tc.pool, "fallback"}, nil)})
			if a := se.add(cniCall{node: tc.fails.nd, pod: p}).addrs(); len(a) != 1 || !inSubnet(a[0], 10) {
				t.Errorf("[%s, fallback] gave %v, want fallback's address", tc.pool, a)
			}
			se.del(cniCall{node: tc.fails.nd, pod: p})
			// Alone: the CNI error says why.
			q := newPod(tc.fails.ns, tc.fails.nd, tc.fails.labels, map[string]string{annoIPPool: poolsJSON([]string{tc.pool}, nil)})
			code := cniplugin.ErrNoPool
			if tc.code != 0 {
				code = tc.code // a pool skipped only because it is full: "exhausted", not "no pool"
			}
			out := se.addFails(cniCall{node: tc.fails.nd, pod: q}, code, tc.reason...)
			t.Logf("%s: %s", tc.pool, out.err.Msg)
			if len(se.claimsOf(q)) != 0 {
				t.Errorf("a failed ADD left claims for %s", q.Name)
			}
			if tc.passes == nil {
				return
			}
			r := newPod(tc.passes.ns, tc.passes.nd, tc.passes.labels, map[string]string{annoIPPool: poolsJSON([]string{tc.pool, "fallback"}, nil)})
			if a := se.add(cniCall{node: tc.passes.nd, pod: r}).addrs(); len(a) != 1 || !inSubnet(a[0], tc.subnet) {
				t.Errorf("a matching pod got %v, want %s's address", a, tc.pool)
			}
			se.del(cniCall{node: tc.passes.nd, pod: r})
		})
	}
	se.del(cniCall{node: n2, pod: holder})

	t.Run("excluded and reserved addresses are never handed out", func(t *testing.T) {
		se := se.with(t)
		var got []string
		var held []*corev1.Pod
		for range 3 {
			p := newPod("plain", n1, nil, map[string]string{annoIPPool: poolsJSON([]string{"part"}, nil)})
			got = append(got, se.add(cniCall{node: n1, pod: p}).addrs()...)
			held = append(held, p)
		}
		slices.Sort(got)
		if want := []string{"10.30.22.10/24", "10.30.22.12/24", "10.30.22.14/24"}; !slices.Equal(got, want) {
			t.Errorf("got %v, want %v (10.30.22.13 excluded, 10.30.22.11 reserved)", got, want)
		}
		p := newPod("plain", n1, nil, map[string]string{annoIPPool: poolsJSON([]string{"part"}, nil)})
		se.addFails(cniCall{node: n1, pod: p}, cniplugin.ErrExhausted, `pool "part": exhausted (no free address)`)
		for _, p := range held {
			se.del(cniCall{node: n1, pod: p})
		}
	})

	t.Run("ippool annotation for another interface", func(t *testing.T) {
		se := se.with(t)
		p := newPod("plain", n1, nil, map[string]string{annoIPPool: `{"interface":"net1","ipv4":["anno-b"]}`})
		se.addFails(cniCall{node: n1, pod: p}, cniplugin.ErrNoPool, `pod annotation ipam.spidernet.io/ippool is for interface "net1", not "eth0"`)
		if a := se.add(cniCall{node: n1, pod: p, ifName: "net1", network: netStorage}).addrs(); len(a) != 1 || !inSubnet(a[0], 2) {
			t.Errorf("net1 got %v, want anno-b", a)
		}
		se.del(cniCall{node: n1, pod: p, ifName: "net1", network: netStorage})
	})

	// --- Ordering by affinity kind. ---

	t.Run("ordering: Spiderpool's three examples", func(t *testing.T) {
		se := se.with(t)
		web := map[string]string{"app": "web"}
		multus := map[string]string{annoMultusDefault: "kube-system/underlay"}
		for _, ex := range []struct{ a, b string }{{"o1-a", "o1-b"}, {"o2-a", "o2-b"}, {"o3-a", "o3-b"}} {
			// B listed first: the rank, not the annotation's order, decides.
			annos := map[string]string{annoIPPool: poolsJSON([]string{ex.b, ex.a}, nil)}
			for k, v := range multus {
				annos[k] = v
			}
			p := newPod("team-a", n1, web, annos)
			a := se.add(cniCall{node: n1, pod: p}).addrs()
			want := map[string]int{"o1-a": 40, "o2-a": 42, "o3-a": 44}[ex.a]
			if len(a) != 1 || !inSubnet(a[0], want) {
				t.Errorf("[%s, %s]: got %v, want %s", ex.b, ex.a, a, ex.a)
			}
			se.del(cniCall{node: n1, pod: p})
		}
	})

	t.Run("ordering: podAffinity > nodeName > nodeAffinity > namespaceName > namespaceAffinity > none", func(t *testing.T) {
		se := se.with(t)
		// Listed worst first; each pool has one address, so the n-th pod gets the n-th rank.
		order := []string{"r-podaff", "r-nodename", "r-nodeaff", "r-nsname", "r-nsaff", "r-none"}
		subnets := []int{50, 51, 52, 53, 54, 56}
		listed := make([]string, len(order))
		for i := range order {
			listed[i] = order[len(order)-1-i]
		}
		var held []*corev1.Pod
		for i, want := range order {
			p := newPod("team-a", n1, map[string]string{"app": "web"}, map[string]string{annoIPPool: poolsJSON(listed, nil)})
			a := se.add(cniCall{node: n1, pod: p}).addrs()
			if len(a) != 1 || !inSubnet(a[0], subnets[i]) {
				t.Fatalf("pod %d got %v, want %s (ranked %d)", i, a, want, i+1)
			}
			held = append(held, p)
		}
		p := newPod("team-a", n1, map[string]string{"app": "web"}, map[string]string{annoIPPool: poolsJSON(listed, nil)})
		se.addFails(cniCall{node: n1, pod: p}, cniplugin.ErrExhausted, "exhausted (no free address)")
		for _, p := range held {
			se.del(cniCall{node: n1, pod: p})
		}
	})

	t.Run("multusName: filter and rank (Multus network of the interface)", func(t *testing.T) {
		se := se.with(t)
		// eth0 is on Multus network kube-system/underlay (the pod's default-network
		// annotation); net1 on kube-system/storage (the networks annotation).
		multus := map[string]string{
			annoMultusDefault: "kube-system/underlay",
			annoMultusNet:     `[{"name":"storage","namespace":"kube-system","interface":"net1"}]`,
		}
		with := func(extra map[string]string) map[string]string {
			m := map[string]string{}
			for k, v := range multus {
				m[k] = v
			}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
		// net1 may use m-storage; eth0 may not.
		p := newPod("plain", n1, nil, with(map[string]string{annoIPPools: `[{"interface":"eth0","ipv4":["m-storage","m-none"]},{"interface":"net1","ipv4":["m-storage"]}]`}))
		if a := se.add(cniCall{node: n1, pod: p, ifName: "net1", network: netStorage}).addrs(); len(a) != 1 || !inSubnet(a[0], 60) {
			t.Errorf("net1 got %v, want m-storage", a)
		}
		if a := se.add(cniCall{node: n1, pod: p}).addrs(); len(a) != 1 || !inSubnet(a[0], 63) {
			t.Errorf("eth0 got %v, want m-none (m-storage is for kube-system/storage only)", a)
		}
		se.del(cniCall{node: n1, pod: p, ifName: "net1", network: netStorage})
		se.del(cniCall{node: n1, pod: p})
		q := newPod("plain", n1, nil, with(map[string]string{annoIPPool: poolsJSON([]string{"m-storage"}, nil)}))
		se.addFails(cniCall{node: n1, pod: q}, cniplugin.ErrNoPool, `pool "m-storage": multusName ["kube-system/storage"] does not include Multus network "kube-system/underlay"`)
		// Rank: namespaceAffinity > multusName > none.
		listed := []string{"m-none", "m-underlay", "m-nsaff"}
		var held []*corev1.Pod
		for i, want := range []int{62, 61, 63} {
			p := newPod("team-a", n1, nil, with(map[string]string{annoIPPool: poolsJSON(listed, nil)}))
			if a := se.add(cniCall{node: n1, pod: p}).addrs(); len(a) != 1 || !inSubnet(a[0], want) {
				t.Fatalf("pod %d got %v, want 10.30.%d.0/24", i, a, want)
			}
			held = append(held, p)
		}
		for _, p := range held {
			se.del(cniCall{node: n1, pod: p})
		}
	})

	t.Run("every address freed", func(t *testing.T) {
		se := se.with(t)
		eventually(t, "no claims left", 10*time.Second, func() (bool, string) {
			cs := se.claims()
			return len(cs) == 0, fmt.Sprint(cs)
		})
	})
}

// claimsOf lists the claims whose holder is pod p.
func (se *sharedEnv) claimsOf(p *corev1.Pod) []allotv1.AddressClaim {
	var out []allotv1.AddressClaim
	for _, c := range se.claims() {
		if c.Spec.Holder.Namespace == p.Namespace && c.Spec.Holder.Pod == p.Name {
			out = append(out, c)
		}
	}
	return out
}
