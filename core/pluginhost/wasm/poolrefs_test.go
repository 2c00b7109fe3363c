package wasm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// fieldsOf calls fn with the number and the value bytes (after the tag) of each top-level
// field of b.
func fieldsOf(t *testing.T, b []byte, fn func(num protowire.Number, val []byte)) {
	t.Helper()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[max(n, 0):])
		if n < 0 || m < 0 {
			t.Fatalf("malformed request")
		}
		fn(num, b[n:n+m])
		b = b[n+m:]
	}
}

// refRuns returns, per top-level field of b, 'P' for a full pool record, or the length of
// a run of pool references, and the free counts (+1) the runs carry.
func refRuns(t *testing.T, b []byte) (shape []int, frees []uint64) {
	t.Helper()
	fieldsOf(t, b, func(num protowire.Number, val []byte) {
		switch num {
		case fPodReqPools:
			shape = append(shape, -1)
		case fPodReqPoolRefs:
			body, _ := protowire.ConsumeBytes(val)
			cnt, k := protowire.ConsumeVarint(body)
			body = body[k:]
			for range cnt {
				f, k := protowire.ConsumeVarint(body)
				frees, body = append(frees, f), body[k:]
			}
			shape = append(shape, int(cnt))
		}
	})
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
		return in.withPoolRefs(nil, b, false)
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

// runShape describes a request's pools: F for a full record, Rn for a run of n references,
// Sn for a run of n unchanged pools.
func runShape(t *testing.T, b []byte) string {
	t.Helper()
	var out []string
	fieldsOf(t, b, func(num protowire.Number, val []byte) {
		switch num {
		case fPodReqPools:
			out = append(out, "F")
		case fPodReqPoolRefs:
			body, _ := protowire.ConsumeBytes(val)
			cnt, _ := protowire.ConsumeVarint(body)
			out = append(out, fmt.Sprint("R", cnt))
		case fPodReqPoolSame:
			cnt, _ := protowire.ConsumeVarint(val)
			out = append(out, fmt.Sprint("S", cnt))
		}
	})
	return strings.Join(out, " ")
}

// TestSameRuns: pools whose free count the instance already has travel as runs of
// unchanged pools; a changed count as a reference, after which the instance has it.
func TestSameRuns(t *testing.T) {
	in := &instance{}
	req := podRequest("web", nil)
	steps := []struct {
		name   string
		change func()
		shape  string
	}{
		{"first request: all in full", func() {}, strings.TrimSpace(strings.Repeat("F ", 20))},
		{"unchanged: one run", func() {}, "S20"},
		{"free count changed", func() { req.Pools[3].Free++ }, "S3 R1 S16"},
		{"and now the instance has it", func() {}, "S20"},
		{"two changed", func() { req.Pools[0].Free--; req.Pools[19].Free-- }, "R1 S18 R1"},
		{"record changed", func() { req.Pools[5].Disabled = true }, "S5 F S14"},
		{"forgotten", func() { in.forget() }, strings.TrimSpace(strings.Repeat("F ", 20))},
	}
	for _, s := range steps {
		s.change()
		b, err := in.encodePod(nil, req, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if got := runShape(t, b); got != s.shape {
			t.Fatalf("%s: %s, want %s", s.name, got, s.shape)
		}
	}
}
