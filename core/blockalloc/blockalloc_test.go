package blockalloc

import (
	"errors"
	"net/netip"
	"testing"

	"pgregory.net/rapid"
)

func mp(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestAllocateFirstFit(t *testing.T) {
	tests := []struct {
		name     string
		taken    []string
		within   string
		bits     int
		want     string
		wantFull bool
	}{
		{name: "empty", within: "10.0.0.0/16", bits: 24, want: "10.0.0.0/24"},
		{name: "after first", taken: []string{"10.0.0.0/24"}, within: "10.0.0.0/16", bits: 24, want: "10.0.1.0/24"},
		{name: "gap", taken: []string{"10.0.0.0/24", "10.0.2.0/24"}, within: "10.0.0.0/16", bits: 24, want: "10.0.1.0/24"},
		{name: "small block in the way", taken: []string{"10.0.0.128/25"}, within: "10.0.0.0/16", bits: 24, want: "10.0.1.0/24"},
		{name: "aligned after small", taken: []string{"10.0.0.0/26"}, within: "10.0.0.0/24", bits: 26, want: "10.0.0.64/26"},
		{name: "bigger block taken", taken: []string{"10.0.0.0/23"}, within: "10.0.0.0/16", bits: 24, want: "10.0.2.0/24"},
		{name: "covering prefix", taken: []string{"10.0.0.0/8"}, within: "10.0.0.0/16", bits: 24, wantFull: true},
		{name: "full", taken: []string{"10.0.0.0/25", "10.0.0.128/25"}, within: "10.0.0.0/24", bits: 25, wantFull: true},
		{name: "other CIDR taken ignored", taken: []string{"10.1.0.0/24"}, within: "10.0.0.0/24", bits: 24, want: "10.0.0.0/24"},
		{name: "top of v4", taken: []string{"255.255.255.0/25"}, within: "255.255.255.0/24", bits: 25, want: "255.255.255.128/25"},
		{name: "top of v4 full", taken: []string{"255.255.255.0/25", "255.255.255.128/25"}, within: "255.255.255.0/24", bits: 25, wantFull: true},
		{name: "v6", taken: []string{"fd00::/120"}, within: "fd00::/104", bits: 120, want: "fd00::100/120"},
		{name: "v6 top", taken: []string{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/121"}, within: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120", bits: 121, want: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff80/121"},
		{name: "v6 /64 across hi/lo", taken: []string{"fd00::/64"}, within: "fd00::/48", bits: 64, want: "fd00:0:0:1::/64"},
		{name: "whole CIDR as one block", within: "10.0.0.0/24", bits: 24, want: "10.0.0.0/24"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Set
			for _, p := range tt.taken {
				if err := s.Reserve(mp(p)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.Allocate(mp(tt.within), tt.bits)
			if tt.wantFull {
				if !errors.Is(err, ErrFull) {
					t.Fatalf("Allocate = %v, %v; want ErrFull", got, err)
				}
				return
			}
			if err != nil || got != mp(tt.want) {
				t.Fatalf("Allocate = %v, %v; want %v", got, err, tt.want)
			}
			if !s.Contains(got) {
				t.Fatal("allocated block not in set")
			}
		})
	}
}

func TestReserveRelease(t *testing.T) {
	var s Set
	if err := s.Reserve(mp("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"10.0.0.0/24", "10.0.0.0/16", "10.0.0.128/25"} {
		if err := s.Reserve(mp(p)); !errors.Is(err, ErrOverlap) {
			t.Errorf("Reserve(%s) = %v; want ErrOverlap", p, err)
		}
	}
	if err := s.Reserve(mp("10.0.0.1/24")); !errors.Is(err, ErrInvalid) {
		t.Errorf("host bits: %v", err)
	}
	if s.Release(mp("10.0.0.0/25")) {
		t.Error("released a prefix that is not in the set")
	}
	if !s.Release(mp("10.0.0.0/24")) || s.Len() != 0 {
		t.Error("release failed")
	}
	if _, err := s.Allocate(mp("10.0.0.0/24"), 16); !errors.Is(err, ErrInvalid) {
		t.Errorf("bits shorter than within: %v", err)
	}
}

func TestFreeBlocks(t *testing.T) {
	var s Set
	for _, p := range []string{"10.0.0.0/26", "10.0.0.64/26", "10.0.1.0/24", "10.0.4.0/22", "10.1.0.0/24"} {
		if err := s.Reserve(mp(p)); err != nil {
			t.Fatal(err)
		}
	}
	// 10.0.0.0/16 in /24s: 256 blocks, taken: .0 (two /26), .1, .4-.7 -> 6.
	if got := s.FreeBlocks(mp("10.0.0.0/16"), 24); got != 250 {
		t.Errorf("FreeBlocks = %d; want 250", got)
	}
	if got := s.FreeBlocks(mp("10.0.0.0/24"), 24); got != 0 {
		t.Errorf("FreeBlocks(covered) = %d; want 0", got)
	}
	if got := TotalBlocks(mp("fd00::/48"), 64); got != 65536 {
		t.Errorf("TotalBlocks = %d", got)
	}
	if got := s.FreeBlocks(mp("::/0"), 128); got != ^uint64(0) {
		t.Errorf("FreeBlocks saturates: %d", got)
	}
}

// TestProperties drives a Set with random reserve/allocate/release steps inside 10.0.0.0/20
// and checks it against a brute-force model: never two overlapping prefixes, Allocate returns
// the lowest free aligned block, FreeBlocks counts exactly, released blocks are reused.
func TestProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s Set
		var held []netip.Prefix
		genPrefix := func(label string) netip.Prefix {
			bits := rapid.IntRange(20, 28).Draw(t, label+"bits")
			off := rapid.Uint32Range(0, 1<<12-1).Draw(t, label+"off")
			a := netip.AddrFrom4([4]byte{10, 0, byte(off >> 8), byte(off)})
			return netip.PrefixFrom(a, bits).Masked()
		}
		overlaps := func(p netip.Prefix) bool {
			for _, h := range held {
				if h.Overlaps(p) {
					return true
				}
			}
			return false
		}
		for step := 0; step < 60; step++ {
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0: // allocate
				within := genPrefix("w")
				bits := rapid.IntRange(within.Bits(), 28).Draw(t, "bits")
				// Model: first aligned block that overlaps nothing held.
				var want netip.Prefix
				var free uint64
				size := 1 << (32 - bits)
				start := within.Addr().As4()
				s0 := uint32(start[0])<<24 | uint32(start[1])<<16 | uint32(start[2])<<8 | uint32(start[3])
				for i := 0; i < 1<<(bits-within.Bits()); i++ {
					v := s0 + uint32(i*size)
					b := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits)
					if !overlaps(b) {
						if !want.IsValid() {
							want = b
						}
						free++
					}
				}
				if got := s.FreeBlocks(within, bits); got != free {
					t.Fatalf("FreeBlocks(%v,/%d) = %d; model %d", within, bits, got, free)
				}
				got, err := s.Allocate(within, bits)
				if !want.IsValid() {
					if !errors.Is(err, ErrFull) {
						t.Fatalf("Allocate(%v,/%d) = %v, %v; want ErrFull", within, bits, got, err)
					}
					continue
				}
				if err != nil || got != want {
					t.Fatalf("Allocate(%v,/%d) = %v, %v; model %v", within, bits, got, err, want)
				}
				held = append(held, got)
			case 1: // reserve
				p := genPrefix("r")
				err := s.Reserve(p)
				if overlaps(p) != errors.Is(err, ErrOverlap) {
					t.Fatalf("Reserve(%v) = %v; model overlap %v", p, err, overlaps(p))
				}
				if err == nil {
					held = append(held, p)
				}
			case 2: // release
				if len(held) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(held)-1).Draw(t, "i")
				if !s.Release(held[i]) {
					t.Fatalf("Release(%v) = false", held[i])
				}
				held = append(held[:i], held[i+1:]...)
			}
			got := s.Prefixes()
			if len(got) != len(held) {
				t.Fatalf("set has %d prefixes; model %d", len(got), len(held))
			}
			for i := 1; i < len(got); i++ {
				if got[i-1].Overlaps(got[i]) {
					t.Fatalf("overlap in set: %v %v", got[i-1], got[i])
				}
			}
		}
	})
}

func BenchmarkAllocate1000(b *testing.B) {
	for b.Loop() {
		var s Set
		for range 1000 {
			if _, err := s.Allocate(mp("10.0.0.0/8"), 24); err != nil {
				b.Fatal(err)
			}
		}
	}
}
