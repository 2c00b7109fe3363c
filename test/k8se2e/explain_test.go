package k8se2e

// allotctl explain against an agent serving shared pools on a real API server: the pod that
// got an address, the pod that failed (its pool exhausted, the other's podAffinity not
// matching), and a dry run for a pod that does not exist yet, which claims nothing.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/cniplugin"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

func verdictOf(e api.Explanation, pool string) api.PoolVerdict {
	for _, v := range e.Pools {
		if v.Pool == pool {
			return v
		}
	}
	return api.PoolVerdict{}
}

func explainPod(t *testing.T, n *node, ns, name string) api.Explanation {
	t.Helper()
	r, err := n.cli.Explain(context.Background(), &api.ExplainRequest{Pod: api.PodRef{Namespace: ns, Name: name}})
	if err != nil {
		t.Fatalf("explain %s/%s: %v", ns, name, err)
	}
	if len(r.Explanations) != 1 {
		t.Fatalf("explain %s/%s: %d explanations", ns, name, len(r.Explanations))
	}
	return r.Explanations[0]
}

func TestExplainSharedPools(t *testing.T) {
	se := newSharedEnv(t, map[string]map[string]string{"node-1": nil})
	n := se.startAgent("node-1")
	se.namespace("web", nil, nil)
	se.create(
		v4pool("red", 1, 4, allotv1.PoolSelection{Default: true, PodAffinity: labels("app", "db")}),
		v4pool("green", 2, 1, allotv1.PoolSelection{Default: true}),
	)
	se.havePools("red/ipv4", "green/ipv4")

	a := se.pod("web", "a", "node-1", map[string]string{"app": "web"}, nil)
	se.add(cniCall{node: n, pod: a})
	e := explainPod(t, n, "web", "a")
	if e.Service != "shared pools" || len(e.Policies) != 1 || e.Policies[0].Policy != "spiderpool-priority" || e.Policies[0].Code != "Decided" {
		t.Fatalf("web/a: policies %+v, service %q", e.Policies, e.Service)
	}
	if len(e.Addresses) != 1 || e.Addresses[0] != (api.ChosenAddress{Address: "10.30.2.10/24", Pool: "green", Family: "ipv4", Block: "10.30.2.0/24"}) {
		t.Fatalf("web/a: addresses %+v", e.Addresses)
	}
	if v := verdictOf(e, "green"); v.Verdict != api.VerdictTaken {
		t.Errorf("web/a: green %+v", v)
	}
	if v := verdictOf(e, "red"); v.Verdict != api.VerdictRejected || v.Cause != "Unavailable" || !strings.Contains(v.Reason, "podAffinity {app=db} does not match pod web/a") {
		t.Errorf("web/a: red %+v", v)
	}

	// green has no second address, red does not take web pods: the ADD fails, and says why.
	se.waitPools("green full", func(free map[string]uint64) bool { return free["green/ipv4"] == 0 })
	b := se.pod("web", "b", "node-1", map[string]string{"app": "web"}, nil)
	se.addFails(cniCall{node: n, pod: b}, 101)
	e = explainPod(t, n, "web", "b")
	if e.Error == nil || e.Error.Code != api.CodeExhausted || e.Policies[0].Code != "NoFit" || len(e.Addresses) != 0 {
		t.Fatalf("web/b: %+v", e)
	}
	if v := verdictOf(e, "green"); v.Verdict != api.VerdictRejected || v.Cause != "Full" {
		t.Errorf("web/b: green %+v", v)
	}

	// A dry run for a database pod not created yet: red's first address, nothing claimed.
	before := len(se.claims())
	r, err := n.cli.Explain(context.Background(), &api.ExplainRequest{DryRun: &api.DryRun{
		Request: api.AllocateRequest{Owner: api.Owner{ContainerID: "dry-run", IfName: "eth0"}, Network: netUnderlay,
			Pod: api.PodRef{Namespace: "web", Name: "db-0"}},
		Labels: map[string]string{"app": "db"}, OwnerKind: "StatefulSet", OwnerName: "db"}})
	if err != nil {
		t.Fatal(err)
	}
	e = r.Explanations[0]
	if !e.DryRun || e.Error != nil || len(e.Addresses) != 1 || e.Addresses[0].Pool != "red" || !strings.HasPrefix(e.Addresses[0].Address, "10.30.1.") {
		t.Fatalf("dry run of web/db-0: %+v", e)
	}
	if after := len(se.claims()); after != before {
		t.Fatalf("the dry run claimed: %d AddressClaims before, %d after", before, after)
	}
}

