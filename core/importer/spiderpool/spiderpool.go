// Package spiderpool maps Spiderpool's objects (spiderpool.spidernet.io/v2beta1, shapes from
// Spiderpool's pkg/k8s/apis/spiderpool.spidernet.io/v2beta1) to allot's shared-pool objects:
// SpiderIPPool to SharedIPPool, SpiderSubnet to AllotSubnet, SpiderReservedIP to ReservedIP,
// and every address a pool's status records as allocated to an AddressClaim for the same pod,
// completed from the pod's SpiderEndpoint (node, interface, StatefulSet or KubeVirt owner),
// so that no running pod's address is handed to another pod after the migration.
package spiderpool

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/allot-ipam/allot/core/importer/mapping"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Group, version and the kinds this package reads.
const (
	Group          = "spiderpool.spidernet.io"
	Version        = "v2beta1"
	KindIPPool     = "SpiderIPPool"
	KindSubnet     = "SpiderSubnet"
	KindReservedIP = "SpiderReservedIP"
	KindEndpoint   = "SpiderEndpoint"

	// labelOwnerSubnet marks a pool Spiderpool cut from a SpiderSubnet for a workload (its
	// constant LabelIPPoolOwnerSpiderSubnet); labelApp* name that workload (labelAppOld is
	// the single label older Spiderpool releases wrote).
	labelOwnerSubnet = "ipam.spidernet.io/owner-spider-subnet"
	labelAppKind     = "ipam.spidernet.io/owner-application-kind"
	labelAppNS       = "ipam.spidernet.io/owner-application-namespace"
	labelAppName     = "ipam.spidernet.io/owner-application-name"
	labelAppUID      = "ipam.spidernet.io/owner-application-uid"
	labelAppOld      = "ipam.spidernet.io/owner-application"
	labelInterface   = "ipam.spidernet.io/interface"
	labelReclaim     = "ipam.spidernet.io/ippool-reclaim"
)

type route struct {
	Dst string `json:"dst"`
	Gw  string `json:"gw"`
}

// addressSpec is what SpiderIPPool and SpiderSubnet have in common.
type addressSpec struct {
	IPVersion  *int64   `json:"ipVersion"`
	Subnet     string   `json:"subnet"`
	IPs        []string `json:"ips"`
	ExcludeIPs []string `json:"excludeIPs"`
	Gateway    *string  `json:"gateway"`
	Routes     []route  `json:"routes"`
}

var addressFields = mapping.Fields{"ipVersion": nil, "subnet": nil, "ips": nil, "excludeIPs": nil, "gateway": nil,
	"routes": {"dst": nil, "gw": nil}}

// Import maps Spiderpool objects (other kinds are the caller's error).
func Import(objs []*unstructured.Unstructured) (mapping.Result, error) {
	var res mapping.Result
	byKind := map[string][]*unstructured.Unstructured{}
	for _, u := range objs {
		switch u.GetKind() {
		case KindIPPool, KindSubnet, KindReservedIP, KindEndpoint:
			byKind[u.GetKind()] = append(byKind[u.GetKind()], u)
		default:
			return res, res.On(u).Errorf("", "not a kind the spiderpool importer reads")
		}
	}
	eps, err := endpoints(&res, byKind[KindEndpoint])
	if err != nil {
		return res, err
	}
	subnets := map[string]*allotv1.AllotSubnet{}
	for _, u := range byKind[KindSubnet] {
		if err := importSubnet(&res, u, subnets); err != nil {
			return res, err
		}
	}
	for _, u := range byKind[KindReservedIP] {
		if err := importReserved(&res, u); err != nil {
			return res, err
		}
	}
	claimed := map[netip.Addr]string{}
	for _, u := range byKind[KindIPPool] {
		if err := importPool(&res, u, eps, claimed, subnets); err != nil {
			return res, err
		}
	}
	return res, nil
}

// family checks spec.subnet and spec.ipVersion and says whether the object is IPv4.
func family(o mapping.Object, in *addressSpec) (netip.Prefix, error) {
	sub, err := o.Prefix("spec.subnet", in.Subnet)
	if err != nil {
		return sub, err
	}
	if in.IPVersion != nil && *in.IPVersion != 4 && *in.IPVersion != 6 {
		return sub, o.Errorf("spec.ipVersion", "%d is neither 4 nor 6", *in.IPVersion)
	}
	if in.IPVersion != nil && (*in.IPVersion == 4) != sub.Addr().Is4() {
		return sub, o.Errorf("spec.subnet", "%s is not an IPv%d subnet (spec.ipVersion)", sub, *in.IPVersion)
	}
	return sub, nil
}

// ranges checks "a" / "a-b" entries of field: inside sub, a <= b. allot's shared pools take
// the same syntax, so entries are kept as written, canonicalised.
func ranges(o mapping.Object, field string, sub netip.Prefix, in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for i, s := range in {
		f := fmt.Sprintf("%s[%d]", field, i)
		lo, hi, ok := strings.Cut(s, "-")
		a, err := o.Addr(f, lo)
		if err != nil {
			return nil, err
		}
		b := a
		if ok {
			if b, err = o.Addr(f, hi); err != nil {
				return nil, err
			}
		}
		if !sub.Contains(a) || !sub.Contains(b) {
			return nil, o.Errorf(f, "%s is not inside spec.subnet %s", s, sub)
		}
		if b.Less(a) {
			return nil, o.Errorf(f, "%s ends before it starts", s)
		}
		out = append(out, rangeString(a, b))
	}
	return out, nil
}

// sharedFamily maps the address fields to one family of a SharedIPPool or AllotSubnet.
func sharedFamily(o mapping.Object, in *addressSpec) (sub netip.Prefix, ips, excl []string, gw string, routes []allotv1.RouteSpec, err error) {
	if sub, err = family(o, in); err != nil {
		return
	}
	if ips, err = ranges(o, "spec.ips", sub, in.IPs); err != nil {
		return
	}
	if excl, err = ranges(o, "spec.excludeIPs", sub, in.ExcludeIPs); err != nil {
		return
	}
	if in.Gateway != nil && *in.Gateway != "" {
		a, gerr := o.Addr("spec.gateway", *in.Gateway)
		if gerr != nil {
			return sub, nil, nil, "", nil, gerr
		}
		if !sub.Contains(a) {
			return sub, nil, nil, "", nil, o.Errorf("spec.gateway", "%s is not inside spec.subnet %s", a, sub)
		}
		gw = a.String()
	}
	for i, r := range in.Routes {
		f := fmt.Sprintf("spec.routes[%d]", i)
		if _, err = netip.ParsePrefix(r.Dst); err != nil {
			return sub, nil, nil, "", nil, o.Errorf(f+".dst", "%q is not a CIDR", r.Dst)
		}
		rt := allotv1.RouteSpec{Dst: r.Dst}
		if r.Gw != "" {
			a, gerr := o.Addr(f+".gw", r.Gw)
			if gerr != nil {
				return sub, nil, nil, "", nil, gerr
			}
			rt.Gw = a.String()
		}
		routes = append(routes, rt)
	}
	return sub, ips, excl, gw, routes, nil
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: allotv1.SchemeGroupVersion.String(), Kind: kind}
}
