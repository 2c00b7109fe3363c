package blockalloc

import (
	"math/bits"
	"net/netip"
)

// u128 is an address as a 128-bit unsigned integer; IPv4 addresses use the low 32 bits.
type u128 struct{ hi, lo uint64 }

func fromAddr(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])}
	}
	b := a.As16()
	var u u128
	for i := 0; i < 8; i++ {
		u.hi = u.hi<<8 | uint64(b[i])
		u.lo = u.lo<<8 | uint64(b[i+8])
	}
	return u
}

func (u u128) addr(is4 bool) netip.Addr {
	if is4 {
		return netip.AddrFrom4([4]byte{byte(u.lo >> 24), byte(u.lo >> 16), byte(u.lo >> 8), byte(u.lo)})
	}
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[7-i] = byte(u.hi >> (8 * i))
		b[15-i] = byte(u.lo >> (8 * i))
	}
	return netip.AddrFrom16(b)
}

func (u u128) cmp(v u128) int {
	switch {
	case u.hi < v.hi:
		return -1
	case u.hi > v.hi:
		return 1
	case u.lo < v.lo:
		return -1
	case u.lo > v.lo:
		return 1
	}
	return 0
}

func (u u128) add(v u128) u128 {
	lo, c := bits.Add64(u.lo, v.lo, 0)
	hi, _ := bits.Add64(u.hi, v.hi, c)
	return u128{hi, lo}
}

func (u u128) sub(v u128) u128 {
	lo, b := bits.Sub64(u.lo, v.lo, 0)
	hi, _ := bits.Sub64(u.hi, v.hi, b)
	return u128{hi, lo}
}

func (u u128) and(v u128) u128 { return u128{u.hi & v.hi, u.lo & v.lo} }
func (u u128) not() u128       { return u128{^u.hi, ^u.lo} }

var one = u128{lo: 1}

// pow2 is 2^n for 0 <= n <= 127.
func pow2(n int) u128 {
	if n >= 64 {
		return u128{hi: 1 << (n - 64)}
	}
	return u128{lo: 1 << n}
}

// shr is u >> n for 0 <= n <= 128.
func (u u128) shr(n int) u128 {
	switch {
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{lo: u.hi >> (n - 64)}
	case n == 0:
		return u
	}
	return u128{hi: u.hi >> n, lo: u.lo>>n | u.hi<<(64-n)}
}

// sat64 is u as a uint64, saturating.
func (u u128) sat64() uint64 {
	if u.hi != 0 {
		return ^uint64(0)
	}
	return u.lo
}
