package spiderpool

import (
	"slices"
	"testing"

	"github.com/allot-ipam/allot/core/importer/internal/peertest"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// TestImportRealistic maps ../testdata/spiderpool.yaml: a subnet and a pool cut from it for
// a Deployment, a pool with two pods' addresses (one a StatefulSet pod on its second
// interface), reserved addresses.
func TestImportRealistic(t *testing.T) {
	res, err := Import(peertest.File(t, "../testdata/spiderpool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	peertest.Warnings(t, res.Warnings, "SpiderIPPool vlan100-v4: status.allocatedIPs[172.18.41.11]: no SpiderEndpoint prod/web-7d9f")
	p := peertest.Find[*allotv1.SharedIPPool](t, res.Objects, "vlan100-v4")
	f := p.Spec.IPv4
	if p.Spec.IPv6 != nil || f.Subnet != "172.18.0.0/16" || !slices.Equal(f.IPs, []string{"172.18.41.10-172.18.41.50"}) ||
		!slices.Equal(f.ExcludeIPs, []string{"172.18.41.20"}) || f.Gateway != "172.18.0.1" ||
		len(f.Routes) != 1 || f.Routes[0] != (allotv1.RouteSpec{Dst: "10.96.0.0/12", Gw: "172.18.0.254"}) ||
		!p.Spec.Default || !slices.Equal(p.Spec.NamespaceName, []string{"prod"}) {
		t.Errorf("SharedIPPool vlan100-v4: %+v", p.Spec)
	}
	db := peertest.Find[*allotv1.AddressClaim](t, res.Objects, "v4-172.18.41.10")
	want := allotv1.AddressHolder{Namespace: "prod", Pod: "db-0", PodUID: "6f8e2d4c-0000-4000-8000-000000000001",
		Node: "worker-2", Interface: "net1", StatefulSet: "db"}
	if db.Spec.IP != "172.18.41.10" || db.Spec.Pool != "vlan100-v4" || db.Spec.Holder != want {
		t.Errorf("claim of db-0: %+v", db.Spec)
	}
	web := peertest.Find[*allotv1.AddressClaim](t, res.Objects, "v4-172.18.41.11")
	if h := web.Spec.Holder; h.Pod != "web-7d9f" || h.Interface != "eth0" || h.Node != "" {
		t.Errorf("claim of web: %+v", h)
	}
	auto := peertest.Find[*allotv1.SharedIPPool](t, res.Objects, "auto4-demo-eth0-1a2b3")
	if auto.Labels[allotv1.LabelSubnet] != "vlan100" || auto.Labels[allotv1.LabelAutoPool] != "true" ||
		auto.Annotations[allotv1.AnnotationAutoPoolApp] != "Deployment/default/demo" || auto.Annotations[allotv1.AnnotationAutoPoolInterface] != "eth0" {
		t.Errorf("auto pool marks: %v %v", auto.Labels, auto.Annotations)
	}
	sub := peertest.Find[*allotv1.AllotSubnet](t, res.Objects, "vlan100")
	if a := sub.Status.Allocations; len(a) != 1 || a[0].Pool != auto.Name || a[0].Family != "ipv4" || !slices.Equal(a[0].IPs, []string{"172.18.40.1-172.18.40.3"}) {
		t.Errorf("subnet allocations: %+v", a)
	}
	r := peertest.Find[*allotv1.ReservedIP](t, res.Objects, "routers")
	if !slices.Equal(r.Spec.IPs, []string{"172.18.41.1-172.18.41.3", "172.18.41.254"}) {
		t.Errorf("reserved: %v", r.Spec.IPs)
	}
}

const v6pool = `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: v6}
spec:
  subnet: fd00:18::/64
  ips: ["fd00:18::10-fd00:18::ff"]
`

func TestImportWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		warn     []string
	}{
		{"vlan of an older version", v6pool + "  vlan: 100\n", []string{"SpiderIPPool v6: spec.vlan: allot has no equivalent"}},
		{"empty pool", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: e}
spec: {subnet: 10.0.0.0/24}
`, []string{"SpiderIPPool e: spec.ips: empty"}},
		{"stale endpoint", v6pool + `status:
  allocatedIPs: '{"fd00:18::10":{"pod":"a/b","podUid":"u2"}}'
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderEndpoint
metadata: {name: b, namespace: a}
status: {current: {uid: u1, node: n1, ips: [{interface: eth0, ipv6: "fd00:18::10/64"}]}}
`, []string{"status.allocatedIPs[fd00:18::10]: no SpiderEndpoint a/b of pod UID u2"}},
		{"auto pool of a subnet not imported", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata:
  name: auto
  labels: {ipam.spidernet.io/owner-spider-subnet: gone}
spec: {subnet: 10.0.0.0/24, ips: [10.0.0.5]}
`, []string{"metadata.labels[ipam.spidernet.io/owner-application-kind]: no application",
			`metadata.labels[ipam.spidernet.io/owner-spider-subnet]: SpiderSubnet "gone" is not imported`}},
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

// Older Spiderpool releases named an auto pool's application in one label, Kind_namespace_name.
func TestImportAutoPoolOldLabel(t *testing.T) {
	for l, want := range map[string]string{"Deployment_web-ns_web-1": "Deployment/web-ns/web-1", "Deployment_web": "", "_ns_": ""} {
		if got := appOf(map[string]string{labelAppOld: l}); got != want {
			t.Errorf("%q: %q, want %q", l, got, want)
		}
	}
}

func TestImportIPv6Claim(t *testing.T) {
	res, err := Import(peertest.Objects(t, v6pool+`status:
  allocatedIPs: '{"fd00:18::10":{"pod":"a/b","podUid":"u1"}}'
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderEndpoint
metadata: {name: b, namespace: a}
status:
  current: {uid: u1, node: n1, ips: [{interface: eth0, ipv6: "fd00:18::10/64"}]}
  ownerControllerType: VirtualMachineInstance
  ownerControllerName: vm1
`))
	if err != nil {
		t.Fatal(err)
	}
	c := peertest.Find[*allotv1.AddressClaim](t, res.Objects, "v6-fd000018000000000000000000000010")
	if c.Spec.IP != "fd00:18::10" || c.Spec.Holder.VirtualMachine != "vm1" || c.Spec.Holder.Node != "n1" {
		t.Errorf("claim: %+v", c.Spec)
	}
}

func TestImportErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"subnet host bits", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: p}
spec: {subnet: 10.0.0.1/24, ips: [10.0.0.5]}
`, "SpiderIPPool p: spec.subnet: 10.0.0.1/24 has host bits set"},
		{"ipVersion", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: p}
spec: {ipVersion: 6, subnet: 10.0.0.0/24, ips: [10.0.0.5]}
`, "spec.subnet: 10.0.0.0/24 is not an IPv6 subnet"},
		{"ip outside subnet", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: p}
