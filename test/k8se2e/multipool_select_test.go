package k8se2e

// Cilium multi-pool pool selection on a real API server, through the real allot-cni and an
// agent's default chain (cilium-annotations): the per-family annotations
// ipam.cilium.io/ipv4-pool and ipv6-pool on pods and namespaces, pool choice by the pool's
// pod and namespace selectors (podAffinity, namespaceAffinity), and require-pool-match
// (https://docs.cilium.io/en/stable/network/concepts/ipam/multi-pool/).

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/cniplugin"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	ciliumannotations "github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
)

const (
	annoV4       = "ipam.cilium.io/ipv4-pool"
	annoV6       = "ipam.cilium.io/ipv6-pool"
	annoRequire  = ciliumannotations.RequirePoolMatchAnnotation
	podNetLabels = "io.kubernetes.pod.namespace"
)

// within checks that out's IPv4 address lies in v4 and its IPv6 address in v6 ("": the
// family must be absent).
func within(t *testing.T, out cniOut, v4, v6 string) {
	t.Helper()
	var got4, got6 string
	for _, ip := range out.res.IPs {
		if ip.Address.IP.To4() != nil {
			got4 = ip.Address.IP.String()
		} else {
			got6 = ip.Address.IP.String()
		}
	}
	check := func(fam, got, cidr string) {
		if cidr == "" {
			if got != "" {
				t.Errorf("%s: got %s, want none", fam, got)
			}
			return
		}
		a, err := netip.ParseAddr(got)
		if err != nil || !mustPrefix(t, cidr).Contains(a) {
			t.Errorf("%s: got %q, want an address of %s (result %s)", fam, got, cidr, out)
		}
	}
	check("IPv4", got4, v4)
	check("IPv6", got6, v6)
}

func TestMultiPoolCiliumSelection(t *testing.T) {
	se := newSharedEnv(t, map[string]map[string]string{"node-1": nil})
	se.startOperator(time.Second)
	pool := func(name, v4, v6 string, sel allotv1.PoolSelection) *allotv1.IPPool {
		p := ipPool(name, nil, nil)
		if v4 != "" {
			p.Spec.IPv4 = &allotv1.PoolFamily{CIDRs: []string{v4}, MaskSize: 26}
		}
		if v6 != "" {
			p.Spec.IPv6 = &allotv1.PoolFamily{CIDRs: []string{v6}, MaskSize: 122}
		}
		p.Spec.PoolSelection = sel
		return p
	}
	se.create(
		pool("default", "10.80.0.0/16", "fd00:80::/64", allotv1.PoolSelection{}),
		pool("blue", "10.81.0.0/16", "", allotv1.PoolSelection{}),
		pool("green", "", "fd00:82::/64", allotv1.PoolSelection{}),
		pool("db", "10.83.0.0/16", "fd00:83::/64", allotv1.PoolSelection{PodAffinity: labels("app", "db"), NamespaceAffinity: labels("team", "a")}),
		pool("by-name", "10.85.0.0/16", "", allotv1.PoolSelection{PodAffinity: labels(podNetLabels, "named")}),
		pool("v6only", "", "fd00:84::/64", allotv1.PoolSelection{}),
	)
	n1 := se.startAgent("node-1")
	se.namespace("plain", nil, nil)
	se.namespace("team-a", map[string]string{"team": "a"}, nil)
	se.namespace("named", nil, nil)
	se.namespace("nsfam", nil, map[string]string{annoV4: "blue"})
	se.namespace("strict", nil, map[string]string{annoRequire: "true"})
	add := func(t *testing.T, ns, name string, lbl, ann map[string]string) cniOut {
		se := se.with(t)
		return se.add(cniCall{node: n1, pod: se.pod(ns, name, "node-1", lbl, ann), network: netPods})
	}

	t.Run("pod annotations ipv4-pool and ipv6-pool choose per family", func(t *testing.T) {
		within(t, add(t, "plain", "fam", nil, map[string]string{annoV4: "blue", annoV6: "green"}), "10.81.0.0/16", "fd00:82::/64")
	})
	t.Run("a family annotation wins over ip-pool for its family only", func(t *testing.T) {
		within(t, add(t, "plain", "mixed", nil, map[string]string{annotation: "db", annoV6: "green"}), "10.83.0.0/16", "fd00:82::/64")
	})
	t.Run("namespace ipv4-pool: IPv4 from it, IPv6 from default", func(t *testing.T) {
		within(t, add(t, "nsfam", "p", nil, nil), "10.81.0.0/16", "fd00:80::/64")
	})
	t.Run("pod annotation wins over the namespace's", func(t *testing.T) {
		within(t, add(t, "nsfam", "q", nil, map[string]string{annoV4: "default"}), "10.80.0.0/16", "fd00:80::/64")
	})
	t.Run("pool selectors: pod and namespace labels both match", func(t *testing.T) {
		within(t, add(t, "team-a", "db-1", map[string]string{"app": "db"}, nil), "10.83.0.0/16", "fd00:83::/64")
	})
	t.Run("pool selectors: only the pod matches, default pool", func(t *testing.T) {
		within(t, add(t, "plain", "db-2", map[string]string{"app": "db"}, nil), "10.80.0.0/16", "fd00:80::/64")
	})
	t.Run("pool selectors: only the namespace matches, default pool", func(t *testing.T) {
		within(t, add(t, "team-a", "web-1", map[string]string{"app": "web"}, nil), "10.80.0.0/16", "fd00:80::/64")
	})
	t.Run("pool selector on io.kubernetes.pod.namespace", func(t *testing.T) {
		// by-name has no IPv6: the IPv6 side falls to default.
		within(t, add(t, "named", "x", nil, nil), "10.85.0.0/16", "fd00:80::/64")
	})
	t.Run("require-pool-match on the namespace: no match is an error, an annotation is a match", func(t *testing.T) {
		se := se.with(t)
		p := se.pod("strict", "lonely", "node-1", nil, nil)
		out := se.addFails(cniCall{node: n1, pod: p, network: netPods}, cniplugin.ErrNoPool,
			"no pool's selectors match pod strict/lonely", "namespace annotation "+annoRequire+" requires a match")
		if out.err != nil && !strings.Contains(out.err.Msg, "IPv4") {
			t.Errorf("error %q does not name the family", out.err.Msg)
		}
		within(t, add(t, "strict", "annotated", nil, map[string]string{annotation: "db"}), "10.83.0.0/16", "fd00:83::/64")
	})
	t.Run("require-pool-match on the pod", func(t *testing.T) {
		se := se.with(t)
		p := se.pod("plain", "picky", "node-1", nil, map[string]string{annoRequire: "true"})
		se.addFails(cniCall{node: n1, pod: p, network: netPods}, cniplugin.ErrNoPool, "pod annotation "+annoRequire+" requires a match")
	})
	t.Run("ipv4-pool naming a pool without IPv4 is refused", func(t *testing.T) {
		se := se.with(t)
		p := se.pod("plain", "wrong", "node-1", nil, map[string]string{annoV4: "v6only"})
		se.addFails(cniCall{node: n1, pod: p, network: netPods}, cniplugin.ErrNoPool, `names pool "v6only", which has no IPv4 CIDRs`)
	})
}
