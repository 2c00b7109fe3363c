package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
)

func TestWriteExplanation(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		e    api.Explanation
		want []string
	}{
		{"taken with block and gateway", api.Explanation{
			Owner: api.Owner{ContainerID: "0123456789abcdef", IfName: "eth0"}, Network: "allot", Pod: api.PodRef{Namespace: "web", Name: "a"},
			Time: at, Service: "node pools",
			Policies:  []api.PolicyStep{{Policy: "cilium-annotations", Code: "Decided", Source: "pod annotation ipam.cilium.io/ip-pool", IPv4: []string{"blue"}}},
			Pools:     []api.PoolVerdict{{Pool: "blue", Family: "ipv4", Verdict: api.VerdictTaken, By: "allocator", Free: 5, Total: 6}},
			Addresses: []api.ChosenAddress{{Address: "10.0.1.5/24", Pool: "blue", Family: "ipv4", Block: "10.0.1.0/26", Gateway: "10.0.1.1"}},
		}, []string{
			`pod web/a, interface eth0 (container 0123456789ab), network "allot", node pools, 2026-01-02T03:04:05Z`,
			`Got 10.0.1.5/24 from pool "blue" block 10.0.1.0/26 gateway 10.0.1.1`,
			"1. cilium-annotations Decided by pod annotation ipam.cilium.io/ip-pool; ipv4 blue",
			"POOL FAMILY VERDICT BY FREE/TOTAL WHY",
			"blue ipv4 taken allocator 5/6 -",
		}},
		{"skip, failure and fallback", api.Explanation{
			Owner: api.Owner{ContainerID: "c", IfName: "net1"}, Network: "n",
			Policies: []api.PolicyStep{{Policy: "a", Code: "Skip", Reason: "no annotation"}, {Policy: "wasm", Error: "policy timed out after 1s"},
				{Policy: "static", Code: "Decided", Fallback: true, IPv6: []string{"v6"}}},
		}, []string{"interface net1 (container c)", "Got no address", "1. a Skip no annotation", "2. wasm failed policy timed out after 1s",
			"3. static Decided (fallback) ipv6 v6"}},
		{"rejected pools of a failed dry run", api.Explanation{
			Owner: api.Owner{IfName: "eth0"}, Network: "vlan", Pod: api.PodRef{Namespace: "web", Name: "d"}, DryRun: true, Service: "shared pools",
			Policies: []api.PolicyStep{{Policy: "spiderpool-priority", Code: "NoFit", Cause: "NoMatch", Reason: "no pool matches"}},
			Pools: []api.PoolVerdict{{Pool: "red", Family: "ipv4", Verdict: api.VerdictRejected, By: "spiderpool-priority", Cause: "Unavailable", Reason: "podAffinity does not match", Free: 3, Total: 3},
				{Pool: "green", Family: "ipv4", Verdict: api.VerdictNotChosen, Free: 1e12, Total: 1e12}},
			Error: &api.Error{Code: api.CodeNoPool, Message: "no pool for dry-run/eth0"},
		}, []string{"Dry run (nothing taken or written): pod web/d, interface eth0, network \"vlan\", shared pools",
			"Would fail (no_pool): no pool for dry-run/eth0", "1. spiderpool-priority NoFit cause NoMatch; no pool matches",
			"red ipv4 rejected spiderpool-priority 3/3 Unavailable: podAffinity does not match",
			"green ipv4 not chosen - 1e+12/1e+12 the policy named other pools"}},
		{"no policy asked", api.Explanation{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}, Network: "n",
			Error: &api.Error{Code: api.CodeNotFound, Message: "pod web/x not found in the API server"}},
			[]string{"Failed (not_found): pod web/x not found in the API server", "(no policy was asked)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeExplanation(&b, tc.e); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(b.String(), "\n")
			for i := range lines {
				lines[i] = squash(lines[i])
			}
			got := strings.Join(lines, "\n")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("no line with %q in\n%s", w, b.String())
				}
			}
		})
	}
}
