package frame

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/apiv1"
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

// FuzzDecodeAllocationWire: the hand-written decoder of an Allocation answer either
// declines (and the generated code decodes) or gives exactly what the generated code gives.
func FuzzDecodeAllocationWire(f *testing.F) {
	full := &api.Allocation{Owner: api.Owner{ContainerID: "c1", IfName: "eth0"}, Network: "podnet",
		Pod:    api.PodRef{Namespace: "default", Name: "web-0", UID: "uid"},
		IPs:    []api.IPConfig{{Address: "10.1.0.7/16", Gateway: "10.1.0.1", Pool: "v4"}, {Address: "fd00::7/64", Pool: "v6"}},
		Routes: []api.Route{{Dst: "0.0.0.0/0"}, {Dst: "::/0", GW: "fd00::1"}}, Created: time.Unix(1767323045, 6)}
	f.Add(appendAllocationWire(nil, full))
	f.Add(appendAllocationWire(nil, &api.Allocation{}))
	f.Add(appendAllocationWire(nil, &api.Allocation{Owner: api.Owner{ContainerID: "c\xff"}}))
	f.Add(append(appendAllocationWire(nil, full), appendAllocationWire(nil, full)...)) // merged twice
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x80})
	f.Add([]byte{0x38, 0x01}) // unknown field 7
	f.Fuzz(func(t *testing.T, b []byte) {
		var got api.Allocation
		if !decodeAllocationWire(b, &got) {
			return
		}
		var m apiv1.Allocation
		var tx text
		var want api.Allocation
		if err := unmarshal("allocation", b, &m); err != nil {
			t.Fatalf("hand decoder accepted %x, generated: %v", b, err)
		}
		tx.allocation(&m, &want)
		if err := checked("allocation", b, &m, &tx); err != nil {
			t.Fatalf("hand decoder accepted %x, generated: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%x:\nhand      %+v\ngenerated %+v", b, got, want)
		}
	})
}

// TestDecodeAllocationWireTakesAllotdAnswers: what allotd writes takes the fast path.
func TestDecodeAllocationWireTakesAllotdAnswers(t *testing.T) {
	a := &api.Allocation{Owner: api.Owner{ContainerID: "c1", IfName: "eth0"}, Network: "n",
		IPs: []api.IPConfig{{Address: "10.0.0.1/8", Pool: "p"}}, Routes: []api.Route{{Dst: "0.0.0.0/0"}}, Created: time.Unix(5, 0)}
	var got api.Allocation
	if !decodeAllocationWire(appendAllocationWire(nil, a), &got) || !reflect.DeepEqual(&got, a) {
		t.Fatalf("got %+v, want %+v", got, *a)
	}
}

func BenchmarkDecodeAllocation(b *testing.B) {
	a := &api.Allocation{Owner: api.Owner{ContainerID: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", IfName: "eth0"},
		Network: "podnet", Pod: api.PodRef{Namespace: "default", Name: "web-0", UID: "7c1e6a2e-0d8c-4c55-9d7a-1f0e9b8a7c6d"},
		IPs:    []api.IPConfig{{Address: "10.1.0.7/16", Gateway: "10.1.0.1", Pool: "v4"}},
		Routes: []api.Route{{Dst: "0.0.0.0/0"}}, Created: time.Unix(1767323045, 6)}
	wire := appendAllocationWire(nil, a)
	var got api.Allocation
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !decodeAllocationWire(wire, &got) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m apiv1.Allocation
			var tx text
			if err := unmarshal("allocation", wire, &m); err != nil {
				b.Fatal(err)
			}
			tx.allocation(&m, &got)
		}
	})
}

