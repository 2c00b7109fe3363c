package operator

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

func TestBuildPoolTableOverlap(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(1000, 0))
	t1 := metav1.NewTime(time.Unix(2000, 0))
	pools := []allotv1.IPPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "young", CreationTimestamp: t1},
			Spec: allotv1.IPPoolSpec{IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.0.0.0/16", "10.2.0.0/16"}, MaskSize: 24}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "old", CreationTimestamp: t0},
			Spec:   allotv1.IPPoolSpec{IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.0.0.0/8"}, MaskSize: 24}},
			Status: allotv1.IPPoolStatus{InUseCIDRs: []string{"192.168.0.0/16"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "late", CreationTimestamp: t1},
			Spec: allotv1.IPPoolSpec{IPv4: &allotv1.PoolFamily{CIDRs: []string{"192.168.1.0/24", "172.16.0.0/16"}, MaskSize: 26},
				IPv6: &allotv1.PoolFamily{CIDRs: []string{"fd00::/104", "10.9.0.0/16"}, MaskSize: 120}}},
	}
	tab := buildPoolTable(pools)
	if got := tab["old"].fam[0].usable; !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}) {
		t.Errorf("old usable %v", got)
	}
	if got := tab["young"].fam[0]; len(got.usable) != 0 || len(got.overlaps) != 2 || !strings.Contains(got.overlaps[0], `pool "old"`) {
		t.Errorf("young %+v", got)
	}
	late := tab["late"]
	if got := late.fam[0].usable; !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("172.16.0.0/16")}) {
		t.Errorf("late usable %v (192.168.1.0/24 is inside old's in-use CIDR)", got)
	}
	if got := late.fam[1]; len(got.usable) != 1 || !slices.Equal(got.invalid, []string{"10.9.0.0/16"}) {
		t.Errorf("late ipv6 %+v", got)
	}
}

func TestOptionsDefaults(t *testing.T) {
	var o Options
	if err := o.defaults(); err == nil || !strings.Contains(err.Error(), "RESTConfig") {
		t.Errorf("no RESTConfig: %v", err)
	}
}
