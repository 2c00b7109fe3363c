package frame

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
)

func TestRoundTrip(t *testing.T) {
	long := strings.Repeat("x", 300) // nested bodies over 127 bytes need a longer length
	alloc := &api.Allocation{
		Owner:   api.Owner{ContainerID: long, IfName: "eth0"},
		Network: "net1",
		Pod:     api.PodRef{Namespace: "ns", Name: "p", UID: "u"},
		IPs:     []api.IPConfig{{Address: "10.0.0.5/24", Gateway: "10.0.0.1", Pool: "v4"}, {Address: "fd00::5/64", Pool: "v6"}},
		Routes:  []api.Route{{Dst: "0.0.0.0/0"}, {Dst: "::/0", GW: "fd00::1"}},
		Created: time.Unix(1700000000, 123456789),
	}
	tests := []struct {
		name   string
		in     any
		encode func([]byte) []byte
		decode func([]byte) (any, error)
	}{
		{"allocate", &api.AllocateRequest{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}, Network: "n", Pod: api.PodRef{Name: "p"},
			Pools: []string{"a", ""}, IPs: []string{"10.0.0.1"}, DefaultIPv4Pools: []string{"d4"}, DefaultIPv6Pools: []string{"d6"}},
			nil, func(b []byte) (any, error) { var r api.AllocateRequest; return &r, DecodeAllocateRequest(b, &r) }},
		{"allocate minimal", &api.AllocateRequest{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}},
			nil, func(b []byte) (any, error) { var r api.AllocateRequest; return &r, DecodeAllocateRequest(b, &r) }},
		{"release", &api.ReleaseRequest{Owner: api.Owner{ContainerID: long, IfName: "eth0"}, Network: "n", Pod: api.PodRef{UID: "u"}},
			nil, func(b []byte) (any, error) { var r api.ReleaseRequest; return &r, DecodeReleaseRequest(b, &r) }},
		{"check", &api.CheckRequest{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}},
			nil, func(b []byte) (any, error) { var r api.CheckRequest; return &r, DecodeCheckRequest(b, &r) }},
		{"gc", &api.GCRequest{Network: "n", Valid: []api.Owner{{ContainerID: "a", IfName: "eth0"}, {ContainerID: long, IfName: "net1"}}},
			nil, func(b []byte) (any, error) { var r api.GCRequest; return &r, DecodeGCRequest(b, &r) }},
		{"gc nothing valid", &api.GCRequest{Network: "n", Valid: []api.Owner{}},
			nil, func(b []byte) (any, error) { var r api.GCRequest; return &r, DecodeGCRequest(b, &r) }},
		{"gc response", &api.GCResponse{Released: []api.Owner{{ContainerID: "a", IfName: "eth0"}}},
			nil, func(b []byte) (any, error) { var r api.GCResponse; return &r, DecodeGCResponse(b, &r) }},
		{"allocation", alloc,
			nil, func(b []byte) (any, error) { var r api.Allocation; return &r, DecodeAllocation(b, &r) }},
		{"error", &api.Error{Code: api.CodeInvalid, Message: "bad", Field: "ips[1]"},
			nil, func(b []byte) (any, error) { return DecodeError(b) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := appendAny(nil, tc.in)
			got, err := tc.decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if a, ok := got.(*api.Allocation); ok {
				if !a.Created.Equal(alloc.Created) {
					t.Fatalf("created %v", a.Created)
				}
				a.Created = alloc.Created
			}
			if !reflect.DeepEqual(got, tc.in) {
				t.Fatalf("got %+v\nwant %+v", got, tc.in)
			}
		})
	}
}

