package spiderpoolpriority

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

type mod func(*policy.PoolView)

func pool(name string, fam policy.Family, mods ...mod) policy.PoolView {
	pv := policy.PoolView{Name: name, Family: fam, Total: 254, Free: 100}
	for _, m := range mods {
		m(&pv)
	}
	return pv
}

func v4(name string, mods ...mod) policy.PoolView { return pool(name, policy.IPv4, mods...) }
func v6(name string, mods ...mod) policy.PoolView { return pool(name, policy.IPv6, mods...) }

var (
	isDefault     mod = func(p *policy.PoolView) { p.Default = true }
	isDisabled    mod = func(p *policy.PoolView) { p.Disabled = true }
	isTerminating mod = func(p *policy.PoolView) { p.Terminating = true }
	allExcluded   mod = func(p *policy.PoolView) { p.AllExcluded = true }
	allReserved   mod = func(p *policy.PoolView) { p.AllReserved = true }
	exhausted     mod = func(p *policy.PoolView) { p.Free = 0 }
)

func subnet(s string) mod      { return func(p *policy.PoolView) { p.Subnet = s } }
func nodeName(n ...string) mod { return func(p *policy.PoolView) { p.NodeName = n } }
func nsName(n ...string) mod   { return func(p *policy.PoolView) { p.NamespaceName = n } }
func multus(n ...string) mod   { return func(p *policy.PoolView) { p.MultusName = n } }
func nodeAff(k, v string) mod {
	return func(p *policy.PoolView) { p.NodeAffinity = &policy.LabelSelector{MatchLabels: map[string]string{k: v}} }
}
func nsAff(k, v string) mod {
	return func(p *policy.PoolView) {
		p.NamespaceAffinity = &policy.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
}
func podAff(k, v string) mod {
	return func(p *policy.PoolView) { p.PodAffinity = &policy.LabelSelector{MatchLabels: map[string]string{k: v}} }
}

type rmod func(*policy.PodRequest)

func request(pools []policy.PoolView, mods ...rmod) *policy.PodRequest {
	r := &policy.PodRequest{
		Pod: policy.Pod{Namespace: "team-a", Name: "web-0", UID: "u1",
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{}},
		Namespace: policy.Namespace{Name: "team-a", Labels: map[string]string{"tenant": "a"}, Annotations: map[string]string{}},
		Node:      policy.Node{Name: "n1", Labels: map[string]string{"zone": "z1"}},
		CNI:       policy.CNIRequest{IfName: "eth0", Network: "underlay"},
		Pools:     pools,
	}
	for _, m := range mods {
		m(r)
	}
	return r
}

func podAnno(k, v string) rmod { return func(r *policy.PodRequest) { r.Pod.Annotations[k] = v } }
func nsAnno(k, v string) rmod  { return func(r *policy.PodRequest) { r.Namespace.Annotations[k] = v } }
func ifName(n string) rmod     { return func(r *policy.PodRequest) { r.CNI.IfName = n } }
func multusNet(n string) rmod  { return func(r *policy.PodRequest) { r.CNI.MultusName = n } }
func cniDefaults(v4, v6 []string) rmod {
	return func(r *policy.PodRequest) { r.CNI.DefaultIPv4Pools, r.CNI.DefaultIPv6Pools = v4, v6 }
}

type want struct {
	code   policy.Code
	source string
	v4, v6 []string
	reason []string // substrings of Reason
}

func names(cs []policy.Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Pool)
	}
	return out
}

func check(t *testing.T, req *policy.PodRequest, w want) {
	t.Helper()
	d, err := New().SelectPodPools(context.Background(), req)
	if err != nil {
		t.Fatalf("SelectPodPools error: %v", err)
	}
	if d.Code != w.code {
		t.Fatalf("Code = %v (reason %q), want %v", d.Code, d.Reason, w.code)
	}
	if w.source != "" && d.Source != w.source {
		t.Errorf("Source = %q, want %q", d.Source, w.source)
	}
	if !slices.Equal(names(d.IPv4), w.v4) {
		t.Errorf("IPv4 = %v, want %v", names(d.IPv4), w.v4)
	}
	if !slices.Equal(names(d.IPv6), w.v6) {
		t.Errorf("IPv6 = %v, want %v", names(d.IPv6), w.v6)
	}
	for _, s := range w.reason {
		if !strings.Contains(d.Reason, s) {
			t.Errorf("Reason = %q, want it to contain %q", d.Reason, s)
		}
	}
}

