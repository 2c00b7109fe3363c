package allocator

import (
	"errors"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/addrset"
	"github.com/allot-ipam/allot/core/internal/addrmath"
	"github.com/allot-ipam/allot/sdk/policy"
)

func pfx(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func rng(t testing.TB, ss ...string) []addrset.Range {
	t.Helper()
	out := make([]addrset.Range, len(ss))
	for i, s := range ss {
		r, err := ParseRange(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = r
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func mustNew(t testing.TB, cfg Config) *Pool {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func check(t testing.TB, p *Pool) {
	t.Helper()
	if err := p.checkInvariants(); err != nil {
		t.Fatalf("invariants: %v", err)
	}
}

// drain calls AllocateNext until ErrExhausted (at most limit times).
func drain(t *testing.T, p *Pool, limit int) []netip.Addr {
	t.Helper()
	var got []netip.Addr
	for range limit {
		a, err := p.AllocateNext()
		if errors.Is(err, ErrExhausted) {
			return got
		}
		if err != nil {
			t.Fatalf("AllocateNext: %v", err)
		}
		got = append(got, a)
		check(t, p)
	}
	return got
}

func TestAllocateNextTable(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		usable  uint64
		family  policy.Family
		first   []string // expected prefix of the AllocateNext sequence
		last    string   // expected last address before exhaustion ("" = don't exhaust)
		limit   int      // how many to draw at most
		wantAll []string // exact full sequence, if given
	}{
		{name: "v4 /32", cfg: Config{CIDRs: pfx("10.0.0.7/32")}, usable: 1, family: policy.IPv4, wantAll: []string{"10.0.0.7"}},
		{name: "v4 /31", cfg: Config{CIDRs: pfx("10.0.0.6/31")}, usable: 2, family: policy.IPv4, wantAll: []string{"10.0.0.6", "10.0.0.7"}},
		{name: "v4 /30", cfg: Config{CIDRs: pfx("10.0.0.4/30")}, usable: 2, family: policy.IPv4, wantAll: []string{"10.0.0.5", "10.0.0.6"}},
		{name: "v4 /24", cfg: Config{CIDRs: pfx("10.1.2.0/24")}, usable: 254, family: policy.IPv4,
			first: []string{"10.1.2.1", "10.1.2.2"}, last: "10.1.2.254", limit: 300},
		{name: "v4 /24 gateway", cfg: Config{CIDRs: pfx("10.1.2.0/24"), Gateway: netip.MustParseAddr("10.1.2.1")}, usable: 253, family: policy.IPv4,
			first: []string{"10.1.2.2", "10.1.2.3"}, last: "10.1.2.254", limit: 300},
		{name: "v4 /31 gateway", cfg: Config{CIDRs: pfx("10.0.0.6/31"), Gateway: netip.MustParseAddr("10.0.0.6")}, usable: 1, family: policy.IPv4,
			wantAll: []string{"10.0.0.7"}},
		{name: "v6 /120", cfg: Config{CIDRs: pfx("2001:db8::/120")}, usable: 255, family: policy.IPv6,
			first: []string{"2001:db8::1", "2001:db8::2"}, last: "2001:db8::ff", limit: 300},
		{name: "v6 /128", cfg: Config{CIDRs: pfx("2001:db8::9/128")}, usable: 1, family: policy.IPv6, wantAll: []string{"2001:db8::9"}},
		{name: "v6 /64", cfg: Config{CIDRs: pfx("2001:db8:1:2::/64")}, usable: math.MaxUint64, family: policy.IPv6,
			first: []string{"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2::3"}, limit: 5000},
		{name: "v6 /64 minus one", cfg: Config{CIDRs: pfx("2001:db8::/64"), Gateway: netip.MustParseAddr("2001:db8::1")},
			usable: math.MaxUint64 - 1, family: policy.IPv6, first: []string{"2001:db8::2", "2001:db8::3"}, limit: 10},
		{name: "v6 /64 minus two", cfg: Config{CIDRs: pfx("2001:db8::/64"), Exclude: rng(t, "2001:db8::-2001:db8::1")},
			usable: math.MaxUint64 - 1, family: policy.IPv6, first: []string{"2001:db8::2"}, limit: 10},
		{name: "two v6 /64 saturate", cfg: Config{CIDRs: pfx("2001:db8::/64", "2001:db8:0:1::/64"), Exclude: rng(t, "2001:db8::/65")},
			usable: math.MaxUint64, family: policy.IPv6, first: []string{"2001:db8::8000:0:0:0"}, limit: 10},
		{name: "discontiguous, given out of order", cfg: Config{CIDRs: pfx("192.168.0.5/32", "10.0.1.0/31", "10.0.0.0/30")}, usable: 5, family: policy.IPv4,
			wantAll: []string{"10.0.0.1", "10.0.0.2", "10.0.1.0", "10.0.1.1", "192.168.0.5"}},
		{name: "exclude single", cfg: Config{CIDRs: pfx("10.0.0.0/29"), Exclude: rng(t, "10.0.0.2")}, usable: 5, family: policy.IPv4,
			wantAll: []string{"10.0.0.1", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"}},
		{name: "exclude range", cfg: Config{CIDRs: pfx("10.0.0.0/29"), Exclude: rng(t, "10.0.0.2-10.0.0.5")}, usable: 2, family: policy.IPv4,
			wantAll: []string{"10.0.0.1", "10.0.0.6"}},
		{name: "exclude CIDR", cfg: Config{CIDRs: pfx("10.0.0.0/28"), Exclude: rng(t, "10.0.0.0/29")}, usable: 7, family: policy.IPv4,
			wantAll: []string{"10.0.0.8", "10.0.0.9", "10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"}},
		{name: "exclude overlapping merged", cfg: Config{CIDRs: pfx("10.0.0.0/28"),
			Exclude: rng(t, "10.0.0.3-10.0.0.6", "10.0.0.5-10.0.0.9", "10.0.0.10", "10.0.0.4")}, usable: 6, family: policy.IPv4,
			wantAll: []string{"10.0.0.1", "10.0.0.2", "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"}},
		{name: "exclusion covers a whole CIDR", cfg: Config{CIDRs: pfx("10.0.0.0/30", "10.0.0.8/30"), Exclude: rng(t, "10.0.0.0/30")},
			usable: 2, family: policy.IPv4, wantAll: []string{"10.0.0.9", "10.0.0.10"}},
		{name: "exclusion crosses adjacent CIDRs", cfg: Config{CIDRs: pfx("10.0.0.0/29", "10.0.0.8/29"), Exclude: rng(t, "10.0.0.5-10.0.0.10")},
			usable: 8, family: policy.IPv4, wantAll: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"}},
		{name: "everything excluded", cfg: Config{CIDRs: pfx("2001:db8::/64"), Exclude: rng(t, "2001:db8::/64")}, usable: 0, family: policy.IPv6,
			wantAll: []string{}},
		{name: "exclusion spans chunks", cfg: Config{CIDRs: pfx("10.0.0.0/16"), Exclude: rng(t, "10.0.0.1-10.0.200.255")}, usable: 65536 - 2 - 51455, family: policy.IPv4,
			first: []string{"10.0.201.0", "10.0.201.1"}, last: "10.0.255.254", limit: 70000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, tt.cfg)
			check(t, p)
			if p.Family() != tt.family {
				t.Errorf("Family = %s, want %s", p.Family(), tt.family)
			}
			if st := p.Stats(); st.Usable != tt.usable || st.Used != 0 || st.Free != tt.usable {
				t.Fatalf("Stats = %+v, want usable %d", st, tt.usable)
			}
			limit := tt.limit
			if tt.wantAll != nil {
				limit = len(tt.wantAll) + 1
			}
			got := drain(t, p, limit)
			if tt.wantAll != nil {
				if !slices.Equal(got, addrs(tt.wantAll...)) {
					t.Fatalf("sequence = %v, want %v", got, tt.wantAll)
				}
			}
			if len(got) < len(tt.first) || !slices.Equal(got[:len(tt.first)], addrs(tt.first...)) {
				t.Fatalf("sequence starts %v, want %v", got[:min(len(got), len(tt.first))], tt.first)
			}
			exhausted := tt.wantAll != nil || tt.last != ""
			if tt.last != "" && got[len(got)-1] != netip.MustParseAddr(tt.last) {
				t.Errorf("last = %v, want %v", got[len(got)-1], tt.last)
			}
			if exhausted {
				if uint64(len(got)) != tt.usable {
					t.Errorf("drew %d addresses before exhaustion, usable %d", len(got), tt.usable)
				}
				if _, err := p.AllocateNext(); !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), `"test"`) {
					t.Errorf("after exhaustion: %v", err)
				}
				if st := p.Stats(); st.Free != 0 || st.Utilization() != 1 {
					t.Errorf("Stats after exhaustion = %+v, util %v", st, st.Utilization())
				}
			}
			// Every address drawn is unique, allocated, and listed in order.
			seen := map[netip.Addr]bool{}
			for _, a := range got {
				if seen[a] {
					t.Fatalf("%v handed out twice", a)
				}
				seen[a] = true
				if !p.IsAllocated(a) || !p.Contains(a) {
					t.Fatalf("%v: IsAllocated %v Contains %v", a, p.IsAllocated(a), p.Contains(a))
				}
			}
			var listed []netip.Addr
			p.ForEachAllocated(func(a netip.Addr) bool { listed = append(listed, a); return true })
			sorted := slices.Clone(got)
			slices.SortFunc(sorted, netip.Addr.Compare)
			if !slices.Equal(listed, sorted) {
				t.Fatalf("ForEachAllocated = %v, want %v", listed, sorted)
			}
			// Release everything; the pool is empty again and memory returns.
			for _, a := range got {
				if err := p.Release(a); err != nil {
					t.Fatal(err)
				}
			}
			check(t, p)
			if st := p.Stats(); st.Used != 0 || p.chunkCount() > 1 {
				t.Fatalf("after release: %+v, %d chunks", st, p.chunkCount())
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	v4 := pfx("10.0.0.0/24")
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error
	}{
		{"no name", Config{CIDRs: v4}, []string{"Name"}},
		{"no CIDRs", Config{Name: "p"}, []string{`pool "p"`, "CIDRs", "at least one"}},
		{"invalid prefix", Config{Name: "p", CIDRs: []netip.Prefix{{}}}, []string{"CIDRs[0]", "invalid"}},
		{"unmasked", Config{Name: "p", CIDRs: pfx("10.0.0.5/24")}, []string{"CIDRs[0] 10.0.0.5/24", "10.0.0.0/24"}},
		{"mapped", Config{Name: "p", CIDRs: pfx("::ffff:10.0.0.0/120")}, []string{"CIDRs[0]", "IPv4-mapped"}},
		{"mixed family", Config{Name: "p", CIDRs: pfx("10.0.0.0/24", "2001:db8::/64")}, []string{"CIDRs[1] 2001:db8::/64", "family"}},
		{"overlap", Config{Name: "p", CIDRs: pfx("10.0.0.0/24", "192.168.0.0/24", "10.0.0.128/25")},
			[]string{"CIDRs[2] 10.0.0.128/25 overlaps CIDRs[0] 10.0.0.0/24"}},
		{"duplicate", Config{Name: "p", CIDRs: pfx("10.0.0.0/24", "10.0.0.0/24")}, []string{"CIDRs[1]", "overlaps CIDRs[0]"}},
		{"exclusion outside", Config{Name: "p", CIDRs: v4, Exclude: rng(t, "10.0.0.1", "10.0.1.5")},
			[]string{"Exclude[1] 10.0.1.5", "not inside any CIDR"}},
		{"exclusion sticks out", Config{Name: "p", CIDRs: v4, Exclude: rng(t, "10.0.0.250-10.0.1.2")},
			[]string{"Exclude[0] 10.0.0.250-10.0.1.2", "10.0.1.0 is not inside"}},
		{"exclusion across a gap", Config{Name: "p", CIDRs: pfx("10.0.0.0/30", "10.0.0.8/30"), Exclude: rng(t, "10.0.0.2-10.0.0.9")},
			[]string{"Exclude[0]", "10.0.0.4 is not inside"}},
		{"exclusion family", Config{Name: "p", CIDRs: v4, Exclude: rng(t, "2001:db8::1")}, []string{"Exclude[0] 2001:db8::1", "family"}},
		{"exclusion reversed", Config{Name: "p", CIDRs: v4, Exclude: []addrset.Range{{From: netip.MustParseAddr("10.0.0.9"), To: netip.MustParseAddr("10.0.0.1")}}},
			[]string{"Exclude[0]", "From is after To"}},
		{"exclusion zero", Config{Name: "p", CIDRs: v4, Exclude: []addrset.Range{{}}}, []string{"Exclude[0]", "must both be set"}},
		{"gateway outside", Config{Name: "p", CIDRs: v4, Gateway: netip.MustParseAddr("10.0.1.1")}, []string{"Gateway 10.0.1.1", "not inside"}},
		{"gateway family", Config{Name: "p", CIDRs: v4, Gateway: netip.MustParseAddr("2001:db8::1")}, []string{"Gateway 2001:db8::1"}},
		{"gateway network", Config{Name: "p", CIDRs: v4, Gateway: netip.MustParseAddr("10.0.0.0")}, []string{"Gateway 10.0.0.0", "network or broadcast"}},
		{"gateway broadcast", Config{Name: "p", CIDRs: v4, Gateway: netip.MustParseAddr("10.0.0.255")}, []string{"Gateway 10.0.0.255"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			if err == nil {
				t.Fatalf("New succeeded: %v", p)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestAllocateErrors(t *testing.T) {
	p := mustNew(t, Config{Name: "blue", CIDRs: pfx("10.0.0.0/24", "10.9.0.0/31"),
		Exclude: rng(t, "10.0.0.100", "10.0.0.200-10.0.0.210"), Gateway: netip.MustParseAddr("10.0.0.1")})
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	if err := p.Allocate(a("10.0.0.50")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		op   func() error
		is   error
		want []string
	}{
		{"outside", func() error { return p.Allocate(a("10.0.1.1")) }, ErrOutOfRange, []string{`pool "blue"`, "allocate 10.0.1.1", "not inside"}},
		{"other family", func() error { return p.Allocate(a("2001:db8::1")) }, ErrOutOfRange, []string{"2001:db8::1"}},
		{"mapped", func() error { return p.Allocate(a("::ffff:10.0.0.9")) }, ErrOutOfRange, []string{"::ffff:10.0.0.9"}},
		{"zero addr", func() error { return p.Allocate(netip.Addr{}) }, ErrOutOfRange, []string{"invalid IP"}},
		{"network", func() error { return p.Allocate(a("10.0.0.0")) }, ErrExcluded, []string{"10.0.0.0", "network address of 10.0.0.0/24"}},
		{"broadcast", func() error { return p.Allocate(a("10.0.0.255")) }, ErrExcluded, []string{"10.0.0.255", "broadcast address of 10.0.0.0/24"}},
		{"gateway", func() error { return p.Allocate(a("10.0.0.1")) }, ErrExcluded, []string{"10.0.0.1", "gateway"}},
		{"excluded single", func() error { return p.Allocate(a("10.0.0.100")) }, ErrExcluded, []string{"Exclude[0] 10.0.0.100"}},
		{"excluded range", func() error { return p.Allocate(a("10.0.0.205")) }, ErrExcluded, []string{"allocate 10.0.0.205", "Exclude[1] 10.0.0.200-10.0.0.210"}},
		{"in use", func() error { return p.Allocate(a("10.0.0.50")) }, ErrInUse, []string{`pool "blue"`, "10.0.0.50"}},
		{"release free", func() error { return p.Release(a("10.0.0.51")) }, ErrNotAllocated, []string{"release 10.0.0.51"}},
		{"release free chunk", func() error { return p.Release(a("10.9.0.1")) }, ErrNotAllocated, []string{"release 10.9.0.1"}},
		{"release excluded", func() error { return p.Release(a("10.0.0.100")) }, ErrNotAllocated, []string{"Exclude[0]"}},
		{"release network", func() error { return p.Release(a("10.0.0.0")) }, ErrNotAllocated, []string{"network address"}},
		{"release outside", func() error { return p.Release(a("10.0.1.1")) }, ErrOutOfRange, []string{"release 10.0.1.1"}},
		{"/31 both ends usable", func() error { return p.Allocate(a("10.9.0.0")) }, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.op()
			if !errors.Is(err, tt.is) || (tt.is == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.is)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			check(t, p)
		})
	}
	if st := p.Stats(); st.Used != 2 || st.Usable != 254-1-1-11+2 {
		t.Errorf("Stats = %+v", st)
	}
	if p.Name() != "blue" {
		t.Errorf("Name = %q", p.Name())
	}
	for _, c := range []struct {
		a    string
		want bool
	}{{"10.0.0.0", true}, {"10.0.0.255", true}, {"10.9.0.1", true}, {"10.9.0.2", false}, {"10.0.1.0", false}, {"::ffff:10.0.0.1", false}} {
		if got := p.Contains(a(c.a)); got != c.want {
			t.Errorf("Contains(%s) = %v", c.a, got)
		}
	}
	if p.IsAllocated(a("10.0.0.100")) || p.IsAllocated(a("10.0.0.0")) || !p.IsAllocated(a("10.0.0.50")) || p.IsAllocated(a("1.1.1.1")) {
		t.Error("IsAllocated wrong")
	}
}

// Prefixes with more than 64 host bits use only their first 2^64 addresses.
func TestHugePrefix(t *testing.T) {
	for _, cidr := range []string{"2001:db8::/32", "::/0", "2001:db8::/63"} {
		t.Run(cidr, func(t *testing.T) {
			pf := netip.MustParsePrefix(cidr)
			base := addrmath.FromAddr(pf.Addr())
			edge := base.Add(addrmath.U128{Hi: 1}) // first address beyond 2^64
			lastUsed := base.Add64(math.MaxUint64)
			p := mustNew(t, Config{CIDRs: []netip.Prefix{pf},
				// An exclusion straddling the 2^64 boundary is accepted and clipped.
				Exclude: []addrset.Range{{From: lastUsed.Sub(addrmath.U128{Lo: 9}).Addr(false), To: edge.Add64(5).Addr(false)}}})
			// 2^64 addresses, minus 10 excluded, minus the subnet-router anycast address.
			if st := p.Stats(); st.Usable != math.MaxUint64-10 {
				t.Fatalf("Usable = %d", st.Usable)
			}
			got, err := p.AllocateNext()
			if err != nil || got != pf.Addr().Next() {
				t.Fatalf("AllocateNext = %v, %v", got, err)
			}
			err = p.Allocate(edge.Addr(false))
			if !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), "first 2^64") {
				t.Fatalf("beyond 2^64: %v", err)
			}
			if !p.Contains(edge.Addr(false)) {
				t.Error("Contains beyond 2^64 should be true (inside the CIDR)")
			}
			if err := p.Allocate(lastUsed.Addr(false)); !errors.Is(err, ErrExcluded) {
				t.Fatalf("last used: %v", err)
			}
			justBefore := lastUsed.Sub(addrmath.U128{Lo: 10})
			if err := p.Allocate(justBefore.Addr(false)); err != nil {
				t.Fatal(err)
			}
			// Put the cursor on the very last usable offset; next-fit must wrap without overflow.
			p.curOff = math.MaxUint64 - 10
			if got, err := p.AllocateNext(); err != nil || got != base.Add64(2).Addr(false) {
				t.Fatalf("wrapped AllocateNext = %v, %v", got, err)
			}
			check(t, p)
		})
	}
}

func TestNextFitAndReuse(t *testing.T) {
	p := mustNew(t, Config{CIDRs: pfx("10.0.0.0/29")}) // .1-.6
	a := drain(t, p, 3)                                // .1 .2 .3
	if err := p.Release(a[0]); err != nil {
		t.Fatal(err)
	}
	// Next-fit: .4 before the just-released .1.
	if got, _ := p.AllocateNext(); got != netip.MustParseAddr("10.0.0.4") {
		t.Fatalf("got %v, want 10.0.0.4", got)
	}
	rest := drain(t, p, 10)
	if !slices.Equal(rest, addrs("10.0.0.5", "10.0.0.6", "10.0.0.1")) {
		t.Fatalf("rest = %v", rest)
	}
	// Release then re-allocate the same address specifically.
	if err := p.Release(netip.MustParseAddr("10.0.0.3")); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(netip.MustParseAddr("10.0.0.3")); !errors.Is(err, ErrNotAllocated) {
		t.Fatalf("double release: %v", err)
	}
	if err := p.Allocate(netip.MustParseAddr("10.0.0.3")); err != nil {
		t.Fatal(err)
	}
	check(t, p)
}

func TestForEachAllocatedStops(t *testing.T) {
	p := mustNew(t, Config{CIDRs: pfx("2001:db8::/64", "2001:db8:0:1::/120"), Exclude: rng(t, "2001:db8::5-2001:db8::7")})
	for _, s := range []string{"2001:db8:0:1::3", "2001:db8::ffff:ffff:0:1", "2001:db8::4", "2001:db8::8", "2001:db8:0:1::1"} {
		if err := p.Allocate(netip.MustParseAddr(s)); err != nil {
			t.Fatal(err)
		}
	}
	var got []netip.Addr
	p.ForEachAllocated(func(a netip.Addr) bool { got = append(got, a); return len(got) < 4 })
	want := addrs("2001:db8::4", "2001:db8::8", "2001:db8::ffff:ffff:0:1", "2001:db8:0:1::1")
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// Same calls, same answers: nothing depends on map order or randomness.
func TestDeterministic(t *testing.T) {
	run := func() []netip.Addr {
		p := mustNew(t, Config{CIDRs: pfx("10.0.0.0/20", "10.2.0.0/22"), Exclude: rng(t, "10.0.3.0/24")})
		var out []netip.Addr
		for i := range 6000 {
			a, err := p.AllocateNext()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, a)
			if i%3 == 0 {
				if err := p.Release(out[i/2]); err != nil && !errors.Is(err, ErrNotAllocated) {
					t.Fatal(err)
				}
			}
		}
		p.ForEachAllocated(func(a netip.Addr) bool { out = append(out, a); return true })
		return out
	}
	if a, b := run(), run(); !slices.Equal(a, b) {
		t.Fatal("two identical runs differ")
	}
}

// Fill a multi-chunk pool completely, punch holes, refill: exercises the
// full-chunk runs and the wrap-around.
func TestFillHolesRefill(t *testing.T) {
	p := mustNew(t, Config{CIDRs: pfx("10.0.0.0/18"), Exclude: rng(t, "10.0.16.0/20")}) // 4 chunks, one fully excluded
	all := drain(t, p, 1<<20)
	if uint64(len(all)) != p.Stats().Usable || p.Stats().Usable != 16384-4096-2 {
		t.Fatalf("drew %d, usable %d", len(all), p.Stats().Usable)
	}
	var holes []netip.Addr
	for i := len(all) - 1; i >= 0; i -= 997 {
		holes = append(holes, all[i])
		if err := p.Release(all[i]); err != nil {
			t.Fatal(err)
		}
		check(t, p)
	}
	got := drain(t, p, 1<<20)
	slices.SortFunc(got, netip.Addr.Compare)
	slices.SortFunc(holes, netip.Addr.Compare)
	if !slices.Equal(got, holes) {
		t.Fatalf("refill got %v, want %v", got, holes)
	}
}
