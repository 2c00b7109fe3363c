package wasm

import (
	"context"
	"testing"

	"github.com/allot-ipam/allot/internal/benchutil"
)

func diagRun(b *testing.B, mk func(in *instance) []byte) {
	p := openGuest(b, buildGuest(b, constantDir, true), func(c *Config) { c.Instances = 1 })
	in := <-p.slots
	defer func() { p.slots <- in }()
	ctx := context.Background()
	req := mk(in)
	t0 := benchutil.CPUTime()
	n := 0
	for b.Loop() {
		n++
		if _, err := in.call(ctx, p.cfg.Timeout, in.selectPod, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((benchutil.CPUTime()-t0).Nanoseconds())/1e3/float64(n), "cpu-µs/op")
}

func BenchmarkDiagEmpty(b *testing.B) { diagRun(b, func(*instance) []byte { return []byte{} }) }
func BenchmarkDiagFull(b *testing.B) {
	diagRun(b, func(in *instance) []byte {
		req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-07"})
		out, _ := in.encodePod(nil, req, true)
		in.call(context.Background(), 2e9, in.selectPod, out)
		out, _ = in.encodePod(nil, req, true)
		return out
	})
}
func BenchmarkDiagNoPools(b *testing.B) {
	diagRun(b, func(in *instance) []byte {
		req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-07"})
		req.Pools = nil
		out, _ := in.encodePod(nil, req, true)
		return out
	})
}