// Spiderpool's candidate pool acquisition: the five sources in strict priority; an earlier one
// overrides later ones.
func TestCandidateSources(t *testing.T) {
	base := []policy.PoolView{
		v4("cluster-v4", isDefault), v6("cluster-v6", isDefault),
		v4("cni-v4-a"), v4("cni-v4-b"), v6("cni-v6"),
		v4("ns-v4"), v6("ns-v6"),
		v4("anno-v4"), v6("anno-v6"), v4("anno-net1-v4"),
		v4("sub-pool-v4-b", subnet("subnet-v4")), v4("sub-pool-v4-a", subnet("subnet-v4")), v6("sub-pool-v6", subnet("subnet-v6")),
		v4("other-subnet", subnet("subnet-x")),
	}
	all := []rmod{
		podAnno(AnnoSubnet, `{"ipv4":["subnet-v4"],"ipv6":["subnet-v6"]}`),
		podAnno(AnnoIPPool, `{"ipv4":["anno-v4"],"ipv6":["anno-v6"]}`),
		nsAnno(AnnoNSDefaultIPv4, `["ns-v4"]`), nsAnno(AnnoNSDefaultIPv6, `["ns-v6"]`),
		cniDefaults([]string{"cni-v4-a"}, []string{"cni-v6"}),
	}
	tests := []struct {
		name string
		mods []rmod
		want want
	}{
		{"priority 1: subnet annotation overrides every other source", all,
			want{code: policy.Decided, source: SourceSubnet, v4: []string{"sub-pool-v4-a", "sub-pool-v4-b"}, v6: []string{"sub-pool-v6"}}},
		{"priority 1: subnets (plural) is read before subnet, per interface",
			append([]rmod{podAnno(AnnoSubnets, `[{"interface":"net1","ipv4":["subnet-x"]},{"interface":"eth0","ipv4":["subnet-v4"]}]`)}, all...),
			want{code: policy.Decided, source: SourceSubnets, v4: []string{"sub-pool-v4-a", "sub-pool-v4-b"}}},
		{"priority 2: pool annotation overrides namespace, CNI and cluster defaults", all[1:],
			want{code: policy.Decided, source: SourceIPPool, v4: []string{"anno-v4"}, v6: []string{"anno-v6"}}},
		{"priority 2: ippools has precedence over ippool",
			append([]rmod{podAnno(AnnoIPPools, `[{"interface":"eth0","ipv4":["anno-net1-v4"],"cleangateway":true}]`)}, all[1:]...),
			want{code: policy.Decided, source: SourceIPPools, v4: []string{"anno-net1-v4"}}},
		{"priority 2: ippools picks the entry of the interface being configured",
			[]rmod{ifName("net1"), podAnno(AnnoIPPools, `[{"interface":"eth0","ipv4":["anno-v4"],"ipv6":["anno-v6"]},{"interface":"net1","ipv4":["anno-net1-v4"]}]`)},
			want{code: policy.Decided, source: SourceIPPools, v4: []string{"anno-net1-v4"}}},
		{"priority 3: namespace defaults override CNI and cluster defaults", all[2:],
			want{code: policy.Decided, source: SourceNamespace, v4: []string{"ns-v4"}, v6: []string{"ns-v6"}}},
		{"priority 3: one family set is enough; the other family is not wanted",
			[]rmod{nsAnno(AnnoNSDefaultIPv4, `["ns-v4"]`), cniDefaults([]string{"cni-v4-a"}, []string{"cni-v6"})},
			want{code: policy.Decided, source: SourceNamespace, v4: []string{"ns-v4"}}},
		{"priority 3: empty arrays on both families fall through",
			[]rmod{nsAnno(AnnoNSDefaultIPv4, `[]`), nsAnno(AnnoNSDefaultIPv6, `[]`), cniDefaults([]string{"cni-v4-a"}, nil)},
			want{code: policy.Decided, source: SourceCNIConfig, v4: []string{"cni-v4-a"}}},
		{"priority 4: CNI config defaults keep the array order", []rmod{cniDefaults([]string{"cni-v4-b", "cni-v4-a"}, []string{"cni-v6"})},
			want{code: policy.Decided, source: SourceCNIConfig, v4: []string{"cni-v4-b", "cni-v4-a"}, v6: []string{"cni-v6"}}},
		{"priority 5: cluster default pools per family", nil,
			want{code: policy.Decided, source: SourceClusterDefault, v4: []string{"cluster-v4"}, v6: []string{"cluster-v6"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, request(slices.Clone(base), tt.mods...), tt.want)
		})
	}
}

