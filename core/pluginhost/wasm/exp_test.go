package wasm

import (
	"context"
	"testing"

	"github.com/allot-ipam/allot/internal/benchutil"
)

func BenchmarkExpEmptyCall(b *testing.B) {
	p := openGuest(b, buildGuest(b, labelPolicyDir, true), func(c *Config) { c.Instances = 1 })
	in := <-p.slots
	fn := in.mod.ExportedFunction(exportContractVersion)
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"timeout", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), p.cfg.Timeout)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			m := benchutil.Start(b)
			for b.Loop() {
				ctx, cancel := tc.ctx()
				if err := fn.CallWithStack(ctx, in.stack[:]); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
			m.Stop("calls/s")
		})
	}
	b.Run("selectpod-empty-req", func(b *testing.B) {
		b.ReportAllocs()
		m := benchutil.Start(b)
		for b.Loop() {
			if _, err := in.call(context.Background(), in.selectPod, nil); err != nil {
				b.Fatal(err)
			}
		}
		m.Stop("calls/s")
	})
	p.slots <- in
}

func BenchmarkExpHostEncode(b *testing.B) {
	req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-07"})
	var buf []byte
	b.ReportAllocs()
	m := benchutil.Start(b)
	for b.Loop() {
		var err error
		buf, err = appendPodRequest(buf[:0], req)
		if err != nil {
			b.Fatal(err)
		}
	}
	m.Stop("enc/s")
	b.Logf("request %d bytes", len(buf))
}
