package clustercidr

import (
	"testing"

	"github.com/allot-ipam/allot/core/importer/internal/peertest"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// TestImportRealistic maps ../testdata/clustercidr.yaml: a dual-stack ClusterCIDR with two
// node selector terms, a GDC ClusterCIDRConfig, and two Nodes, one of whose pod CIDRs no
// config holds.
func TestImportRealistic(t *testing.T) {
	res, err := Import(peertest.File(t, "../testdata/clustercidr.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	peertest.Warnings(t, res.Warnings, "Node legacy-node: spec.podCIDRs[0]: 10.99.0.0/24 lies in no imported config")
	if len(res.Objects) != 3 {
		t.Fatalf("got %d configs, want 3", len(res.Objects))
	}
	r0 := peertest.Find[*allotv1.ClusterCIDRConfig](t, res.Objects, "racks-0")
	if r0.Spec.IPv4.CIDR != "10.100.0.0/16" || r0.Spec.IPv4.PerNodeMaskSize != 24 || r0.Spec.IPv6.PerNodeMaskSize != 120 ||
		r0.Spec.NodeSelector.MatchExpressions[0].Key != "rack" || len(r0.Spec.NodeSelector.MatchExpressions[0].Values) != 2 {
		t.Errorf("racks-0: %+v", r0.Spec)
	}
	r1 := peertest.Find[*allotv1.ClusterCIDRConfig](t, res.Objects, "racks-1")
	if r1.Spec.NodeSelector.MatchExpressions[0].Operator != "Exists" {
		t.Errorf("racks-1: %+v", r1.Spec.NodeSelector)
	}
	w := peertest.Find[*allotv1.ClusterCIDRConfig](t, res.Objects, "workers")
	if w.Namespace != "" || w.Spec.IPv4.CIDR != "10.200.0.0/20" || w.Spec.IPv4.PerNodeMaskSize != 26 || w.Spec.IPv6 != nil ||
		w.Spec.NodeSelector.MatchLabels["baremetal.cluster.gke.io/node-pool"] != "workers" {
		t.Errorf("workers: %+v", w.Spec)
	}
}

func TestImportWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		configs  int
		warn     []string
	}{
		{"no selector: one config for every node", `
apiVersion: networking.k8s.io/v1alpha1
kind: ClusterCIDR
metadata: {name: all}
spec: {perNodeHostBits: 6, ipv4: 10.0.0.0/16}
`, 1, nil},
		{"Gt has no label-selector equivalent", `
apiVersion: networking.k8s.io/v1alpha1
kind: ClusterCIDR
metadata: {name: big}
spec:
  perNodeHostBits: 6
  ipv4: 10.0.0.0/16
  nodeSelector:
    nodeSelectorTerms:
    - matchExpressions: [{key: cpus, operator: Gt, values: ["16"]}]
    - matchExpressions: [{key: size, operator: In, values: [large]}]
`, 1, []string{`ClusterCIDR big: spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].operator: "Gt" has no label-selector equivalent`}},
		{"matchFields", `
apiVersion: networking.k8s.io/v1alpha1
kind: ClusterCIDR
metadata: {name: one}
spec:
  perNodeHostBits: 6
  ipv4: 10.0.0.0/16
  nodeSelector:
    nodeSelectorTerms:
    - matchFields: [{key: metadata.name, operator: In, values: [n1]}]
`, 0, []string{"spec.nodeSelector.nodeSelectorTerms[0].matchFields: allot's node selectors match labels only"}},
		{"GDC field of a later version", `
apiVersion: baremetal.cluster.gke.io/v1alpha1
kind: ClusterCIDRConfig
metadata: {name: w, namespace: cluster-a}
spec: {ipv4: {cidr: 10.0.0.0/16, perNodeMaskSize: 24}, priority: 3}
`, 1, []string{"ClusterCIDRConfig cluster-a/w: spec.priority: allot has no equivalent"}},
		{"node podCIDR at another size", `
apiVersion: baremetal.cluster.gke.io/v1alpha1
kind: ClusterCIDRConfig
metadata: {name: w, namespace: cluster-a}
spec: {ipv4: {cidr: 10.0.0.0/16, perNodeMaskSize: 24}}
---
apiVersion: v1
kind: Node
metadata: {name: n1}
spec: {podCIDR: 10.0.3.0/25}
`, 1, []string{"Node n1: spec.podCIDR[0]: 10.0.3.0/25 lies in no imported config"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Import(peertest.Objects(t, tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Objects) != tc.configs {
				t.Errorf("got %d configs, want %d", len(res.Objects), tc.configs)
			}
			peertest.Warnings(t, res.Warnings, tc.warn...)
		})
	}
}

func TestImportErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"host bits too many", `
apiVersion: networking.k8s.io/v1alpha1
kind: ClusterCIDR
metadata: {name: c}
spec: {perNodeHostBits: 20, ipv4: 10.0.0.0/16}
`, "ClusterCIDR c: spec.ipv4: per-node blocks of /12 do not fit in 10.0.0.0/16"},
		{"family", `
apiVersion: networking.k8s.io/v1alpha1
kind: ClusterCIDR
metadata: {name: c}
spec: {perNodeHostBits: 8, ipv6: 10.0.0.0/16}
`, "spec.ipv6: 10.0.0.0/16 is not an IPv6 CIDR"},
		{"neither family", `
apiVersion: networking.k8s.io/v1alpha1
kind: ClusterCIDR
metadata: {name: c}
spec: {perNodeHostBits: 8}
`, "ClusterCIDR c: spec: neither ipv4 nor ipv6"},
		{"GDC dual stack sizes", `
apiVersion: baremetal.cluster.gke.io/v1alpha1
kind: ClusterCIDRConfig
metadata: {name: w, namespace: cluster-a}
spec: {ipv4: {cidr: 10.0.0.0/16, perNodeMaskSize: 24}, ipv6: {cidr: "fd00::/104", perNodeMaskSize: 112}}
`, "spec.ipv6.perNodeMaskSize: dual stack needs as many addresses per node in both families"},
		{"GDC host bits", `
apiVersion: baremetal.cluster.gke.io/v1alpha1
kind: ClusterCIDRConfig
metadata: {name: w, namespace: cluster-a}
spec: {ipv4: {cidr: 10.0.0.1/16, perNodeMaskSize: 24}}
`, "ClusterCIDRConfig cluster-a/w: spec.ipv4.cidr: 10.0.0.1/16 has host bits set"},
		{"same name twice", `
apiVersion: baremetal.cluster.gke.io/v1alpha1
kind: ClusterCIDRConfig
metadata: {name: w, namespace: cluster-a}
spec: {ipv4: {cidr: 10.0.0.0/16, perNodeMaskSize: 24}}
---
apiVersion: baremetal.cluster.gke.io/v1alpha1
kind: ClusterCIDRConfig
metadata: {name: w, namespace: cluster-b}
spec: {ipv4: {cidr: 10.1.0.0/16, perNodeMaskSize: 24}}
`, `ClusterCIDRConfig cluster-b/w: metadata.name: maps to ClusterCIDRConfig "w", as ClusterCIDRConfig cluster-a/w does`},
		{"node podCIDR", `
apiVersion: v1
kind: Node
metadata: {name: n1}
spec: {podCIDRs: [10.0.3.1/24]}
`, "Node n1: spec.podCIDRs[0]: 10.0.3.1/24 has host bits set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Import(peertest.Objects(t, tc.in))
			peertest.Error(t, err, tc.want)
		})
	}
}