// FuzzAllocateRequestWire: the hand-written encoder of an ADD writes the generated code's
// bytes, and the hand-written decoder either declines (the generated code then decodes)
// or gives what the generated code gives.
func FuzzAllocateRequestWire(f *testing.F) {
	f.Add("c1", "eth0", "n", "ns", "pod", "uid", "p1", "10.0.0.5", "", uint8(3), []byte(nil))
	f.Add("", "", "", "", "", "", "", "", "", uint8(0), []byte{0x0a, 0x00, 0x0a, 0x00})
	f.Add("c\xff", "e", "n", "", "", "", "", "", "x", uint8(15), []byte{0x42, 0x01, 0x80})
	f.Fuzz(func(t *testing.T, cid, ifname, network, ns, name, uid, pool, ip, dflt string, n uint8, raw []byte) {
		r := &api.AllocateRequest{Owner: api.Owner{ContainerID: cid, IfName: ifname}, Network: network,
			Pod: api.PodRef{Namespace: ns, Name: name, UID: uid}}
		if n&1 != 0 {
			r.Pools = []string{pool, ""}
		}
		if n&2 != 0 {
			r.IPs = []string{ip}
		}
		if n&4 != 0 {
			r.DefaultIPv4Pools = []string{dflt}
		}
		if n&8 != 0 {
			r.DefaultIPv6Pools = []string{dflt, pool}
		}
		want := appendVT([]byte("prefix"), &apiv1.AllocateRequest{Owner: ownerPB(r.Owner), Network: r.Network, Pod: podPB(r.Pod),
			Pools: r.Pools, Ips: r.IPs, DefaultIpv4Pools: r.DefaultIPv4Pools, DefaultIpv6Pools: r.DefaultIPv6Pools})
		if got := appendAllocateRequestWire([]byte("prefix"), r); !bytes.Equal(got, want) {
			t.Fatalf("appendAllocateRequestWire:\n%x\ngenerated:\n%x", got, want)
		}
		for _, b := range [][]byte{want[len("prefix"):], raw, append(want[len("prefix"):], raw...)} {
			var got api.AllocateRequest
			if !decodeAllocateRequestWire(b, &got) {
				continue
			}
			var m apiv1.AllocateRequest
			if err := unmarshal("allocate", b, &m); err != nil {
				t.Fatalf("hand decoder accepted %x, generated: %v", b, err)
			}
			var tx text
			ref := api.AllocateRequest{Owner: tx.owner(m.Owner), Network: tx.s(m.Network), Pod: tx.pod(m.Pod),
				Pools: tx.list(m.Pools), IPs: tx.list(m.Ips), DefaultIPv4Pools: tx.list(m.DefaultIpv4Pools), DefaultIPv6Pools: tx.list(m.DefaultIpv6Pools)}
			if err := checked("allocate", b, &m, &tx); err != nil {
				t.Fatalf("hand decoder accepted %x, generated: %v", b, err)
			}
			if !reflect.DeepEqual(got, ref) {
				t.Fatalf("%x:\nhand      %+v\ngenerated %+v", b, got, ref)
			}
		}
	})
}

// TestAllocateRequestWireRoundTrip: what the Go client writes takes the fast path back.
func TestAllocateRequestWireRoundTrip(t *testing.T) {
	r := &api.AllocateRequest{Owner: api.Owner{ContainerID: "c1", IfName: "eth0"}, Network: "n",
		Pod: api.PodRef{Namespace: "ns", Name: "p"}, Pools: []string{"a", "b"}, IPs: []string{"10.0.0.1"}}
	var got api.AllocateRequest
	if !decodeAllocateRequestWire(appendAllocateRequestWire(nil, r), &got) || !reflect.DeepEqual(&got, r) {
		t.Fatalf("got %+v, want %+v", got, *r)
	}
}

func BenchmarkAllocateRequest(b *testing.B) {
	r := &api.AllocateRequest{Owner: api.Owner{ContainerID: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", IfName: "eth0"},
		Network: "podnet", Pod: api.PodRef{Namespace: "default", Name: "web-0", UID: "7c1e6a2e-0d8c-4c55-9d7a-1f0e9b8a7c6d"}}
	buf := make([]byte, 0, 512)
	wire := appendAllocateRequestWire(nil, r)
	var got api.AllocateRequest
	b.Run("encode/hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = appendAllocateRequestWire(buf[:0], r)
		}
	})
	b.Run("encode/generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = appendVT(buf[:0], &apiv1.AllocateRequest{Owner: ownerPB(r.Owner), Network: r.Network, Pod: podPB(r.Pod)})
		}
	})
	b.Run("decode/hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !decodeAllocateRequestWire(wire, &got) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("decode/generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m apiv1.AllocateRequest
			if err := unmarshal("allocate", wire, &m); err != nil {
				b.Fatal(err)
			}
			var tx text
			got = api.AllocateRequest{Owner: tx.owner(m.Owner), Network: tx.s(m.Network), Pod: tx.pod(m.Pod)}
		}
	})
}
