package wire_test

import (
	"bytes"
	"testing"

	"github.com/allot-ipam/allot/sdk/wire"
)

// TestAppendPoolRecordComposes: the request without its pools, then one record per pool,
// is AppendPodRequest's encoding.
func TestAppendPoolRecordComposes(t *testing.T) {
	req := samplePodRequest()
	req.Pools = append(req.Pools, benchPodRequest(5).Pools...)
	want, err := wire.AppendPodRequest(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	head := *req
	head.Pools = nil
	got, err := wire.AppendPodRequest(nil, &head)
	if err != nil {
		t.Fatal(err)
	}
	for i := range req.Pools {
		if got, err = wire.AppendPoolRecord(got, &req.Pools[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("composed encoding differs:\n got %x\nwant %x", got, want)
	}
	bad := req.Pools[0]
	bad.Name = "\xff"
	if _, err := wire.AppendPoolRecord(nil, &bad); err == nil {
		t.Fatal("invalid UTF-8 pool name accepted")
	}
}
