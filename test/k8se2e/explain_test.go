package k8se2e

// allotctl explain against an agent serving shared pools on a real API server: the pod that
// got an address, the pod that failed (its pool exhausted, the other's podAffinity not
// matching), and a dry run for a pod that does not exist yet, which claims nothing.

import (
	"context"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/api"
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
