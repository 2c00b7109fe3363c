package importer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/importer/internal/peertest"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestImportTestdata maps every peer of testdata/ at once: objects come out in the order
// they are written (subnets and pools before what refers to them), each once.
func TestImportTestdata(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	var all []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(append(all, b...), "\n---\n"...)
	}
	objs, err := Decode("testdata", all)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Import(objs)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range res.Objects {
		k := kindOf(o)
		if len(kinds) == 0 || kinds[len(kinds)-1] != k {
			kinds = append(kinds, k)
		}
	}
	if got := strings.Join(kinds, ","); got != strings.Join(Order, ",") {
		t.Errorf("kinds in order %s, want %s", got, strings.Join(Order, ","))
	}
	peertest.Warnings(t, res.Warnings, "no SpiderEndpoint prod/web-7d9f", "Node legacy-node")
}

func TestImportUnknownKindAndNodes(t *testing.T) {
	objs, err := Decode("x.yaml", []byte(`
apiVersion: crd.projectcalico.org/v1
kind: IPPool
metadata: {name: calico}
spec: {cidr: 10.0.0.0/16}
---
apiVersion: v1
kind: Node
metadata: {name: n1}
spec: {podCIDR: 10.99.0.0/24}
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Import(objs)
	if err != nil {
		t.Fatal(err)
	}
	// Without a ClusterCIDR config, Nodes are not checked (nothing claims their CIDRs).
	peertest.Warnings(t, res.Warnings, "IPPool calico: apiVersion crd.projectcalico.org/v1: not a kind allot imports; skipped")
	if len(res.Objects) != 0 {
		t.Errorf("objects: %v", res.Objects)
	}
}

func TestImportDuplicate(t *testing.T) {
	objs, err := Decode("x.yaml", []byte(`
apiVersion: networking.k8s.io/v1alpha1
kind: ClusterCIDR
metadata: {name: w}
spec: {perNodeHostBits: 8, ipv4: 10.0.0.0/16}
---
apiVersion: baremetal.cluster.gke.io/v1alpha1
kind: ClusterCIDRConfig
metadata: {name: w, namespace: c}
spec: {ipv4: {cidr: 10.1.0.0/16, perNodeMaskSize: 24}}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Import(objs)
	peertest.Error(t, err, `maps to ClusterCIDRConfig "w", as ClusterCIDR w does`)
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		err      string
	}{
		{"multi-document YAML", "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: Node\nmetadata: {name: b}\n", 2, ""},
		{"JSON", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"a"}}`, 1, ""},
		{"JSON stream", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"a"}} {"apiVersion":"v1","kind":"Node","metadata":{"name":"b"}}`, 2, ""},
		{"List", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: a}}\n- {apiVersion: v1, kind: Node, metadata: {name: b}}\n", 2, ""},
		{"no kind", "apiVersion: v1\nmetadata: {name: a}\n", 0, "f.yaml: document 1: kind: must be a non-empty string"},
		{"no name", "apiVersion: v1\nkind: Node\n", 0, "document 1: Node: metadata.name: must not be empty"},
		{"name not a string", "apiVersion: v1\nkind: Node\nmetadata: {name: [a]}\n", 0, "Node: metadata.name: not a string"},
		{"labels not strings", "apiVersion: v1\nkind: Node\nmetadata: {name: a, labels: {a: {b: c}}}\n", 0, "Node: metadata.labels:"},
		{"List item", "apiVersion: v1\nkind: List\nitems:\n- 3\n", 0, "List: items[0]: not an object"},
		{"not YAML", "apiVersion: v1\nkind: [\n", 0, "f.yaml: document 1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode("f.yaml", []byte(tc.in))
			if tc.err != "" {
				peertest.Error(t, err, tc.err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != tc.n {
				t.Errorf("got %d objects, want %d", len(objs), tc.n)
			}
		})
	}
}

// FuzzDecodeImport: no input makes the file parser or the importers panic, and what they
// accept comes out as allot objects with names.
func FuzzDecodeImport(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"cilium.io/v2","kind":"CiliumNode","metadata":{"name":"n"},"spec":{"ipam":{"pools":{"allocated":[{"pool":"a","cidrs":["10.0.0.0/24"]}]}}}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Decode("fuzz", data)
		if err != nil {
			return
		}
		res, err := Import(objs)
		if err != nil {
			return
		}
		for _, o := range res.Objects {
			if o.GetName() == "" || kindOf(o) == "" {
				t.Fatalf("object without name or kind: %#v", o)
			}
		}
	})
}

func TestMerge(t *testing.T) {
	existing := &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7"}}
	existing.Spec.IPAM.Pools.Allocated = []allotv1.PoolAllocation{{Pool: "default", CIDRs: []string{"10.0.9.0/24"}}}
	existing.Spec.IPAM.Pools.Requested = []allotv1.PoolRequest{{Pool: "default", Needed: allotv1.AddressCounts{IPv4: 3}}}
	desired := &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	desired.Spec.IPAM.Pools.Allocated = []allotv1.PoolAllocation{{Pool: "default", CIDRs: []string{"10.0.1.0/24", "10.0.9.0/24"}}, {Pool: "b", CIDRs: []string{"10.5.0.0/26"}}}
	desired.Spec.IPAM.Pools.Requested = []allotv1.PoolRequest{{Pool: "default", Needed: allotv1.AddressCounts{IPv4: 16}}}
	m, changed, err := Merge(existing, desired)
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	n := m.(*allotv1.AllotNode)
	a := n.Spec.IPAM.Pools.Allocated
	if len(a) != 2 || strings.Join(a[0].CIDRs, ",") != "10.0.9.0/24,10.0.1.0/24" || a[1].Pool != "b" {
		t.Errorf("blocks: %+v", a)
	}
	if n.Spec.IPAM.Pools.Requested[0].Needed.IPv4 != 3 || n.ResourceVersion != "7" {
		t.Errorf("the agent's request and the resourceVersion are kept: %+v", n)
	}
	if _, changed, _ := Merge(m, desired); changed {
		t.Error("merging again changes nothing")
	}

	claim := func(uid string) *allotv1.AddressClaim {
		return &allotv1.AddressClaim{ObjectMeta: metav1.ObjectMeta{Name: "v4-10.0.0.5"}, Spec: allotv1.AddressClaimSpec{IP: "10.0.0.5", Pool: "p",
			Holder: allotv1.AddressHolder{Namespace: "a", Pod: "b", PodUID: uid, ContainerID: "c1"}}}
	}
	if _, changed, err := Merge(claim("u1"), claim("u1")); err != nil || changed {
		t.Errorf("the same pod's claim: changed %v, %v", changed, err)
	}
	_, _, err = Merge(claim("u1"), claim("u2"))
	peertest.Error(t, err, "AddressClaim v4-10.0.0.5: 10.0.0.5 is held by pod a/b (UID u1)")
}
