package allocator

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/allot-ipam/allot/core/internal/addrmath"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// An IPv6 /64 costs almost nothing until used, and 1000 addresses from it
// cost one chunk, not anything proportional to 2^64.
func TestMemoryV6Slash64(t *testing.T) {
	// Empty pools: measured over many so GC noise averages out.
	before := heapInUse()
	pools := make([]*Pool, 100)
	for i := range pools {
		pools[i] = mustNew(t, Config{CIDRs: pfx("2001:db8::/64")})
	}
	perPool := (int64(heapInUse()) - int64(before)) / int64(len(pools))
	runtime.KeepAlive(pools)
	p := pools[0]
	empty := heapInUse()
	for range 1000 {
		if _, err := p.AllocateNext(); err != nil {
			t.Fatal(err)
		}
	}
	after := heapInUse()
	runtime.KeepAlive(p)
	t.Logf("empty pool: %d B; +1000 addresses: %d B; chunks %d", perPool, int64(after)-int64(empty), p.chunkCount())
	if perPool > 2<<10 {
		t.Errorf("empty /64 pool costs %d B, want < 2 KiB", perPool)
	}
	if d := int64(after) - int64(empty); d > 16<<10 {
		t.Errorf("1000 addresses cost %d B, want < 16 KiB", d)
	}
	if p.chunkCount() != 1 {
		t.Errorf("%d chunks for 1000 sequential addresses", p.chunkCount())
	}
}

// 1000 addresses scattered over a /64 cost one chunk each (~0.6 KiB), and
// releasing them frees the chunks again.
func TestMemoryScatteredReleased(t *testing.T) {
	p := mustNew(t, Config{CIDRs: pfx("2001:db8::/64")})
	base := addrmath.FromAddr(netip.MustParseAddr("2001:db8::"))
	var held []netip.Addr
	for i := range uint64(1000) {
		a := base.Add64(i*0x9e3779b97f4a7c15 + 1).Addr(false) // spread over the /64, skipping the anycast address
		if err := p.Allocate(a); err != nil {
			t.Fatal(err)
		}
		held = append(held, a)
	}
	if p.chunkCount() != 1000 {
		t.Fatalf("%d chunks, want 1000", p.chunkCount())
	}
	for _, a := range held {
		if err := p.Release(a); err != nil {
			t.Fatal(err)
		}
	}
	check(t, p)
	if p.chunkCount() > 1 {
		t.Fatalf("%d chunks after releasing everything, want <= 1", p.chunkCount())
	}
}

// Steady-state allocate/release allocates nothing on the heap.
func TestZeroAllocsSteadyState(t *testing.T) {
	for _, cidr := range []string{"10.0.0.0/16", "2001:db8::/64"} {
		p := mustNew(t, Config{CIDRs: pfx(cidr)})
		for range 10000 { // warm up: cross a few chunk boundaries
			a, _ := p.AllocateNext()
			_ = p.Release(a)
		}
		n := testing.AllocsPerRun(20000, func() {
			a, err := p.AllocateNext()
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Release(a); err != nil {
				t.Fatal(err)
			}
		})
		if n != 0 {
			t.Errorf("%s: %v allocs per allocate+release, want 0", cidr, n)
		}
	}
}
