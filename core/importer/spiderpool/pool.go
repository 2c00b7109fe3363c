package spiderpool

import (
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/allot-ipam/allot/core/importer/mapping"
	"github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

type ipPool struct {
	Spec struct {
		addressSpec
		PodAffinity       *metav1.LabelSelector `json:"podAffinity"`
		NamespaceAffinity *metav1.LabelSelector `json:"namespaceAffinity"`
		NamespaceName     []string              `json:"namespaceName"`
		NodeAffinity      *metav1.LabelSelector `json:"nodeAffinity"`
		NodeName          []string              `json:"nodeName"`
		MultusName        []string              `json:"multusName"`
		Default           *bool                 `json:"default"`
		Disable           *bool                 `json:"disable"`
	} `json:"spec"`
	Status struct {
		// AllocatedIPs is a JSON document of its own (PoolIPAllocations): address -> pod.
		AllocatedIPs *string `json:"allocatedIPs"`
	} `json:"status"`
}

type poolAllocation struct {
	Pod    string `json:"pod"`
	PodUID string `json:"podUid"`
}

func poolFields() mapping.Fields {
	f := mapping.Fields{"podAffinity": nil, "namespaceAffinity": nil, "namespaceName": nil, "nodeAffinity": nil,
		"nodeName": nil, "multusName": nil, "default": nil, "disable": nil}
	for k, v := range addressFields {
		f[k] = v
	}
	return f
}

func importPool(res *mapping.Result, u *unstructured.Unstructured, eps map[string]*endpoint, claimed map[netip.Addr]string, subnets map[string]*allotv1.AllotSubnet) error {
	o := res.On(u)
	var in ipPool
	if err := o.Decode(u, &in); err != nil {
		return err
	}
	o.Unmapped(u, "spec", poolFields())
	sub, ips, excl, gw, routes, err := sharedFamily(o, &in.Spec.addressSpec)
	if err != nil {
		return err
	}
	if len(ips) == 0 {
		o.Warn("spec.ips", "empty: an allot SharedIPPool needs at least one address; pool not imported")
		return nil
	}
	fam := &allotv1.SharedPoolFamily{Subnet: sub.String(), IPs: ips, ExcludeIPs: excl, Gateway: gw, Routes: routes}
	out := &allotv1.SharedIPPool{TypeMeta: typeMeta("SharedIPPool"), ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}
	if sub.Addr().Is4() {
		out.Spec.IPv4 = fam
	} else {
		out.Spec.IPv6 = fam
	}
	sel := &out.Spec.PoolSelection
	sel.NamespaceName, sel.NodeName, sel.MultusName = in.Spec.NamespaceName, in.Spec.NodeName, in.Spec.MultusName
	sel.Default = in.Spec.Default != nil && *in.Spec.Default
	sel.Disable = in.Spec.Disable != nil && *in.Spec.Disable
	for _, s := range []struct {
		field string
		in    *metav1.LabelSelector
		out   **metav1.LabelSelector
	}{{"spec.podAffinity", in.Spec.PodAffinity, &sel.PodAffinity}, {"spec.namespaceAffinity", in.Spec.NamespaceAffinity, &sel.NamespaceAffinity},
		{"spec.nodeAffinity", in.Spec.NodeAffinity, &sel.NodeAffinity}} {
		if s.in == nil {
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(s.in); err != nil {
			return o.Errorf(s.field, "%v", err)
		}
		*s.out = s.in
	}
	autoPool(o, u, out, subnets)
	res.Objects = append(res.Objects, out)
	return poolClaims(res, o, u.GetName(), in.Status.AllocatedIPs, sub, eps, claimed)
}

// autoPool carries the marks of a pool Spiderpool cut from a SpiderSubnet for a workload
// over to allot's (AllotSubnet's auto pools), and records its addresses in the subnet's
// status.allocations so the operator never cuts them for another pool.
func autoPool(o mapping.Object, u *unstructured.Unstructured, out *allotv1.SharedIPPool, subnets map[string]*allotv1.AllotSubnet) {
	l := u.GetLabels()
	subName := l[labelOwnerSubnet]
	if subName == "" {
		return
	}
	app := appOf(l)
	if app == "" {
		o.Warn("metadata.labels["+labelAppKind+"]", "no application: the operator cannot give this pool to a workload (it keeps its addresses)")
	}
	out.Labels = map[string]string{allotv1.LabelSubnet: subName, allotv1.LabelAutoPool: "true"}
	out.Annotations = map[string]string{}
	for k, v := range map[string]string{allotv1.AnnotationAutoPoolApp: app, allotv1.AnnotationAutoPoolAppUID: l[labelAppUID],
		allotv1.AnnotationAutoPoolInterface: l[labelInterface], allotv1.AnnotationAutoPoolReclaim: l[labelReclaim]} {
		if v != "" {
			out.Annotations[k] = v
		}
	}
	s := subnets[subName]
	if s == nil {
		o.Warn("metadata.labels["+labelOwnerSubnet+"]", "SpiderSubnet %q is not imported; the pool is kept, but no AllotSubnet records its addresses", subName)
		return
	}
	fam, ips := "ipv4", out.Spec.IPv4
	if ips == nil {
		fam, ips = "ipv6", out.Spec.IPv6
	}
	s.Status.Allocations = append(s.Status.Allocations, allotv1.SubnetAllocation{Pool: out.Name, Family: fam,
		Application: app, Interface: l[labelInterface], IPs: ips.IPs})
}

// appOf is the workload (Kind/namespace/name, as allot's auto pools name it) Spiderpool's
// labels say an auto pool belongs to: its owner-application-kind, -namespace and -name, or,
// as older Spiderpool releases wrote it, owner-application "Kind_namespace_name" ('_' is in
// no Kubernetes name). "" when neither is there.
func appOf(l map[string]string) string {
	if l[labelAppKind] != "" && l[labelAppName] != "" {
		return l[labelAppKind] + "/" + l[labelAppNS] + "/" + l[labelAppName]
	}
	parts := strings.Split(l[labelAppOld], "_")
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return ""
	}
	return strings.Join(parts, "/")
}

// poolClaims turns the pool's allocated addresses into AddressClaims for the same pods.
func poolClaims(res *mapping.Result, o mapping.Object, pool string, doc *string, sub netip.Prefix, eps map[string]*endpoint, claimed map[netip.Addr]string) error {
	if doc == nil || strings.TrimSpace(*doc) == "" {
		return nil
	}
	var allocs map[string]poolAllocation
	if err := json.Unmarshal([]byte(*doc), &allocs); err != nil {
		return o.Errorf("status.allocatedIPs", "not a JSON object of address -> {pod, podUid}: %v", err)
	}
	byAddr := map[netip.Addr]poolAllocation{}
	for ip, a := range allocs {
		addr, err := o.Addr("status.allocatedIPs["+ip+"]", ip)
		if err != nil {
			return err
		}
		byAddr[addr] = a
	}
	for _, addr := range slices.SortedFunc(maps.Keys(byAddr), netip.Addr.Compare) {
		a := byAddr[addr]
		f := "status.allocatedIPs[" + addr.String() + "]"
		if !sub.Contains(addr) {
			return o.Errorf(f, "%s is not inside spec.subnet %s", addr, sub)
		}
		if prev, ok := claimed[addr]; ok {
			return o.Errorf(f, "%s is also allocated in SpiderIPPool %s", addr, prev)
		}
		claimed[addr] = pool
		ns, name, ok := strings.Cut(a.Pod, "/")
		if !ok || ns == "" || name == "" || a.PodUID == "" {
			return o.Errorf(f, "pod %q / podUid %q: want namespace/name and a UID", a.Pod, a.PodUID)
		}
		h := allotv1.AddressHolder{Namespace: ns, Pod: name, PodUID: a.PodUID, Interface: "eth0"}
		holderFromEndpoint(o, f, addr, &h, eps[a.Pod])
		res.Objects = append(res.Objects, &allotv1.AddressClaim{TypeMeta: typeMeta("AddressClaim"),
			ObjectMeta: metav1.ObjectMeta{Name: k8s.ClaimName(addr)},
			Spec:       allotv1.AddressClaimSpec{IP: addr.String(), Pool: pool, Holder: h}})
	}
	return nil
}
