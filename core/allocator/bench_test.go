package allocator

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// fillTo allocates every usable address, then releases a deterministic
// pseudo-random selection until `frac` of the pool is used, leaving holes
// scattered over the whole range (the hard case for next-free search).
func fillTo(b *testing.B, p *Pool, frac float64) {
	b.Helper()
	var all []netip.Addr
	for {
		a, err := p.AllocateNext()
		if err != nil {
			break
		}
		all = append(all, a)
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	keep := int(frac * float64(len(all)))
	for _, a := range all[keep:] {
		if err := p.Release(a); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllocateRelease(b *testing.B) {
	cases := []struct {
		name string
		cidr string
		frac float64
	}{
		{"v4-16-empty", "10.0.0.0/16", 0},
		{"v4-16-50pct", "10.0.0.0/16", 0.5},
		{"v4-16-99pct", "10.0.0.0/16", 0.99},
		{"v4-16-1free", "10.0.0.0/16", 1 - 1.0/65534},
		{"v6-64-empty", "2001:db8::/64", 0},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p := mustNew(b, Config{Name: "bench", CIDRs: pfx(c.cidr)})
			if c.frac > 0 {
				fillTo(b, p, c.frac)
			}
			b.ReportAllocs()
			for b.Loop() {
				a, err := p.AllocateNext()
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Release(a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Allocate of a specific address plus Release, in a 50%-full /16.
func BenchmarkAllocateSpecificRelease(b *testing.B) {
	p := mustNew(b, Config{Name: "bench", CIDRs: pfx("10.0.0.0/16")})
	fillTo(b, p, 0.5)
	var free []netip.Addr
	for a := netip.MustParseAddr("10.0.0.1"); len(free) < 1024; a = a.Next() {
		if !p.IsAllocated(a) {
			free = append(free, a)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		a := free[i&1023]
		i++
		if err := p.Allocate(a); err != nil {
			b.Fatal(err)
		}
		if err := p.Release(a); err != nil {
			b.Fatal(err)
		}
	}
}

// Filling a whole /16 with AllocateNext; ns/addr is the per-address cost.
func BenchmarkAllocateNextFill(b *testing.B) {
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		p := mustNew(b, Config{Name: "bench", CIDRs: pfx("10.0.0.0/16")})
		for {
			if _, err := p.AllocateNext(); err != nil {
				break
			}
			n++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/addr")
}