func TestNoSourceSkips(t *testing.T) {
	check(t, request([]policy.PoolView{v4("a"), v6("b")}), want{code: policy.Skip, reason: []string{"no cluster default pool"}})
}

func TestClusterDefaultsSortedAndSingleFamily(t *testing.T) {
	// Priority 5 with only IPv4 defaults: IPv6 not wanted; ties keep name order.
	check(t, request([]policy.PoolView{v4("a", isDefault), v4("b", isDefault), v6("c")}),
		want{code: policy.Decided, source: SourceClusterDefault, v4: []string{"a", "b"}})
}

// Malformed or unusable sources are NoFit naming the source and the problem; they never fall
// through to a lower priority (the user asked for something specific).
func TestSourceErrors(t *testing.T) {
	pools := []policy.PoolView{v4("a"), v6("b"), v4("c", isDefault)}
	tests := []struct {
		name   string
		mods   []rmod
		reason []string
	}{
		{"ippools bad JSON names the annotation and the JSON error", []rmod{podAnno(AnnoIPPools, `[{"interface":"eth0","ipv4":["a"]`)},
			[]string{"pod annotation ipam.spidernet.io/ippools is invalid", "invalid JSON", "unexpected EOF"}},
		{"ippool unknown field", []rmod{podAnno(AnnoIPPool, `{"ipv4pools":["a"]}`)},
			[]string{"pod annotation ipam.spidernet.io/ippool is invalid", `unknown field "ipv4pools"`}},
		{"ippool wrong type", []rmod{podAnno(AnnoIPPool, `{"ipv4":"a"}`)},
			[]string{"ipam.spidernet.io/ippool is invalid", "cannot unmarshal"}},
		{"ippool names nothing", []rmod{podAnno(AnnoIPPool, `{}`)},
			[]string{"at least one pool must be named"}},
		{"ippool trailing data", []rmod{podAnno(AnnoIPPool, `{"ipv4":["a"]} x`)},
			[]string{"unexpected data after the value"}},
		{"ippools empty list", []rmod{podAnno(AnnoIPPools, `[]`)},
			[]string{"must list at least one interface"}},
		{"ippools entry without interface", []rmod{podAnno(AnnoIPPools, `[{"ipv4":["a"]}]`)},
			[]string{"[0].interface: must be set"}},
		{"ippools duplicate interface", []rmod{podAnno(AnnoIPPools, `[{"interface":"eth0","ipv4":["a"]},{"interface":"eth0","ipv4":["a"]}]`)},
			[]string{`[1].interface: "eth0" is listed twice`}},
		{"ippools has no entry for this interface", []rmod{ifName("net2"), podAnno(AnnoIPPools, `[{"interface":"eth0","ipv4":["a"]}]`)},
			[]string{`has no entry for interface "net2"`}},
		{"ippool for another interface", []rmod{ifName("net1"), podAnno(AnnoIPPool, `{"interface":"eth0","ipv4":["a"]}`)},
			[]string{`is for interface "eth0", not "net1"`}},
		{"subnets bad JSON", []rmod{podAnno(AnnoSubnets, `nope`)},
			[]string{"pod annotation ipam.spidernet.io/subnets is invalid", "invalid JSON"}},
		{"subnet with cleangateway (not part of the subnet shape)", []rmod{podAnno(AnnoSubnet, `{"ipv4":["s"],"cleangateway":true}`)},
			[]string{`unknown field "cleangateway"`}},
		{"subnet with no pools", []rmod{podAnno(AnnoSubnet, `{"ipv4":["s1"]}`)},
			[]string{`no IPv4 pool belongs to subnet ["s1"]`}},
		{"empty pool name", []rmod{podAnno(AnnoIPPool, `{"ipv4":[""]}`)},
			[]string{"ipv4[0]: pool name must not be empty"}},
		{"malformed pattern", []rmod{podAnno(AnnoIPPool, `{"ipv4":["a[b-]"]}`)},
			[]string{"ipv4[0]: malformed pool name pattern"}},
		{"named pool does not exist", []rmod{podAnno(AnnoIPPool, `{"ipv4":["a","zz"]}`)},
			[]string{`pod annotation ipam.spidernet.io/ippool names IPv4 pool "zz", which does not exist`}},
		{"pool listed twice", []rmod{podAnno(AnnoIPPool, `{"ipv4":["a","a"]}`)},
			[]string{`pool "a" is listed twice for IPv4`}},
		{"pattern matches nothing", []rmod{podAnno(AnnoIPPool, `{"ipv4":["x*"]}`)},
			[]string{`IPv4 pool pattern ["x*"] matches no IPv4 pool`}},
		{"namespace default bad JSON", []rmod{nsAnno(AnnoNSDefaultIPv6, `"b"`)},
			[]string{`namespace "team-a" annotation ipam.spidernet.io/default-ipv6-ippool is invalid`, "cannot unmarshal"}},
		{"CNI default empty name", []rmod{cniDefaults([]string{""}, nil)},
			[]string{"CNI config default_ipv4_ippool[0]: pool name must not be empty"}},
		{"pool of the wrong family is filtered", []rmod{podAnno(AnnoIPPool, `{"ipv4":["b"]}`)},
			[]string{`pool "b": is an IPv6 pool, not IPv4`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, request(slices.Clone(pools), tt.mods...), want{code: policy.NoFit, reason: tt.reason})
		})
	}
}

