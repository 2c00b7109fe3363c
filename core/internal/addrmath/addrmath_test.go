package addrmath

import (
	"math/big"
	"net/netip"
	"testing"
)

func toBig(u U128) *big.Int {
	b := new(big.Int).SetUint64(u.Hi)
	return b.Lsh(b, 64).Or(b, new(big.Int).SetUint64(u.Lo))
}

var mod128 = new(big.Int).Lsh(big.NewInt(1), 128)

// FuzzArithmetic checks the operations against math/big (mod 2^128) and the address
// conversions against netip.
func FuzzArithmetic(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(0), ^uint64(0), uint8(0))
	f.Add(^uint64(0), ^uint64(0), uint64(0), uint64(1), uint8(64))
	f.Add(uint64(1), uint64(0), uint64(0), uint64(1), uint8(127))
	f.Fuzz(func(t *testing.T, ah, al, bh, bl uint64, n uint8) {
		a, b := U128{ah, al}, U128{bh, bl}
		ba, bb := toBig(a), toBig(b)
		if got, want := toBig(a.Add(b)), new(big.Int).Mod(new(big.Int).Add(ba, bb), mod128); got.Cmp(want) != 0 {
			t.Fatalf("%v + %v = %v, want %v", a, b, got, want)
		}
		if got, want := toBig(a.Sub(b)), new(big.Int).Mod(new(big.Int).Sub(ba, bb), mod128); got.Cmp(want) != 0 {
			t.Fatalf("%v - %v = %v, want %v", a, b, got, want)
		}
		if got, want := toBig(a.Add64(bl)), new(big.Int).Mod(new(big.Int).Add(ba, new(big.Int).SetUint64(bl)), mod128); got.Cmp(want) != 0 {
			t.Fatalf("%v + %d = %v, want %v", a, bl, got, want)
		}
		if got, want := a.Cmp(b), ba.Cmp(bb); got != want {
			t.Fatalf("Cmp(%v, %v) = %d, want %d", a, b, got, want)
		}
		s := int(n % 129)
		if got, want := toBig(a.Shr(s)), new(big.Int).Rsh(ba, uint(s)); got.Cmp(want) != 0 {
			t.Fatalf("%v >> %d = %v, want %v", a, s, got, want)
		}
		if got, want := toBig(HostMask(s)), new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(s)), big.NewInt(1)); got.Cmp(want) != 0 {
			t.Fatalf("HostMask(%d) = %v, want %v", s, got, want)
		}
		// An IPv6 address round-trips through all 128 bits, an IPv4 address through the low 32.
		if got := FromAddr(a.Addr(false)); got != a {
			t.Fatalf("FromAddr(%v.Addr(false)) = %v", a, got)
		}
		v4 := a.Addr(true)
		if got := FromAddr(v4); got != (U128{Lo: al & 0xffffffff}) || !v4.Is4() {
			t.Fatalf("FromAddr(%v) = %v, want the low 32 bits of %v", v4, got, a)
		}
	})
}

func TestLastOf(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.0/24":     "10.1.2.255",
		"10.1.2.3/24":     "10.1.2.255", // masked first
		"10.0.0.7/32":     "10.0.0.7",
		"0.0.0.0/0":       "255.255.255.255",
		"2001:db8::/64":   "2001:db8::ffff:ffff:ffff:ffff",
		"::/0":            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		"2001:db8::9/128": "2001:db8::9",
	} {
		if got := LastOf(netip.MustParsePrefix(in)); got != netip.MustParseAddr(want) {
			t.Errorf("LastOf(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestPow2Sat64(t *testing.T) {
	if got := Pow2(64); got != (U128{Hi: 1}) {
		t.Fatalf("Pow2(64) = %v", got)
	}
	if got := Pow2(3).Sat64(); got != 8 {
		t.Fatalf("Pow2(3) = %d", got)
	}
	if got := Pow2(100).Sat64(); got != ^uint64(0) {
		t.Fatalf("Pow2(100).Sat64() = %d, want saturation", got)
	}
	if got := One.Not().And(U128{Hi: 5, Lo: 7}); got != (U128{Hi: 5, Lo: 6}) {
		t.Fatalf("^1 & {5,7} = %v", got)
	}
}
