package wire_test

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/frame"
	"github.com/allot-ipam/allot/core/cniplugin/wire"
)

// The generated code (through core/api/frame) is the reference: this package must write the
// same bytes and read what it writes the same way.

func TestRequestsEncodeAsFrame(t *testing.T) {
	owner := api.Owner{ContainerID: "0123456789abcdef", IfName: "eth0"}
	pod := api.PodRef{Namespace: "ns", Name: "p", UID: "u-1"}
	long := strings.Repeat("x", 300) // lengths over one varint byte
	allocs := []*api.AllocateRequest{
		{},
		{Owner: owner, Network: "net"},
		{Owner: owner, Network: long, Pod: pod, Pools: []string{"a", "", long}, IPs: []string{"10.0.0.1", "fd00::1/64"},
			DefaultIPv4Pools: []string{"v4"}, DefaultIPv6Pools: []string{"v6", "v6b"}},
		{Owner: api.Owner{IfName: "eth1"}, Pod: api.PodRef{UID: "u"}},
	}
	for i, r := range allocs {
		equal(t, fmt.Sprintf("allocate %d", i), wire.AppendAllocateRequest([]byte("pre"), r), frame.AppendAllocateRequest([]byte("pre"), r))
	}
	for i, o := range []api.Owner{{}, owner} {
		for j, p := range []api.PodRef{{}, pod} {
			name := fmt.Sprintf("owner %d pod %d", i, j)
			equal(t, "release "+name, wire.AppendReleaseRequest(nil, &api.ReleaseRequest{Owner: o, Network: "n", Pod: p}),
				frame.AppendReleaseRequest(nil, &api.ReleaseRequest{Owner: o, Network: "n", Pod: p}))
			equal(t, "check "+name, wire.AppendCheckRequest(nil, &api.CheckRequest{Owner: o, Pod: p}),
				frame.AppendCheckRequest(nil, &api.CheckRequest{Owner: o, Pod: p}))
		}
	}
	for i, r := range []*api.GCRequest{{}, {Network: "n", Valid: []api.Owner{}}, {Network: "n", Valid: []api.Owner{owner, {}, {ContainerID: long}}}} {
		equal(t, fmt.Sprintf("gc %d", i), wire.AppendGCRequest(nil, r), frame.AppendGCRequest(nil, r))
	}
}

func equal(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Errorf("%s:\n got %x\nwant %x", what, got, want)
	}
}

func TestAnswersDecodeAsFrame(t *testing.T) {
	created := time.Unix(0, 1_700_000_000_123_456_789)
	for _, a := range []*api.Allocation{
		{},
		{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}, Network: "n", Pod: api.PodRef{Namespace: "ns", Name: "p", UID: "u"},
			IPs:    []api.IPConfig{{Address: "10.0.0.2/24", Gateway: "10.0.0.1", Pool: "v4"}, {Address: "fd00::2/64", Pool: "v6"}},
			Routes: []api.Route{{Dst: "0.0.0.0/0", GW: "10.0.0.1"}, {Dst: "::/0"}}, Created: created},
		{Created: time.Unix(0, -5)},
	} {
		checkDecode(t, frame.AppendAllocation(nil, a))
	}
	checkDecode(t, frame.AppendStatus(nil, &api.Status{Ready: true, Message: "m", Version: "v", Mode: "standalone", Uptime: "1s",
		Pools: []api.PoolStatus{{Name: "p", Family: "ipv4", CIDRs: []string{"10.0.0.0/24", ""}, Usable: 254, Used: 3, Free: 251,
			Utilization: 0.0118, Default: true}, {Utilization: math.Inf(1)}}, Allocations: 3}))
	checkDecode(t, frame.AppendStatus(nil, &api.Status{Allocations: -1}))
	checkDecode(t, frame.AppendGCResponse(nil, &api.GCResponse{Released: []api.Owner{{ContainerID: "a", IfName: "eth0"}, {}}}))
	checkDecode(t, frame.AppendGCResponse(nil, &api.GCResponse{}))
	checkDecode(t, frame.AppendError(nil, &api.Error{Code: api.CodeConflict, Message: "m", Field: "ips[0]"}))
	checkDecode(t, frame.AppendError(nil, &api.Error{Message: "no code"}))
}

// checkDecode decodes b, which frame wrote, as every kind of answer with both decoders:
// this package must accept what frame accepts, with the same result. The fuzz target checks
// that what this package accepts of any input, frame accepts alike.
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	for _, d := range decoders {
		got, gerr := d.wire(b)
		want, werr := d.frame(b)
		switch {
		case (gerr == nil) != (werr == nil):
			t.Errorf("%s(%x): error %v here, %v in frame", d.name, b, gerr, werr)
		case gerr == nil && fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want):
			t.Errorf("%s(%x):\n got %#v\nwant %#v", d.name, b, got, want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(frame.AppendAllocation(nil, &api.Allocation{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}, Network: "n",
		IPs: []api.IPConfig{{Address: "10.0.0.2/24", Gateway: "10.0.0.1"}}, Routes: []api.Route{{Dst: "0.0.0.0/0"}}, Created: time.Unix(5, 0)}))
	f.Add(frame.AppendStatus(nil, &api.Status{Ready: true, Pools: []api.PoolStatus{{Name: "p", CIDRs: []string{"10.0.0.0/24"}, Free: 3, Utilization: 0.5}}}))
	f.Add(frame.AppendError(nil, &api.Error{Code: api.CodeConflict, Message: "m", Field: "f"}))
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, d := range decoders {
			got, gerr := d.wire(b)
			if gerr != nil {
				continue
			}
			want, werr := d.frame(b)
			if werr != nil {
				t.Fatalf("%s(%x): accepted here, frame says %v", d.name, b, werr)
			}
			// %#v, not DeepEqual: a NaN utilization is never equal to itself.
			if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
				t.Fatalf("%s(%x):\n got %#v\nwant %#v", d.name, b, got, want)
			}
		}
	})
}

var decoders = []struct {
	name        string
	wire, frame func([]byte) (any, error)
}{
	{"allocation",
		func(b []byte) (any, error) { var a api.Allocation; err := wire.DecodeAllocation(b, &a); return a, err },
		func(b []byte) (any, error) { var a api.Allocation; err := frame.DecodeAllocation(b, &a); return a, err }},
	{"status",
		func(b []byte) (any, error) { var s api.Status; err := wire.DecodeStatus(b, &s); return s, err },
		func(b []byte) (any, error) { var s api.Status; err := frame.DecodeStatus(b, &s); return s, err }},
	{"gcResponse",
		func(b []byte) (any, error) { var r api.GCResponse; err := wire.DecodeGCResponse(b, &r); return r, err },
		func(b []byte) (any, error) { var r api.GCResponse; err := frame.DecodeGCResponse(b, &r); return r, err }},
	{"error",
		func(b []byte) (any, error) { e, err := wire.DecodeError(b); return *e, err },
		func(b []byte) (any, error) { e, err := frame.DecodeError(b); return *e, err }},
}