// Spiderpool's candidate pool filtering: every filter removes the pool and says which filter
// did it.
func TestFilters(t *testing.T) {
	tests := []struct {
		name   string
		pool   policy.PoolView
		mods   []rmod
		reason string // "" means the pool survives
	}{
		{"plain pool survives", v4("p"), nil, ""},
		{"terminating", v4("p", isTerminating), nil, `pool "p": terminating`},
		{"disabled (spec.disable: true)", v4("p", isDisabled), nil, `pool "p": disabled`},
		{"nodeName matches", v4("p", nodeName("n0", "n1")), nil, ""},
		{"nodeName does not include node", v4("p", nodeName("n2", "n3")), nil, `pool "p": nodeName ["n2", "n3"] does not include node "n1"`},
		{"nodeAffinity matches", v4("p", nodeAff("zone", "z1")), nil, ""},
		{"nodeAffinity does not match", v4("p", nodeAff("zone", "z2")), nil, `pool "p": nodeAffinity {zone=z2} does not match node "n1"`},
		{"nodeName takes precedence over nodeAffinity", v4("p", nodeName("n1"), nodeAff("zone", "z2")), nil, ""},
		{"namespaceName matches", v4("p", nsName("team-a")), nil, ""},
		{"namespaceName does not include namespace", v4("p", nsName("team-b")), nil, `pool "p": namespaceName ["team-b"] does not include namespace "team-a"`},
		{"namespaceAffinity matches", v4("p", nsAff("tenant", "a")), nil, ""},
		{"namespaceAffinity does not match", v4("p", nsAff("tenant", "b")), nil, `pool "p": namespaceAffinity {tenant=b} does not match namespace "team-a"`},
		{"namespaceName takes precedence over namespaceAffinity", v4("p", nsName("team-a"), nsAff("tenant", "b")), nil, ""},
		{"podAffinity matches", v4("p", podAff("app", "web")), nil, ""},
		{"podAffinity does not match", v4("p", podAff("app", "db")), nil, `pool "p": podAffinity {app=db} does not match pod team-a/web-0`},
		{"invalid podAffinity fails closed and says why", v4("p", func(p *policy.PoolView) {
			p.PodAffinity = &policy.LabelSelector{MatchExpressions: []policy.Requirement{{Key: "app", Operator: "In"}}}
		}), nil, `pool "p": podAffinity is invalid`},
		{"multusName matches qualified", v4("p", multus("team-a/macvlan")), []rmod{multusNet("team-a/macvlan")}, ""},
		{"multusName without namespace is in the pod's namespace", v4("p", multus("macvlan")), []rmod{multusNet("team-a/macvlan")}, ""},
		{"multusName other namespace", v4("p", multus("kube-system/macvlan")), []rmod{multusNet("team-a/macvlan")},
			`pool "p": multusName ["kube-system/macvlan"] does not include Multus network "team-a/macvlan"`},
		{"multusName but no Multus network", v4("p", multus("macvlan")), nil, `pool "p": multusName ["macvlan"] is set but interface "eth0" has no Multus network`},
		{"all addresses excluded", v4("p", allExcluded), nil, `pool "p": all addresses are excluded`},
		{"all addresses reserved", v4("p", allReserved), nil, `pool "p": all addresses are reserved`},
		{"exhausted", v4("p", exhausted), nil, `pool "p": exhausted`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mods := append([]rmod{cniDefaults([]string{"p"}, nil)}, tt.mods...)
			req := request([]policy.PoolView{tt.pool}, mods...)
			if tt.reason == "" {
				check(t, req, want{code: policy.Decided, source: SourceCNIConfig, v4: []string{"p"}})
				return
			}
			check(t, req, want{code: policy.NoFit, source: SourceCNIConfig,
				reason: []string{SourceCNIConfig + `: no usable IPv4 pool for interface "eth0"`, tt.reason}})
		})
	}
}

