package k8s

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestClaimName(t *testing.T) {
	for _, s := range []string{"10.0.0.1", "0.0.0.0", "255.255.255.255", "::", "fd00::", "::1", "2001:db8::ff00:42:8329"} {
		a := netip.MustParseAddr(s)
		n := ClaimName(a)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("%s -> %q is not a valid object name: %v", s, n, errs)
		}
		back, err := ParseClaimName(n)
		if err != nil || back != a {
			t.Errorf("%s -> %q -> %v (%v)", s, n, back, err)
		}
	}
	if ClaimName(netip.MustParseAddr("::ffff:10.0.0.1")) != "v4-10.0.0.1" {
		t.Error("mapped address should name its IPv4 claim")
	}
	for _, bad := range []string{"10.0.0.1", "v4-fd00::1", "v6-zz", "v6-FD000000000000000000000000000001", "v6-00000000000000000000ffff0a000001"} {
		if _, err := ParseClaimName(bad); err == nil {
			t.Errorf("ParseClaimName(%q) accepted", bad)
		}
	}
}

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", 200)
	v := LabelValue(long)
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 || v == LabelValue(long+"b") {
		t.Fatalf("LabelValue = %q: %v", v, errs)
	}
	if LabelValue("web-0") != "web-0" {
		t.Fatal("short values unchanged")
	}
}
