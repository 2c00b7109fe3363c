// Package addrmath is allot's one 128-bit integer type for IP addresses and counts of them:
// the allocator's offsets (core/allocator), block carving (core/blockalloc) and address sets
// (core/addrset) all use it. IPv4 addresses use the low 32 bits, so arithmetic never crosses
// from one family into the other as long as callers stay inside one family (each of those
// packages checks the family before converting).
//
// It is not go4.org/netipx, although addrset's ranges are what netipx.IPRange models: netipx
// keeps its uint128 unexported and its IPSet cannot count or index addresses, which shared
// pools and the allocator need; its IPRange prints a single address as "a-a" and drops zones
// where allot writes "a" and refuses them (the forms stored in SharedIPPool and AllotSubnet
// status). Its arithmetic (Cmp, Add64, Sub, ...) is small value methods the compiler inlines,
// which the allocator's AllocateNext/Release path relies on (BenchmarkAllocateRelease).
package addrmath

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// U128 is an address (or a count of addresses) as a 128-bit unsigned integer.
type U128 struct{ Hi, Lo uint64 }

// FromAddr converts an address; an IPv4 address maps to its 32-bit value.
func FromAddr(a netip.Addr) U128 {
	if a.Is4() {
		b := a.As4()
		return U128{Lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return U128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// Addr converts back to an address of the given family.
func (u U128) Addr(is4 bool) netip.Addr {
	if is4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(u.Lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.Hi)
	binary.BigEndian.PutUint64(b[8:], u.Lo)
	return netip.AddrFrom16(b)
}

// Cmp compares u and v (-1, 0, 1).
func (u U128) Cmp(v U128) int {
	switch {
	case u.Hi < v.Hi:
		return -1
	case u.Hi > v.Hi:
		return 1
	case u.Lo < v.Lo:
		return -1
	case u.Lo > v.Lo:
		return 1
	}
	return 0
}

// Add64 returns u+x (wrapping).
func (u U128) Add64(x uint64) U128 {
	lo, c := bits.Add64(u.Lo, x, 0)
	return U128{u.Hi + c, lo}
}

// Add returns u+v (wrapping).
func (u U128) Add(v U128) U128 {
	lo, c := bits.Add64(u.Lo, v.Lo, 0)
	hi, _ := bits.Add64(u.Hi, v.Hi, c)
	return U128{hi, lo}
}

// Sub returns u-v (wrapping).
func (u U128) Sub(v U128) U128 {
	lo, b := bits.Sub64(u.Lo, v.Lo, 0)
	hi, _ := bits.Sub64(u.Hi, v.Hi, b)
	return U128{hi, lo}
}

// Sat64 saturates u to a uint64.
func (u U128) Sat64() uint64 {
	if u.Hi != 0 {
		return ^uint64(0)
	}
	return u.Lo
}

// HostMask returns the mask of the low n bits (0 <= n <= 128).
func HostMask(n int) U128 {
	switch {
	case n <= 0:
		return U128{}
	case n < 64:
		return U128{0, 1<<uint(n) - 1}
	case n == 64:
		return U128{0, ^uint64(0)}
	case n < 128:
		return U128{1<<uint(n-64) - 1, ^uint64(0)}
	}
	return U128{^uint64(0), ^uint64(0)}
}

// LastOf returns the last address of a prefix.
func LastOf(p netip.Prefix) netip.Addr {
	p = p.Masked()
	b := FromAddr(p.Addr())
	m := HostMask(p.Addr().BitLen() - p.Bits())
	return U128{b.Hi | m.Hi, b.Lo | m.Lo}.Addr(p.Addr().Is4())
}

// And is u & v.
func (u U128) And(v U128) U128 { return U128{u.Hi & v.Hi, u.Lo & v.Lo} }

// Not is ^u.
func (u U128) Not() U128 { return U128{^u.Hi, ^u.Lo} }

// One is 1.
var One = U128{Lo: 1}

// Pow2 is 2^n for 0 <= n <= 127.
func Pow2(n int) U128 {
	if n >= 64 {
		return U128{Hi: 1 << (n - 64)}
	}
	return U128{Lo: 1 << n}
}

// Shr is u >> n for 0 <= n <= 128.
func (u U128) Shr(n int) U128 {
	switch {
	case n >= 128:
		return U128{}
	case n >= 64:
		return U128{Lo: u.Hi >> (n - 64)}
	case n == 0:
		return u
	}
	return U128{Hi: u.Hi >> n, Lo: u.Lo>>n | u.Hi<<(64-n)}
}