// A filtered pool drops out and the others stay, in order; the NoFit lists every pool with
// the filter that removed it; one family failing fails the request.
func TestFiltersCombined(t *testing.T) {
	pools := []policy.PoolView{
		v4("a", isTerminating), v4("b", nodeName("n9")), v4("c"), v4("d", exhausted), v6("e", isDisabled),
	}
	check(t, request(slices.Clone(pools), cniDefaults([]string{"a", "b", "c", "d"}, nil)),
		want{code: policy.Decided, v4: []string{"c"}})
	check(t, request(slices.Clone(pools), cniDefaults([]string{"a", "b", "d"}, nil)),
		want{code: policy.NoFit, reason: []string{`pool "a": terminating; pool "b": nodeName ["n9"] does not include node "n1"; pool "d": exhausted`}})
	check(t, request(slices.Clone(pools), cniDefaults([]string{"c"}, []string{"e"})),
		want{code: policy.NoFit, reason: []string{`no usable IPv6 pool`, `pool "e": disabled`}})
}

// Spiderpool's candidate pool sorting: podAffinity > nodeName > nodeAffinity > namespaceName >
// namespaceAffinity > multusName; ties keep the source's order.
func TestOrdering(t *testing.T) {
	tests := []struct {
		name  string
		pools []policy.PoolView
		order []string // source order (CNI defaults)
		want  []string
	}{
		{"Spiderpool example 1: podAffinity+nodeName before podAffinity alone",
			[]policy.PoolView{v4("A", podAff("app", "web"), nodeName("n1")), v4("B", podAff("app", "web"))},
			[]string{"B", "A"}, []string{"A", "B"}},
		{"Spiderpool example 2: podAffinity alone before nodeName+namespaceName",
			[]policy.PoolView{v4("A", podAff("app", "web")), v4("B", nodeName("n1"), nsName("team-a"))},
			[]string{"B", "A"}, []string{"A", "B"}},
		{"Spiderpool example 3: podAffinity+nodeName before podAffinity+namespaceName+multusName",
			[]policy.PoolView{v4("A", podAff("app", "web"), nodeName("n1")), v4("B", podAff("app", "web"), nsName("team-a"), multus("m"))},
			[]string{"B", "A"}, []string{"A", "B"}},
		{"nodeName before nodeAffinity",
			[]policy.PoolView{v4("A", nodeName("n1")), v4("B", nodeAff("zone", "z1"))},
			[]string{"B", "A"}, []string{"A", "B"}},
		{"nodeAffinity before namespaceName",
			[]policy.PoolView{v4("A", nodeAff("zone", "z1")), v4("B", nsName("team-a"))},
			[]string{"B", "A"}, []string{"A", "B"}},
		{"namespaceName before namespaceAffinity",
			[]policy.PoolView{v4("A", nsName("team-a")), v4("B", nsAff("tenant", "a"))},
			[]string{"B", "A"}, []string{"A", "B"}},
		{"namespaceAffinity before multusName",
			[]policy.PoolView{v4("A", nsAff("tenant", "a")), v4("B", multus("m"))},
			[]string{"B", "A"}, []string{"A", "B"}},
		{"multusName before no affinity",
			[]policy.PoolView{v4("A", multus("m")), v4("B")},
			[]string{"B", "A"}, []string{"A", "B"}},
		{"empty selectors count as no affinity",
			[]policy.PoolView{v4("A", func(p *policy.PoolView) { p.PodAffinity = &policy.LabelSelector{} }), v4("B")},
			[]string{"B", "A"}, []string{"B", "A"}},
		{"ties keep the source order",
			[]policy.PoolView{v4("A", nodeName("n1")), v4("B", nodeName("n1")), v4("C", nodeName("n1"))},
			[]string{"C", "A", "B"}, []string{"C", "A", "B"}},
		{"full ranking",
			[]policy.PoolView{
				v4("none"), v4("multus", multus("m")), v4("nsaff", nsAff("tenant", "a")), v4("nsname", nsName("team-a")),
				v4("nodeaff", nodeAff("zone", "z1")), v4("nodename", nodeName("n1")), v4("pod", podAff("app", "web")),
			},
			[]string{"none", "multus", "nsaff", "nsname", "nodeaff", "nodename", "pod"},
			[]string{"pod", "nodename", "nodeaff", "nsname", "nsaff", "multus", "none"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request(tt.pools, cniDefaults(tt.order, nil), multusNet("team-a/m"))
			check(t, req, want{code: policy.Decided, v4: tt.want})
		})
	}
}