spec: {subnet: 10.0.0.0/24, ips: [10.0.0.5-10.0.1.5]}
`, "spec.ips[0]: 10.0.0.5-10.0.1.5 is not inside spec.subnet"},
		{"range backwards", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: p}
spec: {subnet: 10.0.0.0/24, ips: [10.0.0.9-10.0.0.5]}
`, "spec.ips[0]: 10.0.0.9-10.0.0.5 ends before it starts"},
		{"gateway", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: p}
spec: {subnet: 10.0.0.0/24, ips: [10.0.0.5], gateway: 10.9.0.1}
`, "spec.gateway: 10.9.0.1 is not inside spec.subnet"},
		{"route", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: p}
spec: {subnet: 10.0.0.0/24, ips: [10.0.0.5], routes: [{dst: nowhere, gw: 10.0.0.1}]}
`, `spec.routes[0].dst: "nowhere" is not a CIDR`},
		{"allocatedIPs not JSON", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: p}
spec: {subnet: 10.0.0.0/24, ips: [10.0.0.5]}
status: {allocatedIPs: "{oops"}
`, "SpiderIPPool p: status.allocatedIPs: not a JSON object"},
		{"allocated pod without UID", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: p}
spec: {subnet: 10.0.0.0/24, ips: [10.0.0.5]}
status: {allocatedIPs: '{"10.0.0.5":{"pod":"a/b"}}'}
`, "status.allocatedIPs[10.0.0.5]: pod \"a/b\" / podUid \"\": want namespace/name and a UID"},
		{"allocated twice", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: p}
spec: {subnet: 10.0.0.0/24, ips: [10.0.0.5]}
status: {allocatedIPs: '{"10.0.0.5":{"pod":"a/b","podUid":"u"}}'}
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: q}
spec: {subnet: 10.0.0.0/24, ips: [10.0.0.5]}
status: {allocatedIPs: '{"10.0.0.5":{"pod":"a/c","podUid":"v"}}'}
`, "SpiderIPPool q: status.allocatedIPs[10.0.0.5]: 10.0.0.5 is also allocated in SpiderIPPool p"},
		{"reserved mixed families", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderReservedIP
metadata: {name: r}
spec: {ips: ["10.0.0.1-fd00::1"]}
`, "SpiderReservedIP r: spec.ips[0]: 10.0.0.1-fd00::1 mixes families"},
		{"endpoint address", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderEndpoint
metadata: {name: b, namespace: a}
status: {current: {uid: u1, ips: [{interface: eth0, ipv4: "10.0.0.500/24"}]}}
`, `SpiderEndpoint a/b: status.current.ips[0].ipv4: "10.0.0.500/24" is not an IP address`},
		{"subnet name", `
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderSubnet
metadata: {name: a-name-that-is-far-too-long-to-be-a-label-value-of-the-auto-pools-cut}
spec: {subnet: 10.0.0.0/24, ips: [10.0.0.5]}
`, "metadata.name: longer than 63 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Import(peertest.Objects(t, tc.in))
			peertest.Error(t, err, tc.want)
		})
	}
}
