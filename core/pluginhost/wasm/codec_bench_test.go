package wasm

import (
	"context"
	"os"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

// genGuestDir is the probe guest that decodes with generated code (see its main.go).
const genGuestDir = "testdata/genguest"

// BenchmarkGuestCodec settles the guest's codec: the same constant policy behind the
// SDK's hand codec (testdata/constant) and behind generated code without descriptors
// (testdata/genguest: protoc-gen-go-lite's UnmarshalVTUnsafe/MarshalVT and sdk/wire's
// conversions). Its own figures are the generated guest's; the baselines run in the same
// benchmark (interleaved): x-hand, the SDK guest as shipped (pool references on), and
// x-hand-full, the SDK guest sent every pool and part in full as the generated one is
// (the codecs alone). The modules' sizes are reported too (gen-module-MB, hand-module-MB).
func BenchmarkGuestCodec(b *testing.B) {
	genPath, handPath := buildGuest(b, genGuestDir, true), buildGuest(b, constantDir, true)
	gen := openGuest(b, genPath, func(c *Config) { c.Instances = 1 })
	hand := openGuest(b, handPath, func(c *Config) { c.Instances = 1 })
	handFull := openGuest(b, handPath, func(c *Config) { c.Instances = 1 })
	handFull.poolRefs, handFull.sameRuns, handFull.partRefs = false, false, false
	if gen.poolRefs || !hand.poolRefs {
		b.Fatalf("pool references: generated guest %v, SDK guest %v; want false, true", gen.poolRefs, hand.poolRefs)
	}
	req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-07"})
	ctx := context.Background()
	decide := func(p *Plugin) func() {
		return func() {
			d, err := p.SelectPodPools(ctx, req)
			if err != nil || d.Code != policy.Decided {
				b.Fatalf("%+v, %v", d, err)
			}
		}
	}
	for _, p := range []*Plugin{gen, hand, handFull} {
		decide(p)()
	}
	interleaved(b, decide(gen), baseline{"hand", decide(hand)}, baseline{"hand-full", decide(handFull)})
	b.ReportMetric(moduleMB(b, genPath), "gen-module-MB") // after the loop, which clears metrics
	b.ReportMetric(moduleMB(b, handPath), "hand-module-MB")
}

func moduleMB(b *testing.B, path string) float64 {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return float64(st.Size()) / 1e6
}
