package store

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestNodeStateRoundTrip(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "allot.db")
	s := openTest(t, path, Options{})
	if _, ok, err := s.NodeState(ctx); err != nil || ok {
		t.Fatalf("new store: ok=%v err=%v, want no state", ok, err)
	}
	want := NodeState{Node: "node-1", Source: "allotnode", Saved: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Blocks: []Block{
		{Pool: "default", CIDR: netip.MustParsePrefix("10.0.0.16/28")},
		{Pool: "default", CIDR: netip.MustParsePrefix("fd00::10/124")},
		// An ENI address, presented with its subnet's prefix length and router.
		{Pool: "default", CIDR: netip.MustParsePrefix("10.1.0.7/32"), Bits: 24, Gateway: netip.MustParseAddr("10.1.0.1")},
		// An ENI IPv6 /80, its addresses presented as host addresses with a link-local gateway.
		{Pool: "default", CIDR: netip.MustParsePrefix("2600:1f18::/80"), Bits: 128, Gateway: netip.MustParseAddr("fe80::1")},
	}}
	rec := Record{Owner: Owner{ContainerID: "c1", IfName: "eth0"}, Network: "n", Created: want.Saved,
		Addresses: []Address{{Pool: "default", Prefix: netip.MustParsePrefix("10.0.0.18/28")}}}
	if err := s.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := s.PutNodeState(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, path, Options{})
	got, ok, err := s.NodeState(ctx)
	if err != nil || !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen: %+v ok=%v err=%v, want %+v", got, ok, err, want)
	}
	// The node state lives beside the records, not among them.
	recs, err := s.List(ctx)
	if err != nil || len(recs) != 1 {
		t.Fatalf("records: %v %v", recs, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Inspect(ctx, path, InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("Inspect of a store with a node state: %v", rep.Problems)
	}
}

func TestNodeStateRefusesBadFields(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "allot.db"), Options{})
	for _, tc := range []struct {
		st    NodeState
		field string
	}{
		{NodeState{}, "node"},
		{NodeState{Node: "n", Blocks: []Block{{CIDR: netip.MustParsePrefix("10.0.0.0/24")}}}, "blocks[0].pool"},
		{NodeState{Node: "n", Blocks: []Block{{Pool: "p", CIDR: netip.MustParsePrefix("10.0.0.1/24")}}}, "blocks[0].cidr"},
		{NodeState{Node: "n", Blocks: []Block{{Pool: "p", CIDR: netip.MustParsePrefix("10.0.0.0/24"), Bits: 33}}}, "blocks[0].bits"},
		{NodeState{Node: "n", Blocks: []Block{{Pool: "p", CIDR: netip.MustParsePrefix("10.0.0.1/32"), Gateway: netip.MustParseAddr("fd00::1")}}}, "blocks[0].gateway"},
	} {
		err := s.PutNodeState(ctx, tc.st)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want a field error on %s", tc.st, err, tc.field)
		}
	}
	if _, ok, err := s.NodeState(ctx); err != nil || ok {
		t.Fatalf("refused states must not be stored: ok=%v err=%v", ok, err)
	}
}

func TestDecodeNodeState(t *testing.T) {
	for _, tc := range []struct{ raw, field string }{
		{`{"v":2,"node":"n","source":"","blocks":[],"saved":"2026-01-01T00:00:00Z"}`, "v"},
		{`{"v":1,"node":"n","source":"","blocks":[{"pool":"p","cidr":"x"}],"saved":"2026-01-01T00:00:00Z"}`, "blocks[0].cidr"},
		{`{"v":1,"node":"n","extra":1}`, "node"},
	} {
		_, err := decodeNodeState([]byte(tc.raw))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want a field error on %s", tc.raw, err, tc.field)
		}
	}
}