func appendAny(b []byte, v any) []byte {
	switch v := v.(type) {
	case *api.AllocateRequest:
		return AppendAllocateRequest(b, v)
	case *api.ReleaseRequest:
		return AppendReleaseRequest(b, v)
	case *api.CheckRequest:
		return AppendCheckRequest(b, v)
	case *api.GCRequest:
		return AppendGCRequest(b, v)
	case *api.GCResponse:
		return AppendGCResponse(b, v)
	case *api.Allocation:
		return AppendAllocation(b, v)
	case *api.Error:
		return AppendError(b, v)
	case *api.Status:
		return AppendStatus(b, v)
	}
	panic("unknown type")
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	owner := func(inner []byte) []byte { return append([]byte{0x0a, byte(len(inner))}, inner...) }
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"bad utf-8 container ID", owner([]byte{0x0a, 2, 0xff, 0xfe}), "allocate.owner.containerID: not valid UTF-8"},
		{"ifName as varint", owner([]byte{0x10, 1}), "allocate.owner.ifName: wire type 0"},
		{"owner length past end", []byte{0x0a, 9, 0x0a}, "allocate: field 1: length runs past"},
		{"truncated key", []byte{0x80}, "allocate: bad field key"},
		{"field zero", []byte{0x02, 0}, "allocate: field number 0"},
		{"bad wire type", []byte{0x0b}, "allocate: field 1: unsupported wire type 3"},
		{"pool element", []byte{0x22, 1, 'a', 0x22, 1, 0xff}, "allocate.pools[1]: not valid UTF-8"},
		{"owner not a message", []byte{0x08, 1}, "allocate.owner: wire type 0, want a message"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r api.AllocateRequest
			err := DecodeAllocateRequest(tc.in, &r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	var g api.GCRequest
	err := DecodeGCRequest([]byte{0x12, 2, 0x0a, 5}, &g)
	if err == nil || !strings.Contains(err.Error(), "gc.valid[0]: field 1: length runs past") {
		t.Fatalf("gc: got %v", err)
	}
}

func TestUnknownFieldsAreSkipped(t *testing.T) {
	b := AppendCheckRequest(nil, &api.CheckRequest{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}})
	b = append(b, 0x78, 5)                         // field 15, varint
	b = append(b, 0x82, 1, 2, 'h', 'i')            // field 16, bytes
	b = append(b, 0x89, 1, 1, 2, 3, 4, 5, 6, 7, 8) // field 17, fixed64
	var r api.CheckRequest
	if err := DecodeCheckRequest(b, &r); err != nil || r.Owner.ContainerID != "c" {
		t.Fatalf("got %+v, %v", r, err)
	}
}

func TestFrames(t *testing.T) {
	var b []byte
	b = Append(b, 7, OpAllocate, []byte("abc"))
	b = Append(b, 8, OpRelease, nil)
	r := NewReader(bufio.NewReader(bytes.NewReader(b)))
	for _, want := range []struct {
		id      uint32
		op      Op
		payload string
	}{{7, OpAllocate, "abc"}, {8, OpRelease, ""}} {
		id, op, p, err := r.Next()
		if err != nil || id != want.id || op != want.op || string(p) != want.payload {
			t.Fatalf("got %d %s %q %v", id, op, p, err)
		}
	}
	if _, _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"short length", []byte{0, 0, 0, 2, 0, 0, 0, 1, 1}, "length: 2 is shorter than a header"},
		{"too large", []byte{0x7f, 0, 0, 0, 0, 0, 0, 1, 1}, "payload exceeds limit: length"},
		{"truncated payload", []byte{0, 0, 0, 9, 0, 0, 0, 1, 1, 'a'}, "unexpected EOF"},
	} {
		_, _, _, err := NewReader(bufio.NewReader(bytes.NewReader(tc.in))).Next()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: reader got %v", tc.name, err)
		}
		_, _, _, _, err = Parse(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: parse got %v", tc.name, err)
		}
	}
	if _, _, _, _, err := Parse(make([]byte, 100)); err == nil || errors.Is(err, ErrTooLarge) {
		t.Fatalf("zero frame: %v", err)
	}
}

