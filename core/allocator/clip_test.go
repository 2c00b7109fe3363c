package allocator

import (
	"testing"

	"github.com/allot-ipam/allot/core/internal/addrmath"
)

func TestClip(t *testing.T) {
	u := func(lo uint64) addrmath.U128 { return addrmath.U128{Lo: lo} }
	for _, tc := range []struct {
		name        string
		from, to    addrmath.U128
		first, last addrmath.U128
		spanLast    uint64
		want        interval
		ok          bool
	}{
		{"inside", u(12), u(14), u(10), u(20), 10, interval{2, 4}, true},
		{"before", u(1), u(9), u(10), u(20), 10, interval{}, false},
		{"after", u(21), u(30), u(10), u(20), 10, interval{}, false},
		{"over both ends", u(5), u(25), u(10), u(20), 10, interval{0, 10}, true},
		{"capped at the span's last offset", u(12), u(20), u(10), u(20), 5, interval{2, 5}, true},
		{"beyond the span's last offset", u(17), u(20), u(10), u(20), 5, interval{}, false},
		{"beyond 2^64", addrmath.U128{Hi: 1, Lo: 3}, addrmath.U128{Hi: 1, Lo: 4}, u(0), addrmath.U128{Hi: 2, Lo: 0}, ^uint64(0), interval{}, false},
		{"to beyond 2^64", u(7), addrmath.U128{Hi: 1, Lo: 4}, u(0), addrmath.U128{Hi: 2, Lo: 0}, ^uint64(0), interval{7, ^uint64(0)}, true},
	} {
		got, ok := clip(tc.from, tc.to, tc.first, tc.last, tc.spanLast)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: clip = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
