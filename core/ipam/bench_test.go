package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/internal/benchutil"
	"github.com/allot-ipam/allot/plugins/policy/static"
	"github.com/allot-ipam/allot/sdk/policy"
)

// BenchmarkManagerAllocate measures the manager without the HTTP layer: policy decision,
// allocator and store commit, with 32 concurrent callers. Compare with the daemon's
// BenchmarkAPIAllocate to see what the socket API costs.
func BenchmarkManagerAllocate(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		b.Run(fmt.Sprintf("nosync=%v", noSync), func(b *testing.B) {
			st, err := store.Open(context.Background(), filepath.Join(b.TempDir(), "a.db"), store.Options{NoSync: noSync, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			pol := static.New()
			m, err := New(context.Background(), Options{Store: st, Logger: quiet,
				Pools:  []PoolSpec{{Allocator: allocator.Config{Name: "v4", CIDRs: []netip.Prefix{pfx("10.0.0.0/8")}}, Default: true}},
				Policy: func(string) policy.PoolPolicy { return pol }})
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.SetParallelism(16)
			meter := benchutil.Start(b)
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					id := n.Add(1)
					if _, err := m.Allocate(ctx, &api.AllocateRequest{Owner: api.Owner{ContainerID: fmt.Sprintf("c%d", id), IfName: "eth0"}, Network: "n"}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			meter.Stop("allocs/s")
			b.ReportMetric(st.Stats().AvgBatchSize(), "ops/commit")
		})
	}
}
