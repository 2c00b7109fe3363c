// Package cilium maps Cilium's IPAM objects to allot's: CiliumPodIPPool (cilium.io/v2alpha1,
// multi-pool IPAM) to IPPool, and the IPAM sections of CiliumNode (cilium.io/v2) to
// AllotNode, so that every block a node holds and every ENI address it has keeps serving
// the pods that use it. The shapes follow Cilium's pkg/k8s/apis/cilium.io/v2alpha1
// (ippool_types.go) and pkg/ipam/types (IPAMSpec, IPAMStatus), and the ENI spec of
// pkg/aws/eni/types.
package cilium

import (
	"fmt"
	"net/netip"

	"github.com/allot-ipam/allot/core/importer/mapping"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Group and the kinds this package reads.
const (
	Group        = "cilium.io"
	KindPool     = "CiliumPodIPPool"
	KindNode     = "CiliumNode"
	VersionPool  = "v2alpha1"
	VersionNode  = "v2"
	maxWatermark = 4096 // allot's bound on the ENI watermarks (AllotNode spec.eni)
)

type poolFamily struct {
	CIDRs    []string `json:"cidrs"`
	MaskSize int      `json:"maskSize"`
}

type podIPPool struct {
	Spec struct {
		IPv4              *poolFamily           `json:"ipv4"`
		IPv6              *poolFamily           `json:"ipv6"`
		AllowFirstIP      bool                  `json:"allowFirstIP"`
		AllowLastIP       bool                  `json:"allowLastIP"`
		PodSelector       *metav1.LabelSelector `json:"podSelector"`
		NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector"`
	} `json:"spec"`
}

var poolFields = mapping.Fields{
	"ipv4":              {"cidrs": nil, "maskSize": nil},
	"ipv6":              {"cidrs": nil, "maskSize": nil},
	"allowFirstIP":      nil,
	"allowLastIP":       nil,
	"podSelector":       nil,
	"namespaceSelector": nil,
}

// pool is an imported pool, kept to check the nodes' blocks against it.
type pool struct {
	cidrs [2][]netip.Prefix // IPv4, IPv6
	mask  [2]int
}

// Import maps CiliumPodIPPools and CiliumNodes (other objects are the caller's error).
func Import(objs []*unstructured.Unstructured) (mapping.Result, error) {
	var res mapping.Result
	pools := map[string]*pool{}
	var nodes []*unstructured.Unstructured
	for _, u := range objs {
		switch u.GetKind() {
		case KindPool:
			p, err := importPool(&res, u)
			if err != nil {
				return res, err
			}
			pools[u.GetName()] = p
		case KindNode:
			nodes = append(nodes, u)
		default:
			return res, res.On(u).Errorf("", "not a kind the cilium importer reads")
		}
	}
	for _, u := range nodes {
		if err := importNode(&res, u, pools); err != nil {
			return res, err
		}
	}
	return res, nil
}

func importPool(res *mapping.Result, u *unstructured.Unstructured) (*pool, error) {
	o := res.On(u)
	var in podIPPool
	if err := o.Decode(u, &in); err != nil {
		return nil, err
	}
	o.Unmapped(u, "spec", poolFields)
	if in.Spec.IPv4 == nil && in.Spec.IPv6 == nil {
		return nil, o.Errorf("spec", "neither ipv4 nor ipv6 is set")
	}
	out := &allotv1.IPPool{TypeMeta: typeMeta("IPPool"), ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}
	p := &pool{}
	for fi, f := range []struct {
		name string
		in   *poolFamily
		out  **allotv1.PoolFamily
	}{{"ipv4", in.Spec.IPv4, &out.Spec.IPv4}, {"ipv6", in.Spec.IPv6, &out.Spec.IPv6}} {
		if f.in == nil {
			continue
		}
		fam, cidrs, err := poolFamilyOf(o, "spec."+f.name, fi == 0, f.in)
		if err != nil {
			return nil, err
		}
		*f.out, p.cidrs[fi], p.mask[fi] = fam, cidrs, f.in.MaskSize
	}
	if in.Spec.AllowFirstIP || in.Spec.AllowLastIP {
		o.Warn("spec.allowFirstIP", "allot reserves each block's first usable address as the pods' gateway and never hands out the network and broadcast addresses; allowFirstIP/allowLastIP are not imported")
	}
	for _, s := range []struct {
		field string
		in    *metav1.LabelSelector
		out   **metav1.LabelSelector
	}{{"spec.podSelector", in.Spec.PodSelector, &out.Spec.PodAffinity}, {"spec.namespaceSelector", in.Spec.NamespaceSelector, &out.Spec.NamespaceAffinity}} {
		if s.in == nil {
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(s.in); err != nil {
			return nil, o.Errorf(s.field, "%v", err)
		}
		*s.out = s.in
	}
	res.Objects = append(res.Objects, out)
	return p, nil
}

func poolFamilyOf(o mapping.Object, field string, is4 bool, in *poolFamily) (*allotv1.PoolFamily, []netip.Prefix, error) {
	bits := mapping.Bits(is4)
	if len(in.CIDRs) == 0 {
		return nil, nil, o.Errorf(field+".cidrs", "must not be empty")
	}
	if in.MaskSize < 1 || in.MaskSize > bits {
		return nil, nil, o.Errorf(field+".maskSize", "%d is not between 1 and %d", in.MaskSize, bits)
	}
	out := &allotv1.PoolFamily{MaskSize: int32(in.MaskSize)}
	var cidrs []netip.Prefix
	for i, c := range in.CIDRs {
		f := fmt.Sprintf("%s.cidrs[%d]", field, i)
		p, err := o.Prefix(f, c)
		if err != nil {
			return nil, nil, err
		}
		if p.Addr().Is4() != is4 {
			return nil, nil, o.Errorf(f, "%s is not of the family of %s", c, field)
		}
		if p.Bits() > in.MaskSize {
			return nil, nil, o.Errorf(field+".maskSize", "/%d is longer than %s", in.MaskSize, c)
		}
		for j, q := range cidrs {
			if q.Overlaps(p) {
				return nil, nil, o.Errorf(f, "%s overlaps %s.cidrs[%d] %s", c, field, j, q)
			}
		}
		cidrs = append(cidrs, p)
		out.CIDRs = append(out.CIDRs, p.String())
	}
	return out, cidrs, nil
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: allotv1.SchemeGroupVersion.String(), Kind: kind}
}
