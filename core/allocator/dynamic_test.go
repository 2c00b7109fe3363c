package allocator

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/allot-ipam/allot/sdk/policy"
)

func TestEmptyPool(t *testing.T) {
	p := mustNew(t, Config{Family: policy.IPv4})
	check(t, p)
	if _, err := p.AllocateNext(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("AllocateNext on empty pool: %v", err)
	}
	if st := p.Stats(); st != (Stats{}) {
		t.Fatalf("Stats %+v", st)
	}
	if err := p.Allocate(netip.MustParseAddr("10.0.0.1")); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Allocate: %v", err)
	}
	if err := p.AddCIDR(netip.MustParsePrefix("10.0.0.0/30")); err != nil {
		t.Fatal(err)
	}
	check(t, p)
	got := drain(t, p, 10)
	if want := addrs("10.0.0.1", "10.0.0.2"); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestNewFamily(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "a", Family: "5"}, `Family: "5" is not "ipv4" or "ipv6"`},
		{Config{Name: "a"}, "CIDRs: at least one CIDR is required"},
		{Config{Name: "a", Family: policy.IPv6, CIDRs: pfx("10.0.0.0/24")}, "Family: ipv6 does not match"},
		{Config{Name: "a", Family: policy.IPv4, Gateway: netip.MustParseAddr("10.0.0.1")}, "a pool without CIDRs"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestAddCIDRErrors(t *testing.T) {
	p := mustNew(t, Config{CIDRs: pfx("10.0.0.0/24")})
	for _, tc := range []struct {
		cidr string
		want string
		is   error
	}{
		{"10.0.0.0/24", "already in the pool", ErrInUse},
		{"10.0.0.128/25", "overlaps 10.0.0.0/24", nil},
		{"10.0.0.0/16", "overlaps 10.0.0.0/24", nil},
		{"fd00::/120", "not of the pool's family", nil},
		{"::ffff:10.1.0.0/120", "IPv4-mapped", nil},
	} {
		err := p.AddCIDR(netip.MustParsePrefix(tc.cidr))
		if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("AddCIDR(%s) = %v, want %q", tc.cidr, err, tc.want)
		}
	}
	if err := p.AddCIDR(netip.PrefixFrom(netip.MustParseAddr("10.1.0.1"), 24)); err == nil || !strings.Contains(err.Error(), "host bits") {
		t.Errorf("unmasked: %v", err)
	}
	check(t, p)
	if got := p.CIDRs(); !slices.Equal(got, pfx("10.0.0.0/24")) {
		t.Fatalf("CIDRs after failed adds: %v", got)
	}
}

func TestAddCIDRKeepsOrderAndExclusions(t *testing.T) {
	p := mustNew(t, Config{
		CIDRs:   pfx("10.0.1.0/29"),
		Exclude: rng(t, "10.0.1.2"),
		Gateway: netip.MustParseAddr("10.0.1.1"),
	})
	// The gateway and exclusion of the configuration do not fall in the new CIDRs.
	for _, c := range []string{"10.0.2.0/30", "10.0.0.0/30"} {
		if err := p.AddCIDR(netip.MustParsePrefix(c)); err != nil {
			t.Fatal(err)
		}
		check(t, p)
	}
	if got, want := p.CIDRs(), pfx("10.0.0.0/30", "10.0.1.0/29", "10.0.2.0/30"); !slices.Equal(got, want) {
		t.Fatalf("CIDRs %v, want %v", got, want)
	}
	// 2 + (6-2) + 2 usable.
	if st := p.Stats(); st.Usable != 8 {
		t.Fatalf("usable %d, want 8", st.Usable)
	}
	got := drain(t, p, 20)
	want := addrs("10.0.0.1", "10.0.0.2", "10.0.1.3", "10.0.1.4", "10.0.1.5", "10.0.1.6", "10.0.2.1", "10.0.2.2")
	slices.SortFunc(got, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		t.Fatalf("drained %v, want %v", got, want)
	}
}

func TestAddCIDRExclusionReachesIntoNewCIDR(t *testing.T) {
	// An exclusion of the configuration covers part of a block that arrives later.
	p := mustNew(t, Config{Family: policy.IPv6})
	if err := p.AddCIDR(netip.MustParsePrefix("fd00::/125")); err != nil {
		t.Fatal(err)
	}
	p.excludes = rng(t, "fd00::6-fd00::10") // as if configured, reaching beyond the block
	if err := p.AddCIDR(netip.MustParsePrefix("fd00::8/125")); err != nil {
		t.Fatal(err)
	}
	check(t, p)
	got := drain(t, p, 20)
	slices.SortFunc(got, netip.Addr.Compare)
	// fd00::/125: ::1-::7 (::0 anycast); fd00::8/125: ::9-::f (::8 anycast) minus ::9-::f excluded.
	want := addrs("fd00::1", "fd00::2", "fd00::3", "fd00::4", "fd00::5", "fd00::6", "fd00::7")
	if !slices.Equal(got, want) {
		t.Fatalf("drained %v, want %v", got, want)
	}
}