// Wildcard pool names ('*', '?', '[]') expand over pools of the family, in name order;
// overlaps with other entries are de-duplicated (first position wins).
func TestWildcards(t *testing.T) {
	pools := []policy.PoolView{
		v4("blue-1"), v4("blue-2"), v4("blue-10"), v6("blue-v6"), v4("green"), v4("red-a", subnet("sub-1")), v4("red-b", subnet("sub-2")),
	}
	tests := []struct {
		name string
		mods []rmod
		v4   []string
		v6   []string
	}{
		{"star", []rmod{podAnno(AnnoIPPool, `{"ipv4":["blue-*"]}`)}, []string{"blue-1", "blue-10", "blue-2"}, nil},
		{"question mark", []rmod{podAnno(AnnoIPPool, `{"ipv4":["blue-?"]}`)}, []string{"blue-1", "blue-2"}, nil},
		{"class", []rmod{podAnno(AnnoIPPool, `{"ipv4":["blue-[2]"]}`)}, []string{"blue-2"}, nil},
		{"only pools of the family", []rmod{podAnno(AnnoIPPool, `{"ipv4":["blue*"],"ipv6":["blue*"]}`)}, []string{"blue-1", "blue-10", "blue-2"}, []string{"blue-v6"}},
		{"literal then overlapping pattern", []rmod{podAnno(AnnoIPPool, `{"ipv4":["blue-2","blue-*"]}`)}, []string{"blue-2", "blue-1", "blue-10"}, nil},
		{"namespace default pattern", []rmod{nsAnno(AnnoNSDefaultIPv4, `["gr*"]`)}, []string{"green"}, nil},
		{"CNI default pattern", []rmod{cniDefaults([]string{"*-b"}, nil)}, []string{"red-b"}, nil},
		{"subnet pattern", []rmod{podAnno(AnnoSubnet, `{"ipv4":["sub-*"]}`)}, []string{"red-a", "red-b"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, request(slices.Clone(pools), tt.mods...), want{code: policy.Decided, v4: tt.v4, v6: tt.v6})
		})
	}
}

