package store

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"
)

// wireOf is the wire form json.Marshal used to encode before appendRecordJSON.
func wireOf(r Record) wireRecord {
	w := wireRecord{
		V:       recordVersion,
		Owner:   wireOwner{ContainerID: r.Owner.ContainerID, IfName: r.Owner.IfName},
		Network: r.Network,
		Pod:     wirePod{Namespace: r.Pod.Namespace, Name: r.Pod.Name, UID: r.Pod.UID},
		Created: r.Created.UTC().Round(0),
	}
	for _, a := range r.Addresses {
		wa := wireAddress{Pool: a.Pool, Prefix: a.Prefix.String()}
		if a.Gateway.IsValid() {
			wa.Gateway = a.Gateway.String()
		}
		w.Addresses = append(w.Addresses, wa)
	}
	return w
}

// FuzzEncodeRecord: the hand-written encoder writes every valid record byte for byte as
// json.Marshal of its wire form did, so the file format does not change with it.
func FuzzEncodeRecord(f *testing.F) {
	f.Add("c1", "eth0", "podnet", "default", "pod", "uid", "default", []byte{10, 1, 0, 7}, uint8(16), []byte{10, 1, 0, 1}, "", int64(1767323045000000006))
	f.Add("c<&>\"\\", "e\u2028\u2029", "n\x00\x01\x1f\b\f\n\r\t", "", "", "", "p\xff\xfe", []byte{0xfd, 15: 1}, uint8(64), []byte{0xfd, 15: 2}, "eth0", int64(0))
	f.Add("é✓", "i", "", "ns", "", "u", "p\x7f", []byte{0, 0, 0, 0}, uint8(0), []byte(nil), "", int64(-62135596800000000000/1000))
	f.Add("c", "i", "", "", "", "", "pool", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4}, uint8(128), []byte{0xfe, 0x80, 15: 1}, "a%b<", int64(253402300799999999999/1000))
	f.Fuzz(func(t *testing.T, cid, ifname, network, ns, name, uid, pool string, ip []byte, bits uint8, gw []byte, zone string, nanos int64) {
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			return
		}
		r := Record{
			Owner:   Owner{ContainerID: cid, IfName: ifname},
			Network: network,
			Pod:     Pod{Namespace: ns, Name: name, UID: uid},
			Created: time.Unix(0, nanos).In(time.FixedZone("x", 3600)),
		}
		a := Address{Pool: pool, Prefix: netip.PrefixFrom(addr, int(bits))}
		if g, ok := netip.AddrFromSlice(gw); ok {
			if g.Is6() {
				g = g.WithZone(zone)
			}
			a.Gateway = g
		}
		if bits%3 != 0 {
			r.Addresses = []Address{a, a}
		}
		if validateRecord(r) != nil {
			return
		}
		want, err := json.Marshal(wireOf(r))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendRecordJSON(nil, &r); string(got) != string(want) {
			t.Fatalf("appendRecordJSON:\n%s\njson.Marshal:\n%s", got, want)
		}
	})
}

func BenchmarkEncodeRecord(b *testing.B) {
	r := testRecord("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "eth0", 7)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := encodeRecord(r); err != nil {
			b.Fatal(err)
		}
	}
}
