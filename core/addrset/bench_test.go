package addrset

import (
	"fmt"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

// A shared pool of 256 entries (single addresses and short ranges) with reservations taken
// away: what agents, the operator and the webhook compute for every pool they judge.
func benchSets(b *testing.B) (pool, reserved Set) {
	b.Helper()
	var items, res []string
	for i := range 256 {
		if i%2 == 0 {
			items = append(items, fmt.Sprintf("10.%d.%d.1", i/256, i%256))
		} else {
			items = append(items, fmt.Sprintf("10.%d.%d.10-10.%d.%d.200", i/256, i%256, i/256, i%256))
			res = append(res, fmt.Sprintf("10.%d.%d.50-10.%d.%d.60", i/256, i%256, i/256, i%256))
		}
	}
	pool, err := Parse("ips", policy.IPv4, items)
	if err != nil {
		b.Fatal(err)
	}
	if reserved, err = Parse("reserved", policy.IPv4, res); err != nil {
		b.Fatal(err)
	}
	return pool, reserved
}

func BenchmarkParseSubtract(b *testing.B) {
	pool, reserved := benchSets(b)
	items := pool.Strings()
	b.ReportAllocs()
	for b.Loop() {
		s, err := Parse("ips", policy.IPv4, items)
		if err != nil {
			b.Fatal(err)
		}
		if s.Subtract(reserved).Empty() {
			b.Fatal("empty")
		}
	}
}

func BenchmarkIndexNth(b *testing.B) {
	pool, reserved := benchSets(b)
	usable := pool.Subtract(reserved)
	n := usable.Size()
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		a, ok := usable.Nth(i % n)
		if !ok {
			b.Fatal("Nth")
		}
		if j, ok := usable.Index(a); !ok || j != i%n {
			b.Fatalf("Index(%s) = %d, %v; want %d", a, j, ok, i%n)
		}
		i += 7919
	}
}
