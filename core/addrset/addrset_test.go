package addrset

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	"pgregory.net/rapid"
)

func TestParse(t *testing.T) {
	s, err := Parse("spec.ipv4.ips", policy.IPv4, []string{"10.0.0.10-10.0.0.20", "10.0.0.5", "10.0.0.21", "10.0.0.15-10.0.0.16"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.String(); got != "10.0.0.5,10.0.0.10-10.0.0.21" {
		t.Fatalf("merged = %s", got)
	}
	if s.Size() != 13 {
		t.Fatalf("size = %d", s.Size())
	}
	for _, tc := range []struct {
		items []string
		fam   policy.Family
		want  string
	}{
		{[]string{"10.0.0.1", "bogus"}, policy.IPv4, `spec.ipv4.ips[1]: "bogus" is not an IP address`},
		{[]string{"fd00::1"}, policy.IPv4, `spec.ipv4.ips[0]: "fd00::1" is not an IPv4 address`},
		{[]string{"10.0.0.9-10.0.0.1"}, policy.IPv4, `spec.ipv4.ips[0]: "10.0.0.9-10.0.0.1": the range ends before it starts`},
		{[]string{"::ffff:10.0.0.1"}, policy.IPv6, `IPv4-mapped`},
		{[]string{"fe80::1%eth0"}, policy.IPv6, `zone`},
		{[]string{"10.0.0.1-fd00::1"}, policy.IPv4, `not an IPv4 address`},
	} {
		_, err := Parse("spec.ipv4.ips", tc.fam, tc.items)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) err = %v, want %q", tc.items, err, tc.want)
		}
	}
}

func TestParseMixed(t *testing.T) {
	v4, v6, err := ParseMixed("spec.ips", []string{"fd00::1-fd00::3", "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if v4.Size() != 1 || v6.Size() != 3 || v4.Family() != policy.IPv4 || v6.Family() != policy.IPv6 {
		t.Fatalf("v4=%s v6=%s", v4, v6)
	}
}

func TestEdges(t *testing.T) {
	all4 := FromPrefix(netip.MustParsePrefix("0.0.0.0/0"))
	if all4.Size() != 1<<32 {
		t.Fatalf("size = %d", all4.Size())
	}
	top := FromRanges(policy.IPv4, []Range{{netip.MustParseAddr("255.255.255.254"), netip.MustParseAddr("255.255.255.255")}})
	if got := all4.Subtract(top); got.Size() != 1<<32-2 {
		t.Fatalf("subtract top: %s", got)
	}
	all6 := FromPrefix(netip.MustParsePrefix("::/0"))
	if all6.Size() != ^uint64(0) {
		t.Fatalf("v6 size should saturate")
	}
	if a, ok := all6.Nth(5); !ok || a != netip.MustParseAddr("::5") {
		t.Fatalf("Nth = %v %v", a, ok)
	}
	var empty Set
	if !empty.Union(top).Contains(netip.MustParseAddr("255.255.255.255")) {
		t.Fatal("empty ∪ top")
	}
}

// model is a brute-force set of offsets inside 10.0.0.0/24.
func genSet(t *rapid.T, label string) (Set, map[uint8]bool) {
	n := rapid.IntRange(0, 6).Draw(t, label+"n")
	m := map[uint8]bool{}
	var rs []Range
	for i := 0; i < n; i++ {
		a := rapid.Uint8().Draw(t, label+"a")
		l := rapid.Uint8Range(0, 20).Draw(t, label+"l")
		b := a
		if int(a)+int(l) <= 255 {
			b = a + l
		}
		for x := int(a); x <= int(b); x++ {
			m[uint8(x)] = true
		}
		rs = append(rs, Range{off(a), off(b)})
	}
	return FromRanges(policy.IPv4, rs), m
}

func off(x uint8) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, x}) }

func TestSetProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, ms := genSet(t, "s")
		o, mo := genSet(t, "o")
		check := func(name string, got Set, want func(uint8) bool) {
			var list []uint8
			for x := 0; x < 256; x++ {
				if want(uint8(x)) {
					list = append(list, uint8(x))
				}
				if got.Contains(off(uint8(x))) != want(uint8(x)) {
					t.Fatalf("%s: Contains(%d) wrong; set %s", name, x, got)
				}
			}
			if got.Size() != uint64(len(list)) {
				t.Fatalf("%s: size %d want %d", name, got.Size(), len(list))
			}
			for i, x := range list {
				a, ok := got.Nth(uint64(i))
				if !ok || a != off(x) {
					t.Fatalf("%s: Nth(%d) = %v", name, i, a)
				}
				if idx, ok := got.Index(a); !ok || idx != uint64(i) {
					t.Fatalf("%s: Index(%v) = %d", name, a, idx)
				}
			}
			// Canonical: ranges sorted, disjoint, not adjacent; Strings round-trips.
			rs := got.Ranges()
			for i := 1; i < len(rs); i++ {
				if !rs[i-1].To.Next().Less(rs[i].From) {
					t.Fatalf("%s: ranges not canonical: %v", name, rs)
				}
			}
			back, err := Parse("x", policy.IPv4, got.Strings())
			if err != nil || back.String() != got.String() {
				t.Fatalf("%s: round trip %s -> %s (%v)", name, got, back, err)
			}
			if len(list) > 0 {
				start := rapid.Uint64Range(0, 1000).Draw(t, "start")
				var seen []uint8
				got.Each(start, func(a netip.Addr) bool { seen = append(seen, a.As4()[3]); return true })
				if len(seen) != len(list) || seen[0] != list[start%uint64(len(list))] {
					t.Fatalf("%s: Each from %d = %v", name, start, seen)
				}
				slices.Sort(seen)
				if !slices.Equal(seen, list) {
					t.Fatalf("%s: Each visited %v", name, seen)
				}
			}
		}
		check("s", s, func(x uint8) bool { return ms[x] })
		check("union", s.Union(o), func(x uint8) bool { return ms[x] || mo[x] })
		check("intersect", s.Intersect(o), func(x uint8) bool { return ms[x] && mo[x] })
		check("subtract", s.Subtract(o), func(x uint8) bool { return ms[x] && !mo[x] })
		any := false
		for x := range ms {
			any = any || mo[x]
		}
		if s.Overlaps(o) != any {
			t.Fatalf("Overlaps = %v want %v", s.Overlaps(o), any)
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add("10.0.0.1-10.0.0.9,10.0.0.4")
	f.Add("fd00::1-fd00::ff,::")
	f.Fuzz(func(t *testing.T, in string) {
		items := strings.Split(in, ",")
		for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
			s, err := Parse("ips", fam, items)
			if err != nil {
				continue
			}
			back, err := Parse("ips", fam, s.Strings())
			if err != nil || back.String() != s.String() || back.Size() != s.Size() {
				t.Fatalf("round trip of %q: %s vs %s (%v)", in, s, back, err)
			}
		}
	})
}

func TestPrefixes(t *testing.T) {
	for _, tc := range []struct {
		fam   policy.Family
		items []string
		want  string
	}{
		{policy.IPv4, []string{"10.0.0.0-10.0.0.255"}, "10.0.0.0/24"},
		{policy.IPv4, []string{"10.0.0.1-10.0.0.6"}, "10.0.0.1/32 10.0.0.2/31 10.0.0.4/31 10.0.0.6/32"},
		{policy.IPv4, []string{"10.0.0.0-10.0.0.99", "10.0.1.0-10.0.1.255"}, "10.0.0.0/26 10.0.0.64/27 10.0.0.96/30 10.0.1.0/24"},
		{policy.IPv4, []string{"0.0.0.0-255.255.255.255"}, "0.0.0.0/0"},
		{policy.IPv4, []string{"255.255.255.254-255.255.255.255"}, "255.255.255.254/31"},
		{policy.IPv6, []string{"fd00::-fd00::ffff", "fd00::1:1"}, "fd00::/112 fd00::1:1/128"},
		{policy.IPv6, []string{"::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, "::/0"},
	} {
		s, err := Parse("x", tc.fam, tc.items)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range s.Prefixes() {
			got = append(got, p.String())
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%v: %s; want %s", tc.items, g, tc.want)
		}
	}
}

// TestPrefixesProperty: the prefixes cover exactly the set, in order, without overlap.
func TestPrefixesProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var rs []Range
		for range rapid.IntRange(0, 5).Draw(t, "n") {
			a := rapid.Uint32Range(0, 4096).Draw(t, "a")
			b := a + rapid.Uint32Range(0, 600).Draw(t, "len")
			rs = append(rs, Range{v4(a), v4(b)})
		}
		s := FromRanges(policy.IPv4, rs)
		var back []Range
		var size uint64
		for i, p := range s.Prefixes() {
			if p.Masked() != p {
				t.Fatalf("prefix %d %s not aligned", i, p)
			}
			back = append(back, Range{p.Addr(), lastOf(p)})
			size += 1 << (32 - p.Bits())
		}
		if got := FromRanges(policy.IPv4, back); got.String() != s.String() || size != s.Size() {
			t.Fatalf("prefixes cover %s (%d addresses); want %s (%d)", got, size, s, s.Size())
		}
	})
}

func v4(n uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
}

func lastOf(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n |= (1<<(32-p.Bits()) - 1)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}
