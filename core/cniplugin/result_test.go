package cniplugin

import (
	"bytes"
	"net"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/allot-ipam/allot/core/api"
)

// TestResultEncoding: the hand-written 1.x result is byte for byte the library's PrintTo,
// and whatever it does not cover goes through the library.
func TestResultEncoding(t *testing.T) {
	allocs := []api.Allocation{
		{IPs: []api.IPConfig{{Address: "10.0.0.5/24"}}},
		{IPs: []api.IPConfig{{Address: "10.128.3.137/16", Gateway: "10.128.0.1"}, {Address: "fd00:128::389/64", Gateway: "fd00:128::1"}},
			Routes: []api.Route{{Dst: "0.0.0.0/0"}, {Dst: "::/0"}, {Dst: "192.168.7.9/16", GW: "10.128.0.1"}}},
		{IPs: []api.IPConfig{{Address: "::ffff:10.1.2.3/120", Gateway: "::ffff:10.1.2.1"}}, Routes: []api.Route{{Dst: "2001:db8::/32", GW: "fe80::1"}}},
	}
	for _, a := range allocs {
		res, err := resultFrom(&a)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
			got, err := encodeResult(res, v)
			if err != nil {
				t.Fatalf("%s: %v", v, err)
			}
			if want := libraryResult(t, res, v); !bytes.Equal(got, want) {
				t.Errorf("%s, %+v:\n got %s\nwant %s", v, a, got, want)
			}
		}
	}
	// Outside what appendResult writes: left to the library.
	res, _ := resultFrom(&allocs[1])
	mtu := *res
	mtu.Routes = []*types.Route{{Dst: net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, MTU: 1400}}
	dns := *res
	dns.DNS = types.DNS{Nameservers: []string{"10.0.0.10"}}
	idx := 0
	iface := *res
	iface.IPs = []*current.IPConfig{{Interface: &idx, Address: res.IPs[0].Address}}
	for name, r := range map[string]*current.Result{"mtu": &mtu, "dns": &dns, "interface": &iface} {
		if _, ok := appendResult(nil, r, "1.1.0"); ok {
			t.Errorf("%s: written by hand", name)
		}
		if got, _ := encodeResult(r, "1.1.0"); !bytes.Equal(got, libraryResult(t, r, "1.1.0")) {
			t.Errorf("%s: %s", name, got)
		}
	}
	if _, err := encodeResult(res, "9.9.9"); err == nil {
		t.Error("an unknown version was encoded")
	}
}

func libraryResult(t *testing.T, res *current.Result, v string) []byte {
	t.Helper()
	out, err := res.GetAsVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := out.PrintTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
