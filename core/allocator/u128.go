package allocator

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// u128 is an address as a 128-bit unsigned integer. IPv4 addresses use their
// IPv4-mapped IPv6 form (::ffff:a.b.c.d), which keeps the ordering and makes
// all arithmetic family-agnostic.
type u128 struct{ hi, lo uint64 }

func fromAddr(a netip.Addr) u128 {
	if a.Is4() { // cheaper than As16 for the common case
		b := a.As4()
		return u128{0, 0xffff<<32 | uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func (u u128) addr(is4 bool) netip.Addr {
	if is4 {
		v := uint32(u.lo)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.hi)
	binary.BigEndian.PutUint64(b[8:], u.lo)
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

func (u u128) add64(x uint64) u128 {
	lo, c := bits.Add64(u.lo, x, 0)
	return u128{u.hi + c, lo}
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

// hostMask returns the mask of the low n bits (0 <= n <= 128).
func hostMask(n int) u128 {
	switch {
	case n <= 0:
		return u128{}
	case n < 64:
		return u128{0, 1<<uint(n) - 1}
	case n == 64:
		return u128{0, ^uint64(0)}
	case n < 128:
		return u128{1<<uint(n-64) - 1, ^uint64(0)}
	}
	return u128{^uint64(0), ^uint64(0)}
}

// lastOf returns the last address of a masked prefix.
func lastOf(p netip.Prefix) u128 {
	b := fromAddr(p.Addr())
	m := hostMask(p.Addr().BitLen() - p.Bits())
	return u128{b.hi | m.hi, b.lo | m.lo}
}

// sat64 saturates a 128-bit count to uint64.
func sat64(u u128) uint64 {
	if u.hi != 0 {
		return ^uint64(0)
	}
	return u.lo
}
