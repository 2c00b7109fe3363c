package wasm

import (
	"context"
	"slices"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// refRuns returns, per top-level field of b, 'P' for a full pool record, or the length of
// a run of pool references, and the free counts (+1) the runs carry.
func refRuns(t *testing.T, b []byte) (shape []int, frees []uint64) {
	t.Helper()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if n < 0 || m < 0 {
			t.Fatalf("malformed request")
		}
		switch num {
		case fPodReqPools:
			shape = append(shape, -1)
		case fPodReqPoolRefs:
			body, _ := protowire.ConsumeBytes(b[n:])
			cnt, k := protowire.ConsumeVarint(body)
			body = body[k:]
			for range cnt {
				f, k := protowire.ConsumeVarint(body)
				frees, body = append(frees, f), body[k:]
			}
			shape = append(shape, int(cnt))
		}
		b = b[n+m:]
	}
	return shape, frees
}

func TestWithPoolRefs(t *testing.T) {
	in := &instance{}
	req := podRequest("web", nil)
	enc := func() []byte {
		b, err := wire.AppendPodRequest(nil, req)
		if err != nil {
			t.Fatal(err)
		}
		return in.withPoolRefs(nil, b)
	}
	steps := []struct {
		name   string
		change func()
		shape  []int // -1: a full record; n: a run of n references
	}{
		{"first request: all in full", func() {}, slices.Repeat([]int{-1}, 20)},
		{"unchanged: one run", func() {}, []int{20}},
		{"free count changed: still a reference", func() { req.Pools[3].Free++ }, []int{20}},
		{"record changed: split runs", func() { req.Pools[5].Disabled = true }, []int{5, -1, 14}},
		{"pool removed: positions shift", func() { req.Pools = slices.Delete(req.Pools, 0, 1) },
			slices.Repeat([]int{-1}, 19)},
		{"forgotten after a failed call", func() { in.forget() }, slices.Repeat([]int{-1}, 19)},
	}
	for _, s := range steps {
		s.change()
		shape, frees := refRuns(t, enc())
		if !slices.Equal(shape, s.shape) {
			t.Fatalf("%s: shape %v, want %v", s.name, shape, s.shape)
		}
		if s.name == "free count changed: still a reference" && frees[3] != req.Pools[3].Free+1 {
			t.Errorf("%s: free %d, want %d+1", s.name, frees[3], req.Pools[3].Free)
		}
	}
}

// TestPoolRefsThroughGuest: with references, the guest sees every change of a pool: a
// pool the policy picks turns disabled and back, and pools come and go.
func TestPoolRefsThroughGuest(t *testing.T) {
	p := openGuest(t, buildGuest(t, labelPolicyDir, true), func(c *Config) { c.Instances = 1 })
	if !p.poolRefs {
		t.Fatal("the example guest does not announce pool references")
	}
	req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-03"}) // benchPools()[6]
	for i, tt := range []struct {
		change func()
		code   policy.Code
	}{
		{func() {}, policy.Decided},
		{func() {}, policy.Decided},
		{func() { req.Pools[6].Disabled = true }, policy.NoFit},
		{func() { req.Pools[6].Free-- }, policy.NoFit},
		{func() { req.Pools[6].Disabled = false }, policy.Decided},
		{func() { req.Pools = slices.Delete(req.Pools, 0, 6) }, policy.Decided}, // pool-v4-03 (index 6) now first
		{func() { req.Pools = req.Pools[1:] }, policy.NoFit},
		{func() { req.Pools = benchPools() }, policy.Decided},
	} {
		tt.change()
		d, err := p.SelectPodPools(context.Background(), req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Code != tt.code {
			t.Fatalf("step %d: %+v, want code %v", i, d, tt.code)
		}
	}
}
