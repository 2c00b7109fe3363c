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

type spiderSubnet struct {
	Spec addressSpec `json:"spec"`
}

// importSubnet maps a SpiderSubnet to an AllotSubnet. Its status.controlledIPPools is not
// read: the pools cut from it are SpiderIPPools carrying its name, and their import fills the
// AllotSubnet's status.allocations (autoPool).
func importSubnet(res *mapping.Result, u *unstructured.Unstructured, subnets map[string]*allotv1.AllotSubnet) error {
	o := res.On(u)
	if len(u.GetName()) > 63 {
		return o.Errorf("metadata.name", "longer than 63 characters: an AllotSubnet's name is a label value")
	}
	var in spiderSubnet
	if err := o.Decode(u, &in); err != nil {
		return err
	}
	o.Unmapped(u, "spec", addressFields)
	sub, ips, excl, gw, routes, err := sharedFamily(o, &in.Spec)
	if err != nil {
		return err
	}
	if len(ips) == 0 {
		o.Warn("spec.ips", "empty: an AllotSubnet needs at least one address; subnet not imported")
		return nil
	}
	fam := &allotv1.SubnetFamily{Subnet: sub.String(), IPs: ips, ExcludeIPs: excl, Gateway: gw, Routes: routes}
	out := &allotv1.AllotSubnet{TypeMeta: typeMeta("AllotSubnet"), ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}
	if sub.Addr().Is4() {
		out.Spec.IPv4 = fam
	} else {
		out.Spec.IPv6 = fam
	}
	subnets[out.Name] = out
	res.Objects = append(res.Objects, out)
	return nil
}

type spiderReservedIP struct {
	Spec struct {
		IPVersion *int64   `json:"ipVersion"`
		IPs       []string `json:"ips"`
	} `json:"spec"`
}

func importReserved(res *mapping.Result, u *unstructured.Unstructured) error {
	o := res.On(u)
	var in spiderReservedIP
	if err := o.Decode(u, &in); err != nil {
		return err
	}
	o.Unmapped(u, "spec", mapping.Fields{"ipVersion": nil, "ips": nil})
	v := in.Spec.IPVersion
	if v != nil && *v != 4 && *v != 6 {
		return o.Errorf("spec.ipVersion", "%d is neither 4 nor 6", *v)
	}
	if len(in.Spec.IPs) == 0 {
		o.Warn("spec.ips", "empty: reserves nothing; not imported")
		return nil
	}
	out := &allotv1.ReservedIP{TypeMeta: typeMeta("ReservedIP"), ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}
	for i, s := range in.Spec.IPs {
		f := fmt.Sprintf("spec.ips[%d]", i)
		lo, hi, isRange := strings.Cut(s, "-")
		a, err := o.Addr(f, lo)
		if err != nil {
			return err
		}
		b := a
		if isRange {
			if b, err = o.Addr(f, hi); err != nil {
				return err
			}
		}
		if a.Is4() != b.Is4() || (v != nil && a.Is4() != (*v == 4)) {
			return o.Errorf(f, "%s mixes families or is not IPv%d (spec.ipVersion)", s, ipVersion(v, a))
		}
		if b.Less(a) {
			return o.Errorf(f, "%s ends before it starts", s)
		}
		out.Spec.IPs = append(out.Spec.IPs, rangeString(a, b))
	}
	res.Objects = append(res.Objects, out)
	return nil
}

func ipVersion(v *int64, a netip.Addr) int64 {
	if v != nil {
		return *v
	}
	if a.Is4() {
		return 4
	}
	return 6
}

func rangeString(a, b netip.Addr) string {
	if a == b {
		return a.String()
	}
	return a.String() + "-" + b.String()
}
