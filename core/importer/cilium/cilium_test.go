package cilium

import (
	"slices"
	"testing"

	"github.com/allot-ipam/allot/core/importer/internal/peertest"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// TestImportRealistic maps the multi-pool pools and nodes, and the ENI node, of
// ../testdata/cilium.yaml (the shapes cilium-operator and cilium-agent write).
func TestImportRealistic(t *testing.T) {
	res, err := Import(peertest.File(t, "../testdata/cilium.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	peertest.Warnings(t, res.Warnings)
	mars := peertest.Find[*allotv1.IPPool](t, res.Objects, "mars")
	if got := mars.Spec.IPv4; got.MaskSize != 26 || !slices.Equal(got.CIDRs, []string{"10.20.0.0/16", "10.21.0.0/16"}) ||
		mars.Spec.IPv6 != nil || mars.Spec.NamespaceAffinity.MatchLabels["team"] != "mars" {
		t.Errorf("IPPool mars: %+v", mars.Spec)
	}
	w := peertest.Find[*allotv1.AllotNode](t, res.Objects, "worker-1")
	want := []allotv1.PoolAllocation{{Pool: "default", CIDRs: []string{"10.10.1.0/24", "fd00:10::100/120"}}, {Pool: "mars", CIDRs: []string{"10.20.0.64/26"}}}
	if !slices.EqualFunc(w.Spec.IPAM.Pools.Allocated, want, func(a, b allotv1.PoolAllocation) bool { return a.Pool == b.Pool && slices.Equal(a.CIDRs, b.CIDRs) }) {
		t.Errorf("worker-1 blocks: %+v", w.Spec.IPAM.Pools.Allocated)
	}
	if r := w.Spec.IPAM.Pools.Requested; len(r) != 2 || r[0].Needed.IPv4 != 16 || r[0].Needed.IPv6 != 16 || r[1].Pool != "mars" || r[1].Needed.IPv4 != 8 {
		t.Errorf("worker-1 requests: %+v", r)
	}
	if w.Spec.ENI != nil || w.Spec.IPAM.Pool != nil {
		t.Errorf("worker-1 is not an ENI node: %+v", w.Spec)
	}
	e := peertest.Find[*allotv1.AllotNode](t, res.Objects, "ip-10-0-1-5.ec2.internal")
	if len(e.Spec.IPAM.Pool) != 2 || e.Spec.IPAM.Pool["10.0.1.21"].Resource != "eni-0aaa" ||
		e.Status.IPAM.Used["10.0.1.20"].Owner != "default/web-0" || len(e.Status.IPAM.Used) != 1 {
		t.Errorf("ENI node ipam: %+v / %+v", e.Spec.IPAM, e.Status.IPAM)
	}
	s := e.Spec.ENI
	if s == nil || s.InstanceID != "i-0123456789abcdef0" || s.InstanceType != "m5.large" || s.Zone != "us-east-1a" ||
		*s.FirstInterfaceIndex != 1 || *s.PreAllocate != 8 || s.SubnetTags["kubernetes.io/role/cni"] != "1" || s.SecurityGroups[0] != "sg-0a1b2c3d" {
		t.Errorf("ENI spec: %+v", s)
	}
}

const bluePool = `
apiVersion: cilium.io/v2alpha1
kind: CiliumPodIPPool
metadata: {name: blue}
spec:
  ipv4: {cidrs: ["10.1.0.0/16"], maskSize: 24}
`

// TestImportWarnings: what cannot be mapped is reported with its object and field, and
// the rest is imported.
func TestImportWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		warn     []string
	}{
		{"unknown field", `
apiVersion: cilium.io/v2alpha1
kind: CiliumPodIPPool
metadata: {name: a}
spec:
  ipv4: {cidrs: ["10.2.0.0/16"], maskSize: 24, vrf: 3}
  futureKnob: true
`, []string{"CiliumPodIPPool a: spec.futureKnob: allot has no equivalent", "CiliumPodIPPool a: spec.ipv4.vrf: allot has no equivalent"}},
		{"allowFirstIP", `
apiVersion: cilium.io/v2alpha1
kind: CiliumPodIPPool
metadata: {name: a}
spec:
  ipv4: {cidrs: ["10.2.0.0/16"], maskSize: 24}
  allowFirstIP: true
`, []string{"spec.allowFirstIP: allot reserves"}},
		{"block of an unknown pool", `
apiVersion: cilium.io/v2
kind: CiliumNode
metadata: {name: n1}
spec:
  ipam:
    pools:
      allocated: [{pool: green, cidrs: ["10.9.0.0/24"]}]
`, []string{`CiliumNode n1: spec.ipam.pools.allocated[0].pool: pool "green" is not among`}},
		{"block outside its pool, block of another size", bluePool + `
---
apiVersion: cilium.io/v2
kind: CiliumNode
metadata: {name: n1}
spec:
  ipam:
    pools:
      allocated: [{pool: blue, cidrs: ["10.9.0.0/24", "10.1.2.0/25"]}]
`, []string{"allocated[0].cidrs[0]: 10.9.0.0/24 lies in none of pool \"blue\"", "allocated[0].cidrs[1]: 10.1.2.0/25 is not of pool \"blue\"'s mask size /24"}},
		{"cluster-pool podCIDRs", bluePool + `
---
apiVersion: cilium.io/v2
kind: CiliumNode
metadata: {name: n1}
spec:
  ipam:
    podCIDRs: ["10.1.7.0/24", "10.250.0.0/24"]
    pre-allocate: 8
status:
  ipam:
    used: {10.1.7.5: {owner: a/b}}
`, []string{"spec.ipam.podCIDRs[1]: 10.250.0.0/24 (cluster-pool IPAM) lies in no imported CiliumPodIPPool",
			"spec.ipam.pre-allocate: outside ENI mode", "status.ipam.used: outside ENI mode"}},
		{"release handshake in flight", `
apiVersion: cilium.io/v2
kind: CiliumNode
metadata: {name: n1}
spec:
  instance-id: i-1
  ipam:
    pool: {10.0.0.9: {resource: eni-1}}
status:
  ipam:
    used: {10.0.0.10: {owner: x/y}}
    release-ips: {10.0.0.9: marked-for-release}
`, []string{"status.ipam.used[10.0.0.10]: in use but not in spec.ipam.pool", "status.ipam.release-ips: 1 addresses"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Import(peertest.Objects(t, tc.in))
			if err != nil {
				t.Fatal(err)
			}
			peertest.Warnings(t, res.Warnings, tc.warn...)
		})
	}
}

func TestImportClusterPoolBlocks(t *testing.T) {
	res, err := Import(peertest.Objects(t, bluePool+`
---
apiVersion: cilium.io/v2
kind: CiliumNode
metadata: {name: n1}
spec:
  ipam:
    podCIDRs: ["10.1.7.0/24"]
`))
	if err != nil {
		t.Fatal(err)
	}
	n := peertest.Find[*allotv1.AllotNode](t, res.Objects, "n1")
	if a := n.Spec.IPAM.Pools.Allocated; len(a) != 1 || a[0].Pool != "blue" || a[0].CIDRs[0] != "10.1.7.0/24" {
		t.Errorf("cluster-pool block: %+v", a)
	}
}

// TestImportErrors: invalid input is an error naming the object and the field.
func TestImportErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"host bits", `
apiVersion: cilium.io/v2alpha1
kind: CiliumPodIPPool
metadata: {name: a}
spec: {ipv4: {cidrs: ["10.2.0.1/16"], maskSize: 24}}
`, "CiliumPodIPPool a: spec.ipv4.cidrs[0]: 10.2.0.1/16 has host bits set"},
		{"family", `
apiVersion: cilium.io/v2alpha1
kind: CiliumPodIPPool
metadata: {name: a}
spec: {ipv6: {cidrs: ["10.2.0.0/16"], maskSize: 24}}
`, "spec.ipv6.cidrs[0]: 10.2.0.0/16 is not of the family"},
		{"mask shorter than CIDR", `
apiVersion: cilium.io/v2alpha1
kind: CiliumPodIPPool
metadata: {name: a}
spec: {ipv4: {cidrs: ["10.2.0.0/16"], maskSize: 8}}
`, "spec.ipv4.maskSize: /8 is longer than"},
		{"mask out of range", `
apiVersion: cilium.io/v2alpha1
kind: CiliumPodIPPool
metadata: {name: a}
spec: {ipv4: {cidrs: ["10.2.0.0/16"], maskSize: 33}}
`, "spec.ipv4.maskSize: 33 is not between 1 and 32"},
		{"wrong type", `
apiVersion: cilium.io/v2alpha1
kind: CiliumPodIPPool
metadata: {name: a}
spec: {ipv4: {cidrs: ["10.2.0.0/16"], maskSize: "24"}}
`, "spec.ipv4.maskSize: a string cannot be a int"},
		{"overlap", `
apiVersion: cilium.io/v2alpha1
kind: CiliumPodIPPool
metadata: {name: a}
spec: {ipv4: {cidrs: ["10.2.0.0/16", "10.2.3.0/24"], maskSize: 26}}
`, "spec.ipv4.cidrs[1]: 10.2.3.0/24 overlaps spec.ipv4.cidrs[0]"},
		{"no family", `
apiVersion: cilium.io/v2alpha1
kind: CiliumPodIPPool
metadata: {name: a}
spec: {podSelector: {matchLabels: {a: b}}}
`, "CiliumPodIPPool a: spec: neither ipv4 nor ipv6"},
		{"bad selector", `
apiVersion: cilium.io/v2alpha1
kind: CiliumPodIPPool
metadata: {name: a}
spec:
  ipv4: {cidrs: ["10.2.0.0/16"], maskSize: 24}
  podSelector: {matchExpressions: [{key: a, operator: Near}]}
`, "spec.podSelector:"},
		{"block not a CIDR", `
apiVersion: cilium.io/v2
kind: CiliumNode
metadata: {name: n1}
spec: {ipam: {pools: {allocated: [{pool: blue, cidrs: ["10.1.2.0"]}]}}}
`, `CiliumNode n1: spec.ipam.pools.allocated[0].cidrs[0]: "10.1.2.0" is not a CIDR`},
		{"block twice", `
apiVersion: cilium.io/v2
kind: CiliumNode
metadata: {name: n1}
spec: {ipam: {pools: {allocated: [{pool: blue, cidrs: ["10.1.2.0/24"]}, {pool: red, cidrs: ["10.1.2.0/24"]}]}}}
`, "allocated[1].cidrs[0]: 10.1.2.0/24 is also listed under spec.ipam.pools.allocated[0].cidrs[0]"},
		{"ENI address", `
apiVersion: cilium.io/v2
kind: CiliumNode
metadata: {name: n1}
spec: {ipam: {pool: {10.0.0.300: {resource: eni-1}}}}
`, `spec.ipam.pool[10.0.0.300]: "10.0.0.300" is not an IP address`},
		{"watermark", `
apiVersion: cilium.io/v2
kind: CiliumNode
metadata: {name: n1}
spec: {instance-id: i-1, ipam: {max-allocate: 100000}}
`, "spec.ipam.max-allocate: 100000 is not between 0 and 4096"},
		{"negative demand", `
apiVersion: cilium.io/v2
kind: CiliumNode
metadata: {name: n1}
spec: {ipam: {pools: {requested: [{pool: a, needed: {ipv4-addrs: -1}}]}}}
`, "spec.ipam.pools.requested[0].needed: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Import(peertest.Objects(t, tc.in))
			peertest.Error(t, err, tc.want)
		})
	}
}