// Decisions must not depend on anything but the input: same input, same answer, many times.
func TestDeterministic(t *testing.T) {
	req := benchRequest()
	first, _ := New().SelectPodPools(context.Background(), req)
	for range 200 {
		d, _ := New().SelectPodPools(context.Background(), req)
		if fmt.Sprint(d) != fmt.Sprint(first) {
			t.Fatalf("decision changed: %v vs %v", d, first)
		}
	}
}

func TestFromConfig(t *testing.T) {
	if _, err := FromConfig(nil); err != nil {
		t.Fatal(err)
	}
	_, err := FromConfig(map[string]any{"zeta": 1, "alpha": true})
	if err == nil || !strings.Contains(err.Error(), `config field "alpha"`) {
		t.Fatalf("FromConfig error = %v, want it to name field alpha", err)
	}
}

func TestNodeSkip(t *testing.T) {
	d, err := New().SelectNodeCIDRConfig(context.Background(), &policy.NodeRequest{})
	if err != nil || d.Code != policy.Skip {
		t.Fatalf("SelectNodeCIDRConfig = %v, %v; want Skip", d, err)
	}
}

func FuzzParseIPPoolsAnnotation(f *testing.F) {
	f.Add(`[{"interface":"eth0","ipv4":["v4-a"],"ipv6":["v6-a"],"cleangateway":true},{"interface":"net1","ipv4":["v4-*"]}]`)
	f.Add(`[]`)
	f.Add(`[{"interface":"eth0"}]`)
	f.Add(`null`)
	f.Add(`[{"interface":"eth0","ipv4":["a[" ]}]`)
	f.Fuzz(func(t *testing.T, s string) {
		sels, err := ParseIPPoolsAnnotation(s)
		if err != nil {
			return
		}
		if len(sels) == 0 {
			t.Fatal("accepted an empty list")
		}
		for i, sel := range sels {
			if sel.Interface == "" {
				t.Fatalf("entry %d accepted without interface", i)
			}
			checkNames(t, sel)
		}
	})
}

func FuzzParseIPPoolAnnotation(f *testing.F) {
	f.Add(`{"ipv4":["v4-a"],"ipv6":["v6-a","v6-b"]}`)
	f.Add(`{"interface":"eth0","ipv4":["v4-?"]}`)
	f.Add(`{}`)
	f.Add(`{"ipv4":[""]}`)
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := ParseIPPoolAnnotation(s)
		if err == nil {
			checkNames(t, sel)
		}
	})
}

func FuzzParseSubnetsAnnotation(f *testing.F) {
	f.Add(`[{"interface":"eth0","ipv4":["subnet-a"]},{"interface":"net1","ipv6":["subnet-b"]}]`)
	f.Add(`{"ipv4":["subnet-a"]}`)
	f.Fuzz(func(t *testing.T, s string) {
		if sels, err := ParseSubnetsAnnotation(s); err == nil {
			for _, sel := range sels {
				checkNames(t, sel)
			}
		}
		if sel, err := ParseSubnetAnnotation(s); err == nil {
			checkNames(t, sel)
		}
	})
}

func FuzzParseNamespaceDefaultPools(f *testing.F) {
	f.Add(`["ns-v4-a","ns-v4-b"]`)
	f.Add(`[]`)
	f.Add(`["*"]`)
	f.Fuzz(func(t *testing.T, s string) {
		names, err := ParseNamespaceDefaultPools(s)
		if err != nil {
			return
		}
		for _, n := range names {
			if n == "" {
				t.Fatal("accepted an empty name")
			}
		}
	})
}