// allotctl explain in multi-pool mode (node pools, the default chain cilium-annotations):
// the block an address came from, the pool whose selectors do not match, a failed pod, and a
// dry run that names the selected pool's next address without taking it.
func TestExplainMultiPool(t *testing.T) {
	se := newSharedEnv(t, map[string]map[string]string{"node-1": nil})
	se.startOperator(time.Second)
	pool := func(name, v4 string, sel allotv1.PoolSelection) *allotv1.IPPool {
		p := ipPool(name, nil, nil)
		p.Spec.IPv4 = &allotv1.PoolFamily{CIDRs: []string{v4}, MaskSize: 26}
		p.Spec.PoolSelection = sel
		return p
	}
	se.create(pool("default", "10.90.0.0/16", allotv1.PoolSelection{}),
		pool("db", "10.91.0.0/16", allotv1.PoolSelection{PodAffinity: labels("app", "db"), NamespaceAffinity: labels("team", "a")}))
	n := se.startAgent("node-1")
	se.namespace("team-a", map[string]string{"team": "a"}, nil)

	web := se.pod("team-a", "web", "node-1", map[string]string{"app": "web"}, nil)
	out := se.add(cniCall{node: n, pod: web, network: netPods})
	e := explainPod(t, n, "team-a", "web")
	if e.Service != "node pools" || len(e.Policies) == 0 || e.Policies[0].Policy != "cilium-annotations" || e.Policies[0].Code != "Decided" {
		t.Fatalf("team-a/web: service %q, policies %+v", e.Service, e.Policies)
	}
	if len(e.Addresses) != 1 || e.Addresses[0].Pool != "default" || !strings.HasPrefix(e.Addresses[0].Block, "10.90.") ||
		!strings.HasSuffix(e.Addresses[0].Block, "/26") || e.Addresses[0].Address != out.addrs()[0] {
		t.Fatalf("team-a/web: addresses %+v, CNI result %v", e.Addresses, out.addrs())
	}
	if v := verdictOf(e, "db"); v.Verdict != api.VerdictRejected || !strings.Contains(v.Reason, "podAffinity {app=db} does not match pod team-a/web") {
		t.Errorf("team-a/web: db %+v", v)
	}

	strict := se.pod("team-a", "strict", "node-1", nil, map[string]string{annoRequire: "true"})
	se.addFails(cniCall{node: n, pod: strict, network: netPods}, cniplugin.ErrNoPool)
	if e := explainPod(t, n, "team-a", "strict"); e.Error == nil || e.Error.Code != api.CodeNoPool ||
		e.Policies[0].Code != "NoFit" || !strings.Contains(e.Policies[0].Reason, "requires a match") {
		t.Fatalf("team-a/strict: %+v", e)
	}

	before, err := n.cli.Allocations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r, err := n.cli.Explain(context.Background(), &api.ExplainRequest{DryRun: &api.DryRun{
		Request: api.AllocateRequest{Network: netPods, Pod: api.PodRef{Namespace: "team-a", Name: "db-0"}},
		Labels:  map[string]string{"app": "db"}}})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Explanations[0]
	// The db pool has no block on the node yet: the ADD would wait for one, the dry run says
	// the pool is exhausted on this node and names it.
	if !d.DryRun || len(d.Policies) == 0 || d.Policies[0].Code != "Decided" || len(d.Policies[0].IPv4) != 1 || d.Policies[0].IPv4[0] != "db" {
		t.Fatalf("dry run of team-a/db-0: %+v", d)
	}
	after, err := n.cli.Allocations(context.Background())
	if err != nil || len(after) != len(before) {
		t.Fatalf("the dry run took something: %d allocations before, %d after (%v)", len(before), len(after), err)
	}
}
