// Package clustercidr maps the node-podCIDR configurations of Kubernetes' ClusterCIDR
// (networking.k8s.io/v1alpha1, KEP-2593 "multiple cluster CIDRs") and of Google Distributed
// Cloud's ClusterCIDRConfig (baremetal.cluster.gke.io/v1alpha1) to allot's ClusterCIDRConfig,
// and checks every Node's spec.podCIDRs against the result: a Node keeps its pod CIDRs
// (they are immutable), and one that no imported config would have given it is reported,
// as the allot operator will report it (reserved, never handed out again).
package clustercidr

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/allot-ipam/allot/core/importer/mapping"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// Groups, versions and kinds this package reads.
const (
	GroupKEP       = "networking.k8s.io"
	VersionKEP     = "v1alpha1"
	KindKEP        = "ClusterCIDR"
	GroupGDC       = "baremetal.cluster.gke.io"
	VersionGDC     = "v1alpha1"
	KindGDC        = "ClusterCIDRConfig"
	KindNode       = "Node"
	GroupNode      = ""
	VersionNode    = "v1"
	maxConfigName  = 253
	termNameFormat = "%s-%d"
)

// Import maps ClusterCIDRs and GDC ClusterCIDRConfigs and checks Nodes against them.
func Import(objs []*unstructured.Unstructured) (mapping.Result, error) {
	var res mapping.Result
	var nodes []*unstructured.Unstructured
	from := map[string]string{} // allot config name -> the peer object it came from
	for _, u := range objs {
		var cfgs []*allotv1.ClusterCIDRConfig
		var err error
		switch {
		case u.GroupVersionKind().Group == GroupKEP && u.GetKind() == KindKEP:
			cfgs, err = importKEP(&res, u)
		case u.GroupVersionKind().Group == GroupGDC && u.GetKind() == KindGDC:
			cfgs, err = importGDC(&res, u)
		case u.GetKind() == KindNode:
			nodes = append(nodes, u)
			continue
		default:
			return res, res.On(u).Errorf("", "not a kind the clustercidr importer reads")
		}
		if err != nil {
			return res, err
		}
		for _, c := range cfgs {
			self := u.GetKind() + " " + u.GetName()
			if u.GetNamespace() != "" {
				self = u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
			}
			if prev, ok := from[c.Name]; ok {
				return res, res.On(u).Errorf("metadata.name", "maps to ClusterCIDRConfig %q, as %s does; rename one of them", c.Name, prev)
			}
			from[c.Name] = self
			res.Objects = append(res.Objects, c)
		}
	}
	var cfgs []*allotv1.ClusterCIDRConfig
	for _, o := range res.Objects {
		cfgs = append(cfgs, o.(*allotv1.ClusterCIDRConfig))
	}
	for _, u := range nodes {
		if err := checkNode(&res, u, cfgs); err != nil {
			return res, err
		}
	}
	return res, nil
}

// block checks one family: cidr of field, and a per-node mask size between its prefix
// length and the family's length.
func block(o mapping.Object, field, cidr string, is4 bool, mask int) (*allotv1.CIDRBlockSpec, error) {
	p, err := o.Prefix(field, cidr)
	if err != nil {
		return nil, err
	}
	if p.Addr().Is4() != is4 {
		return nil, o.Errorf(field, "%s is not an IPv%d CIDR", cidr, map[bool]int{true: 4, false: 6}[is4])
	}
	if mask < p.Bits() || mask > mapping.Bits(is4) {
		return nil, o.Errorf(field, "per-node blocks of /%d do not fit in %s", mask, p)
	}
	return &allotv1.CIDRBlockSpec{CIDR: p.String(), PerNodeMaskSize: int32(mask)}, nil
}

func typeMeta() metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: allotv1.SchemeGroupVersion.String(), Kind: "ClusterCIDRConfig"}
}

// checkNode reports a Node whose pod CIDRs no imported config selecting it holds at its
// per-node size.
func checkNode(res *mapping.Result, u *unstructured.Unstructured, cfgs []*allotv1.ClusterCIDRConfig) error {
	o := res.On(u)
	var n corev1.Node
	if err := o.Decode(u, &n); err != nil {
		return err
	}
	src, field := n.Spec.PodCIDRs, "spec.podCIDRs"
	if len(src) == 0 && n.Spec.PodCIDR != "" {
		src, field = []string{n.Spec.PodCIDR}, "spec.podCIDR"
	}
	for i, c := range src {
		f := fmt.Sprintf("%s[%d]", field, i)
		p, err := o.Prefix(f, c)
		if err != nil {
			return err
		}
		if holder(cfgs, labels.Set(n.Labels), p) == "" {
			o.Warn(f, "%s lies in no imported config selecting this node at its per-node size; the node keeps it (pod CIDRs are immutable), the allot operator reserves it and reports the node (ForeignPodCIDR)", p)
		}
	}
	return nil
}

func holder(cfgs []*allotv1.ClusterCIDRConfig, l labels.Set, p netip.Prefix) string {
	names := []string{}
	for _, c := range cfgs {
		sel, err := metav1.LabelSelectorAsSelector(c.Spec.NodeSelector)
		if err != nil || (c.Spec.NodeSelector != nil && !sel.Matches(l)) {
			continue
		}
		for _, b := range []*allotv1.CIDRBlockSpec{c.Spec.IPv4, c.Spec.IPv6} {
			if b == nil {
				continue
			}
			cp := netip.MustParsePrefix(b.CIDR)
			if int(b.PerNodeMaskSize) == p.Bits() && cp.Bits() <= p.Bits() && cp.Contains(p.Addr()) {
				names = append(names, c.Name)
			}
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}
