package clustercidr

import (
	"fmt"

	"github.com/allot-ipam/allot/core/importer/mapping"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// kepClusterCIDR is networking.k8s.io/v1alpha1 ClusterCIDR (KEP-2593).
type kepClusterCIDR struct {
	Spec struct {
		NodeSelector    *corev1.NodeSelector `json:"nodeSelector"`
		PerNodeHostBits int                  `json:"perNodeHostBits"`
		IPv4            string               `json:"ipv4"`
		IPv6            string               `json:"ipv6"`
	} `json:"spec"`
}

var kepFields = mapping.Fields{"nodeSelector": {"nodeSelectorTerms": {"matchExpressions": nil, "matchFields": nil}},
	"perNodeHostBits": nil, "ipv4": nil, "ipv6": nil}

// importKEP maps one ClusterCIDR. Its node selector is a core NodeSelector, whose terms are
// ORed; allot's is a label selector, so each term becomes a config of its own
// ("<name>-<i>"): configs may overlap, and a block handed out of one is used in all.
func importKEP(res *mapping.Result, u *unstructured.Unstructured) ([]*allotv1.ClusterCIDRConfig, error) {
	o := res.On(u)
	var in kepClusterCIDR
	if err := o.Decode(u, &in); err != nil {
		return nil, err
	}
	o.Unmapped(u, "spec", kepFields)
	var spec allotv1.ClusterCIDRConfigSpec
	hb := in.Spec.PerNodeHostBits
	if in.Spec.IPv4 == "" && in.Spec.IPv6 == "" {
		return nil, o.Errorf("spec", "neither ipv4 nor ipv6 is set")
	}
	if hb < 0 {
		return nil, o.Errorf("spec.perNodeHostBits", "%d is negative", hb)
	}
	var err error
	if in.Spec.IPv4 != "" {
		if spec.IPv4, err = block(o, "spec.ipv4", in.Spec.IPv4, true, 32-hb); err != nil {
			return nil, err
		}
	}
	if in.Spec.IPv6 != "" {
		if spec.IPv6, err = block(o, "spec.ipv6", in.Spec.IPv6, false, 128-hb); err != nil {
			return nil, err
		}
	}
	if in.Spec.NodeSelector == nil || len(in.Spec.NodeSelector.NodeSelectorTerms) == 0 {
		return []*allotv1.ClusterCIDRConfig{{TypeMeta: typeMeta(), ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}, Spec: spec}}, nil
	}
	terms := in.Spec.NodeSelector.NodeSelectorTerms
	var out []*allotv1.ClusterCIDRConfig
	for i, t := range terms {
		sel, ok := termSelector(o, fmt.Sprintf("spec.nodeSelector.nodeSelectorTerms[%d]", i), t)
		if !ok {
			continue
		}
		name := u.GetName()
		if len(terms) > 1 {
			name = fmt.Sprintf(termNameFormat, name, i)
		}
		if len(name) > maxConfigName {
			return nil, o.Errorf("metadata.name", "too long to name the config of each term")
		}
		c := &allotv1.ClusterCIDRConfig{TypeMeta: typeMeta(), ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		c.Spec.NodeSelector = sel
		out = append(out, c)
	}
	return out, nil
}

// termSelector converts one NodeSelectorTerm. A term allot cannot express exactly is left
// out whole, with a warning: dropping only the requirement would select more nodes.
func termSelector(o mapping.Object, field string, t corev1.NodeSelectorTerm) (*metav1.LabelSelector, bool) {
	if len(t.MatchFields) > 0 {
		o.Warn(field+".matchFields", "allot's node selectors match labels only; this term is not imported (select the nodes by a label instead)")
		return nil, false
	}
	sel := &metav1.LabelSelector{}
	for j, r := range t.MatchExpressions {
		switch r.Operator {
		case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
				Key: r.Key, Operator: metav1.LabelSelectorOperator(r.Operator), Values: r.Values})
		default:
			o.Warn(fmt.Sprintf("%s.matchExpressions[%d].operator", field, j), "%q has no label-selector equivalent; this term is not imported", r.Operator)
			return nil, false
		}
	}
	if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
		o.Warn(field+".matchExpressions", "%v; this term is not imported", err)
		return nil, false
	}
	return sel, true
}

// gdcConfig is Google Distributed Cloud's ClusterCIDRConfig, which allot's copies.
type gdcConfig struct {
	Spec struct {
		NodeSelector *metav1.LabelSelector `json:"nodeSelector"`
		IPv4         *gdcFamily            `json:"ipv4"`
		IPv6         *gdcFamily            `json:"ipv6"`
	} `json:"spec"`
}

type gdcFamily struct {
	CIDR            string `json:"cidr"`
	PerNodeMaskSize int    `json:"perNodeMaskSize"`
}

var gdcFields = mapping.Fields{"nodeSelector": nil, "ipv4": {"cidr": nil, "perNodeMaskSize": nil},
	"ipv6": {"cidr": nil, "perNodeMaskSize": nil}}

// importGDC maps one GDC ClusterCIDRConfig (namespaced, in the cluster's namespace) to the
// cluster-scoped config of the same name.
func importGDC(res *mapping.Result, u *unstructured.Unstructured) ([]*allotv1.ClusterCIDRConfig, error) {
	o := res.On(u)
	var in gdcConfig
	if err := o.Decode(u, &in); err != nil {
		return nil, err
	}
	o.Unmapped(u, "spec", gdcFields)
	if in.Spec.IPv4 == nil && in.Spec.IPv6 == nil {
		return nil, o.Errorf("spec", "neither ipv4 nor ipv6 is set")
	}
	c := &allotv1.ClusterCIDRConfig{TypeMeta: typeMeta(), ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}
	var err error
	if f := in.Spec.IPv4; f != nil {
		if c.Spec.IPv4, err = block(o, "spec.ipv4.cidr", f.CIDR, true, f.PerNodeMaskSize); err != nil {
			return nil, err
		}
	}
	if f := in.Spec.IPv6; f != nil {
		if c.Spec.IPv6, err = block(o, "spec.ipv6.cidr", f.CIDR, false, f.PerNodeMaskSize); err != nil {
			return nil, err
		}
	}
	if c.Spec.IPv4 != nil && c.Spec.IPv6 != nil && 32-c.Spec.IPv4.PerNodeMaskSize != 128-c.Spec.IPv6.PerNodeMaskSize {
		return nil, o.Errorf("spec.ipv6.perNodeMaskSize", "dual stack needs as many addresses per node in both families: 32 - %d != 128 - %d",
			c.Spec.IPv4.PerNodeMaskSize, c.Spec.IPv6.PerNodeMaskSize)
	}
	if in.Spec.NodeSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(in.Spec.NodeSelector); err != nil {
			return nil, o.Errorf("spec.nodeSelector", "%v", err)
		}
		c.Spec.NodeSelector = in.Spec.NodeSelector
	}
	return []*allotv1.ClusterCIDRConfig{c}, nil
}
