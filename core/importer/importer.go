// Package importer turns the IPAM objects of the systems allot models (Cilium, Spiderpool,
// ClusterCIDR) into allot's objects, keeping every address a running pod holds: a node's
// blocks stay its blocks, a pod's address stays claimed for it, a node's pod CIDRs stay
// its pod CIDRs. The mapping is pure (objects in, objects and warnings out), one package
// per peer; reading peer objects from files is here too (Decode), reading them from a
// cluster and writing the result is allotctl's.
package importer

import (
	"fmt"
	"sort"

	"github.com/allot-ipam/allot/core/importer/cilium"
	"github.com/allot-ipam/allot/core/importer/clustercidr"
	"github.com/allot-ipam/allot/core/importer/mapping"
	"github.com/allot-ipam/allot/core/importer/spiderpool"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Result and Warning are mapping's, so that callers need only this package.
type (
	Result  = mapping.Result
	Warning = mapping.Warning
)

// Source is one kind of peer object the importer reads.
type Source struct {
	GVK      schema.GroupVersionKind
	Resource string // plural, for a dynamic client
	// Namespaced kinds are listed in every namespace.
	Namespaced bool
	peer       string
}

// Sources are every kind the importer reads, in the order a cluster is listed.
var Sources = []Source{
	{schema.GroupVersionKind{Group: cilium.Group, Version: cilium.VersionPool, Kind: cilium.KindPool}, "ciliumpodippools", false, "cilium"},
	{schema.GroupVersionKind{Group: cilium.Group, Version: cilium.VersionNode, Kind: cilium.KindNode}, "ciliumnodes", false, "cilium"},
	{schema.GroupVersionKind{Group: spiderpool.Group, Version: spiderpool.Version, Kind: spiderpool.KindSubnet}, "spidersubnets", false, "spiderpool"},
	{schema.GroupVersionKind{Group: spiderpool.Group, Version: spiderpool.Version, Kind: spiderpool.KindReservedIP}, "spiderreservedips", false, "spiderpool"},
	{schema.GroupVersionKind{Group: spiderpool.Group, Version: spiderpool.Version, Kind: spiderpool.KindIPPool}, "spiderippools", false, "spiderpool"},
	{schema.GroupVersionKind{Group: spiderpool.Group, Version: spiderpool.Version, Kind: spiderpool.KindEndpoint}, "spiderendpoints", true, "spiderpool"},
	{schema.GroupVersionKind{Group: clustercidr.GroupKEP, Version: clustercidr.VersionKEP, Kind: clustercidr.KindKEP}, "clustercidrs", false, "clustercidr"},
	{schema.GroupVersionKind{Group: clustercidr.GroupGDC, Version: clustercidr.VersionGDC, Kind: clustercidr.KindGDC}, "clustercidrconfigs", true, "clustercidr"},
	{schema.GroupVersionKind{Version: clustercidr.VersionNode, Kind: clustercidr.KindNode}, "nodes", false, "clustercidr"},
}

// sourceOf finds u's Source. The version is not compared: a peer object of another
// version that decodes into the shape read is accepted, and one that does not fails on
// the field that differs.
func sourceOf(u *unstructured.Unstructured) (Source, bool) {
	gvk := u.GroupVersionKind()
	for _, s := range Sources {
		if s.GVK.Group == gvk.Group && s.GVK.Kind == gvk.Kind {
			return s, true
		}
	}
	return Source{}, false
}

var peers = map[string]func([]*unstructured.Unstructured) (mapping.Result, error){
	"cilium":      cilium.Import,
	"spiderpool":  spiderpool.Import,
	"clustercidr": clustercidr.Import,
}

// Import maps peer objects to allot objects. Objects of kinds it does not read are
// reported and skipped; invalid ones fail the import with an error naming the object and
// field. The result is sorted (kind in creation order, then name), and two peer objects
// mapping to the same allot object are an error.
func Import(objs []*unstructured.Unstructured) (Result, error) {
	var res Result
	byPeer := map[string][]*unstructured.Unstructured{}
	for _, u := range objs {
		s, ok := sourceOf(u)
		if !ok {
			res.On(u).Warn("", "apiVersion %s: not a kind allot imports; skipped", u.GetAPIVersion())
			continue
		}
		if s.GVK.Kind == clustercidr.KindNode && !hasClusterCIDR(objs) {
			continue // Nodes are read only to check them against ClusterCIDR configs
		}
		byPeer[s.peer] = append(byPeer[s.peer], u)
	}
	for _, p := range []string{"cilium", "spiderpool", "clustercidr"} {
		if len(byPeer[p]) == 0 {
			continue
		}
		r, err := peers[p](byPeer[p])
		if err != nil {
			return Result{}, err
		}
		res.Add(r)
	}
	sortObjects(res.Objects)
	for i := 1; i < len(res.Objects); i++ {
		a, b := res.Objects[i-1], res.Objects[i]
		if kindOf(a) == kindOf(b) && a.GetName() == b.GetName() {
			return Result{}, fmt.Errorf("two peer objects map to %s %q", kindOf(a), a.GetName())
		}
	}
	return res, nil
}

func hasClusterCIDR(objs []*unstructured.Unstructured) bool {
	for _, u := range objs {
		if s, ok := sourceOf(u); ok && s.peer == "clustercidr" && s.GVK.Kind != clustercidr.KindNode {
			return true
		}
	}
	return false
}

// Order is the order allot kinds are written in: what others refer to comes first (pools
// before the nodes and claims naming them, subnets before the pools cut from them).
var Order = []string{"AllotSubnet", "ReservedIP", "SharedIPPool", "IPPool", "ClusterCIDRConfig", "AllotNode", "AddressClaim"}

func kindOf(o client.Object) string { return o.GetObjectKind().GroupVersionKind().Kind }

func rank(kind string) int {
	for i, k := range Order {
		if k == kind {
			return i
		}
	}
	return len(Order)
}

func sortObjects(objs []client.Object) {
	sort.SliceStable(objs, func(i, j int) bool {
		ri, rj := rank(kindOf(objs[i])), rank(kindOf(objs[j]))
		if ri != rj {
			return ri < rj
		}
		return objs[i].GetName() < objs[j].GetName()
	})
}
