package frame

import (
	"bytes"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
)

// FuzzAppendAllocation: the hand-written encoder of an Allocation answer writes the same
// bytes as the generated code, so clients of either kind read it alike.
func FuzzAppendAllocation(f *testing.F) {
	f.Add("c1", "eth0", "podnet", "default", "pod", "uid", "10.1.0.7/16", "10.1.0.1", "v4", "0.0.0.0/0", "", uint8(1), int64(1767323045000000006))
	f.Add("", "", "", "", "", "", "", "", "", "", "", uint8(0), int64(0))
	f.Add("c\xff", "e", "", "ns", "", "", "", "", "", "", "10.0.0.1", uint8(7), int64(-1))
	f.Add("c", "i", "n", "", "", "u", "fd00::5/64", "", "v6", "::/0", "fd00::1", uint8(2), int64(1))
	f.Fuzz(func(t *testing.T, cid, ifname, network, ns, name, uid, addr, gw, pool, dst, rgw string, n uint8, nanos int64) {
		a := &api.Allocation{Owner: api.Owner{ContainerID: cid, IfName: ifname}, Network: network,
			Pod: api.PodRef{Namespace: ns, Name: name, UID: uid}}
		for i := range int(n % 4) {
			a.IPs = append(a.IPs, api.IPConfig{Address: addr, Gateway: gw, Pool: pool})
			if i%2 == 0 {
				a.Routes = append(a.Routes, api.Route{Dst: dst, GW: rgw})
			}
		}
		if n&4 != 0 {
			a.IPs = append(a.IPs, api.IPConfig{})
			a.Routes = append(a.Routes, api.Route{})
		}
		if nanos != 0 {
			a.Created = time.Unix(0, nanos)
		}
		want := appendVT([]byte("prefix"), allocationPB(a))
		if got := appendAllocationWire([]byte("prefix"), a); !bytes.Equal(got, want) {
			t.Fatalf("appendAllocationWire:\n%x\ngenerated:\n%x", got, want)
		}
	})
}

func BenchmarkAppendAllocation(b *testing.B) {
	a := &api.Allocation{Owner: api.Owner{ContainerID: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", IfName: "eth0"},
		Network: "podnet", Pod: api.PodRef{Namespace: "default", Name: "web-0", UID: "7c1e6a2e-0d8c-4c55-9d7a-1f0e9b8a7c6d"},
		IPs:    []api.IPConfig{{Address: "10.1.0.7/16", Gateway: "10.1.0.1", Pool: "v4"}},
		Routes: []api.Route{{Dst: "0.0.0.0/0"}}, Created: time.Unix(1767323045, 6)}
	buf := make([]byte, 0, 512)
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = appendAllocationWire(buf[:0], a)
		}
	})
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = appendVT(buf[:0], allocationPB(a))
		}
	})
}