// FuzzDecode feeds arbitrary bytes to the frame parser and every payload decoder: no panic,
// and whatever decodes re-encodes to something that decodes to the same value.
func FuzzDecode(f *testing.F) {
	f.Add(Append(nil, 1, OpAllocate, AppendAllocateRequest(nil, &api.AllocateRequest{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}, Pools: []string{"a"}})))
	f.Add(Append(nil, 2, OpGC, AppendGCRequest(nil, &api.GCRequest{Network: "n", Valid: []api.Owner{{ContainerID: "a", IfName: "b"}}})))
	f.Add(Append(nil, 3, OpCheck, AppendAllocation(nil, &api.Allocation{IPs: []api.IPConfig{{Address: "10.0.0.1/8"}}, Created: time.Unix(1, 0)})))
	f.Add([]byte{0, 0, 0, 5, 0, 0, 0, 0, 0})
	f.Add(Append(nil, 4, OpStatus, AppendStatus(nil, &api.Status{Ready: true, Pools: []api.PoolStatus{{Name: "p", CIDRs: []string{"10.0.0.0/8"}, Utilization: 0.5}}})))
	f.Fuzz(func(t *testing.T, in []byte) {
		_, op, payload, _, err := Parse(in)
		if err != nil {
			payload = in
		}
		check := func(v any, decode func([]byte) (any, error)) {
			got, err := decode(appendAny(nil, v))
			if err != nil {
				t.Fatalf("%s: re-encoded value does not decode: %v", op, err)
			}
			if a, ok := got.(*api.Allocation); ok {
				a.Created = v.(*api.Allocation).Created
			}
			// A NaN (a utilization, say) is never DeepEqual to itself: the same encoding
			// of both sides is then the proof that nothing changed.
			if !reflect.DeepEqual(got, v) && !bytes.Equal(appendAny(nil, got), appendAny(nil, v)) {
				t.Fatalf("%s: round trip changed %+v into %+v", op, v, got)
			}
		}
		var ar api.AllocateRequest
		if DecodeAllocateRequest(payload, &ar) == nil {
			check(&ar, func(b []byte) (any, error) { var r api.AllocateRequest; return &r, DecodeAllocateRequest(b, &r) })
		}
		var gr api.GCRequest
		if DecodeGCRequest(payload, &gr) == nil {
			check(&gr, func(b []byte) (any, error) { var r api.GCRequest; return &r, DecodeGCRequest(b, &r) })
		}
		var rr api.ReleaseRequest
		_ = DecodeReleaseRequest(payload, &rr)
		var a api.Allocation
		if DecodeAllocation(payload, &a) == nil {
			check(&a, func(b []byte) (any, error) { var r api.Allocation; return &r, DecodeAllocation(b, &r) })
		}
		var gs api.GCResponse
		_ = DecodeGCResponse(payload, &gs)
		_, _ = DecodeError(payload)
		var st api.Status
		if DecodeStatus(payload, &st) == nil {
			check(&st, func(b []byte) (any, error) { var r api.Status; return &r, DecodeStatus(b, &r) })
		}
		_, _ = DecodePools(payload)
		_, _ = DecodeAllocations(payload)
		_, _ = DecodePlugins(payload)
	})
}

// BenchmarkCodec measures the CNI path's payloads: an ADD request and its answer, each
// encoded and decoded once per iteration (what allot-cni and allotd do between them).
func BenchmarkCodec(b *testing.B) {
	req := &api.AllocateRequest{Owner: api.Owner{ContainerID: strings.Repeat("c", 64), IfName: "eth0"}, Network: "allot",
		Pod: api.PodRef{Namespace: "default", Name: "web-7d4b9c", UID: "8f0c6a52-3b1e-4c1a-9d1e-2f6a7b8c9d0e"}, Pools: []string{"v4", "v6"}}
	alloc := &api.Allocation{Owner: req.Owner, Network: req.Network, Pod: req.Pod,
		IPs:    []api.IPConfig{{Address: "10.244.0.5/16", Gateway: "10.244.0.1", Pool: "v4"}, {Address: "fd00::5/64", Pool: "v6"}},
		Routes: []api.Route{{Dst: "0.0.0.0/0"}, {Dst: "::/0"}}, Created: time.Unix(1700000000, 0)}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendAllocateRequest(buf[:0], req)
		var r api.AllocateRequest
		if err := DecodeAllocateRequest(buf, &r); err != nil {
			b.Fatal(err)
		}
		buf = AppendAllocation(buf[:0], alloc)
		var a api.Allocation
		if err := DecodeAllocation(buf, &a); err != nil {
			b.Fatal(err)
		}
	}
}