func TestRemoveCIDR(t *testing.T) {
	p := mustNew(t, Config{CIDRs: pfx("10.0.0.0/30", "10.0.0.4/30", "10.0.0.8/30")})
	a, err := p.AllocateNext() // 10.0.0.1
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.AllocateNext() // 10.0.0.2
	c, _ := p.AllocateNext() // 10.0.0.5: cursor now in the second CIDR
	if c != netip.MustParseAddr("10.0.0.5") {
		t.Fatalf("third address %v", c)
	}
	err = p.RemoveCIDR(netip.MustParsePrefix("10.0.0.0/30"))
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "2 address(es)") {
		t.Fatalf("remove in-use CIDR: %v", err)
	}
	if err := p.RemoveCIDR(netip.MustParsePrefix("10.0.0.12/30")); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("remove unknown CIDR: %v", err)
	}
	for _, x := range []netip.Addr{a, b} {
		if err := p.Release(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.RemoveCIDR(netip.MustParsePrefix("10.0.0.0/30")); err != nil {
		t.Fatal(err)
	}
	check(t, p)
	if st := p.Stats(); st.Usable != 4 || st.Used != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Nothing comes out of the removed CIDR any more.
	if err := p.Allocate(a); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Allocate in removed CIDR: %v", err)
	}
	got := drain(t, p, 10)
	slices.SortFunc(got, netip.Addr.Compare)
	if want := addrs("10.0.0.6", "10.0.0.9", "10.0.0.10"); !slices.Equal(got, want) {
		t.Fatalf("drained %v, want %v", got, want)
	}
	// Removing the CIDR the cursor is in, then every CIDR.
	for _, x := range append(got, c) {
		if err := p.Release(x); err != nil {
			t.Fatal(err)
		}
	}
	for _, cidr := range []string{"10.0.0.8/30", "10.0.0.4/30"} {
		if err := p.RemoveCIDR(netip.MustParsePrefix(cidr)); err != nil {
			t.Fatal(err)
		}
		check(t, p)
	}
	if _, err := p.AllocateNext(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("empty pool: %v", err)
	}
	if err := p.AddCIDR(netip.MustParsePrefix("10.0.0.0/30")); err != nil {
		t.Fatal(err)
	}
	if x, err := p.AllocateNext(); err != nil || !netip.MustParsePrefix("10.0.0.0/30").Contains(x) {
		t.Fatalf("after re-adding: %v %v", x, err)
	}
	check(t, p)
}

func TestCIDRStats(t *testing.T) {
	p := mustNew(t, Config{CIDRs: pfx("10.0.0.0/29", "10.0.1.0/30")})
	if err := p.Allocate(netip.MustParseAddr("10.0.1.2")); err != nil {
		t.Fatal(err)
	}
	got := p.CIDRStats()
	want := []CIDRStats{
		{Prefix: netip.MustParsePrefix("10.0.0.0/29"), Usable: 6},
		{Prefix: netip.MustParsePrefix("10.0.1.0/30"), Usable: 2, Used: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("CIDRStats %+v, want %+v", got, want)
	}
}

// TestPropertyDynamic adds and removes /29 blocks of 10.0.0.0/26 while allocating and
// releasing, and checks against a model that no address is handed out twice, none comes
// from a block the pool no longer has, and an in-use block is never removed.
func TestPropertyDynamic(t *testing.T) {
	var blocks []netip.Prefix
	for i := range 8 {
		blocks = append(blocks, netip.MustParsePrefix(fmt.Sprintf("10.0.0.%d/29", i*8)))
	}
	rapid.Check(t, func(t *rapid.T) {
		p, err := New(Config{Name: "dyn", Family: policy.IPv4})
		if err != nil {
			t.Fatal(err)
		}
		have := map[netip.Prefix]bool{}
		held := map[netip.Addr]bool{}
		blockOf := func(a netip.Addr) netip.Prefix {
			for _, b := range blocks {
				if b.Contains(a) {
					return b
				}
			}
			t.Fatalf("%v in no block", a)
			return netip.Prefix{}
		}
		inUse := func(b netip.Prefix) bool {
			for a := range held {
				if b.Contains(a) {
					return true
				}
			}
			return false
		}
		t.Repeat(map[string]func(*rapid.T){
			"AddCIDR": func(t *rapid.T) {
				b := rapid.SampledFrom(blocks).Draw(t, "add")
				err := p.AddCIDR(b)
				if have[b] != (err != nil) {
					t.Fatalf("AddCIDR(%v) with have=%v: %v", b, have[b], err)
				}
				have[b] = true
			},
			"RemoveCIDR": func(t *rapid.T) {
				b := rapid.SampledFrom(blocks).Draw(t, "remove")
				err := p.RemoveCIDR(b)
				switch {
				case !have[b]:
					expectErr(t, "RemoveCIDR absent", err, ErrOutOfRange)
				case inUse(b):
					expectErr(t, "RemoveCIDR in use", err, ErrInUse)
				default:
					expectErr(t, "RemoveCIDR", err, nil)
					delete(have, b)
				}
			},
			"AllocateNext": func(t *rapid.T) {
				k := rapid.IntRange(1, 8).Draw(t, "k")
				for range k {
					a, err := p.AllocateNext()
					if len(held) == 6*len(have) {
						expectErr(t, "AllocateNext full", err, ErrExhausted)
						return
					}
					if err != nil {
						t.Fatalf("AllocateNext with %d held in %d blocks: %v", len(held), len(have), err)
					}
					if held[a] || !have[blockOf(a)] {
						t.Fatalf("AllocateNext = %v: held %v, block present %v", a, held[a], have[blockOf(a)])
					}
					held[a] = true
				}
			},
			"Release": func(t *rapid.T) {
				if len(held) == 0 {
					// rapid's Skip discards this action for this step, it skips no test: an
					// action with nothing to act on is not part of the sequence.
					t.Skip("nothing held")
				}
				a := rapid.SampledFrom(mapKeysSorted(held)).Draw(t, "r")
				expectErr(t, "Release", p.Release(a), nil)
				delete(held, a)
			},
			"": func(t *rapid.T) {
				if err := p.checkInvariants(); err != nil {
					t.Fatal(err)
				}
				st := p.Stats()
				if st.Usable != uint64(6*len(have)) || st.Used != uint64(len(held)) {
					t.Fatalf("Stats %+v, model %d blocks %d held", st, len(have), len(held))
				}
			},
		})
	})
}