// FuzzSelectPodPools drives the whole pipeline with arbitrary annotations: it must never
// panic, never answer Decided without a candidate, and only name pools of the right family.
func FuzzSelectPodPools(f *testing.F) {
	f.Add(`{"ipv4":["pool-*"]}`, `[{"interface":"eth0","ipv4":["pool-1"]}]`, `["pool-2"]`, "eth0")
	f.Add(``, ``, `x`, "net1")
	f.Fuzz(func(t *testing.T, ippool, ippools, nsDefault, ifn string) {
		req := benchRequest()
		req.CNI.IfName = ifn
		req.Pod.Annotations = map[string]string{}
		if ippool != "" {
			req.Pod.Annotations[AnnoIPPool] = ippool
		}
		if ippools != "" {
			req.Pod.Annotations[AnnoIPPools] = ippools
		}
		req.Namespace.Annotations = map[string]string{AnnoNSDefaultIPv4: nsDefault}
		d, err := New().SelectPodPools(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Code == policy.Decided && len(d.IPv4)+len(d.IPv6) == 0 {
			t.Fatal("Decided without candidates")
		}
		if d.Code == policy.NoFit && d.Reason == "" {
			t.Fatal("NoFit without reason")
		}
		for fam, cs := range map[policy.Family][]policy.Candidate{policy.IPv4: d.IPv4, policy.IPv6: d.IPv6} {
			for _, c := range cs {
				if policy.LookupPool(req.Pools, c.Pool, fam) == nil {
					t.Fatalf("candidate %q is not an %s pool", c.Pool, fam)
				}
			}
		}
	})
}

func checkNames(t *testing.T, sel Selection) {
	t.Helper()
	if len(sel.IPv4)+len(sel.IPv6) == 0 {
		t.Fatal("accepted an entry naming nothing")
	}
	for _, n := range append(slices.Clone(sel.IPv4), sel.IPv6...) {
		if n == "" {
			t.Fatal("accepted an empty name")
		}
		if policy.IsPoolNamePattern(n) && policy.ValidatePoolNamePattern(n) != nil {
			t.Fatalf("accepted malformed pattern %q", n)
		}
	}
}

func TestLiteralPrefix(t *testing.T) {
	for pat, want := range map[string]string{"blue-*": "blue-", "a?b": "a", "[ab]x": "", `x\*y`: "x", "plain": "plain"} {
		if got := literalPrefix(pat); got != want {
			t.Errorf("literalPrefix(%q) = %q, want %q", pat, got, want)
		}
	}
}

// Every NoFit carries the machine-readable cause a host acts on (sdk/policy.Cause), beside
// the words.
func TestNoFitCauses(t *testing.T) {
	pools := []policy.PoolView{v4("a"), v6("b"), v4("full", exhausted), v4("off", isDisabled)}
	tests := []struct {
		name string
		mods []rmod
		want policy.Cause
	}{
		{"annotation does not parse", []rmod{podAnno(AnnoIPPool, `{"ipv4":"a"}`)}, policy.CauseInvalid},
		{"pool listed twice", []rmod{podAnno(AnnoIPPool, `{"ipv4":["a","a"]}`)}, policy.CauseInvalid},
		{"no entry for the interface", []rmod{ifName("net2"), podAnno(AnnoIPPools, `[{"interface":"eth0","ipv4":["a"]}]`)}, policy.CauseNoMatch},
		{"named pool does not exist", []rmod{podAnno(AnnoIPPool, `{"ipv4":["zz"]}`)}, policy.CauseNoMatch},
		{"pattern matches nothing", []rmod{podAnno(AnnoIPPool, `{"ipv4":["x*"]}`)}, policy.CauseNoMatch},
		{"every candidate exhausted", []rmod{cniDefaults([]string{"full"}, nil)}, policy.CauseFull},
		{"a candidate filtered for more than being full", []rmod{cniDefaults([]string{"full", "off"}, nil)}, policy.CauseUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := New().SelectPodPools(context.Background(), request(slices.Clone(pools), tt.mods...))
			if err != nil || d.Code != policy.NoFit || d.Cause != tt.want {
				t.Fatalf("got %v %v (%q), %v; want NoFit %v", d.Code, d.Cause, d.Reason, err, tt.want)
			}
		})
	}
}
