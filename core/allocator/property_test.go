package allocator

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/allot-ipam/allot/core/addrset"
	"github.com/allot-ipam/allot/core/internal/addrmath"
)

// model is the reference: the allocatable set is computed by brute force
// from the config, independently of the allocator's interval arithmetic.
type model struct {
	cidrs  []netip.Prefix
	usable map[netip.Addr]bool // allocatable addresses
	held   map[netip.Addr]bool
}

func newModel(cfg Config) *model {
	m := &model{cidrs: cfg.CIDRs, usable: map[netip.Addr]bool{}, held: map[netip.Addr]bool{}}
	for _, pf := range cfg.CIDRs {
		first, last := pf.Addr(), addrmath.LastOf(pf)
		for a := first; ; a = a.Next() {
			ok := a != cfg.Gateway
			if (pf.Addr().Is4() && pf.Bits() <= 30 && (a == first || a == last)) || (pf.Addr().Is6() && pf.Bits() <= 126 && a == first) {
				ok = false
			}
			for _, r := range cfg.Exclude {
				if r.Contains(a) {
					ok = false
				}
			}
			if ok {
				m.usable[a] = true
			}
			if a == last {
				break
			}
		}
	}
	return m
}

func (m *model) contains(a netip.Addr) bool {
	for _, pf := range m.cidrs {
		if pf.Contains(a) {
			return true
		}
	}
	return false
}

// genConfig draws a small pool: 1-3 disjoint CIDRs of one family (sizes from
// /32 up to two 4096-address chunks), exclusions, maybe a gateway.
func genConfig(t *rapid.T) Config {
	v6 := rapid.Bool().Draw(t, "v6")
	n := rapid.IntRange(1, 3).Draw(t, "ncidrs")
	cfg := Config{Name: "prop"}
	sizes := []int{0, 1, 2, 3, 4, 6, 8, 12, 13} // host bits, small ones likelier
	for i := range n {
		hb := rapid.SampledFrom(sizes).Draw(t, fmt.Sprintf("hostbits%d", i))
		var pf netip.Prefix
		if v6 {
			pf = netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0xd, 0xb8, 0, byte(i)}), 128-hb)
		} else {
			pf = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 32-hb)
		}
		cfg.CIDRs = append(cfg.CIDRs, pf)
	}
	nex := rapid.IntRange(0, 4).Draw(t, "nexcl")
	for i := range nex {
		pf := cfg.CIDRs[rapid.IntRange(0, n-1).Draw(t, fmt.Sprintf("excl%dcidr", i))]
		size := addrmath.U128{Lo: 1}.Add(addrmath.HostMask(pf.Addr().BitLen() - pf.Bits())).Lo
		a := rapid.Uint64Range(0, size-1).Draw(t, fmt.Sprintf("excl%dfrom", i))
		b := rapid.Uint64Range(a, size-1).Draw(t, fmt.Sprintf("excl%dto", i))
		base := addrmath.FromAddr(pf.Addr())
		cfg.Exclude = append(cfg.Exclude, addrset.Range{From: base.Add64(a).Addr(!v6), To: base.Add64(b).Addr(!v6)})
	}
	if rapid.Bool().Draw(t, "gateway") {
		pf := cfg.CIDRs[0]
		hb := pf.Addr().BitLen() - pf.Bits()
		if hb >= 2 {
			cfg.Gateway = pf.Addr().Next() // .1 / ::1, the usual choice
		} else {
			cfg.Gateway = pf.Addr()
		}
	}
	return cfg
}

// genAddr draws an address inside one of the CIDRs, or sometimes outside.
func genAddr(t *rapid.T, m *model, label string) netip.Addr {
	if rapid.IntRange(0, 9).Draw(t, label+"out") == 0 {
		return rapid.SampledFrom(addrs("10.200.0.1", "2001:db8:ff::1", "::ffff:10.0.0.1", "0.0.0.0")).Draw(t, label+"outaddr")
	}
	pf := rapid.SampledFrom(m.cidrs).Draw(t, label+"cidr")
	size := addrmath.U128{Lo: 1}.Add(addrmath.HostMask(pf.Addr().BitLen() - pf.Bits())).Lo
	off := rapid.Uint64Range(0, size-1).Draw(t, label+"off")
	return addrmath.FromAddr(pf.Addr()).Add64(off).Addr(pf.Addr().Is4())
}

func expectErr(t *rapid.T, op string, got, want error) {
	if want == nil && got != nil || want != nil && !errors.Is(got, want) {
		t.Fatalf("%s: got %v, want %v", op, got, want)
	}
}

func TestProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		p, err := New(cfg)
		if err != nil {
			t.Fatalf("New(%+v): %v", cfg, err)
		}
		m := newModel(cfg)
		t.Repeat(map[string]func(*rapid.T){
			"AllocateNext": func(t *rapid.T) {
				k := rapid.SampledFrom([]int{1, 1, 1, 50, 500}).Draw(t, "count")
				for range k {
					a, err := p.AllocateNext()
					if len(m.held) == len(m.usable) {
						expectErr(t, "AllocateNext on full pool", err, ErrExhausted)
						return
					}
					if err != nil {
						t.Fatalf("AllocateNext with %d/%d held: %v", len(m.held), len(m.usable), err)
					}
					if !m.usable[a] || m.held[a] {
						t.Fatalf("AllocateNext = %v: usable %v, already held %v", a, m.usable[a], m.held[a])
					}
					m.held[a] = true
				}
			},
			"Allocate": func(t *rapid.T) {
				a := genAddr(t, m, "a")
				var want error
				switch {
				case !m.contains(a):
					want = ErrOutOfRange
				case !m.usable[a]:
					want = ErrExcluded
				case m.held[a]:
					want = ErrInUse
				}
				expectErr(t, "Allocate "+a.String(), p.Allocate(a), want)
				if want == nil {
					m.held[a] = true
				}
			},
			"Release": func(t *rapid.T) {
				var a netip.Addr
				if len(m.held) > 0 && rapid.Bool().Draw(t, "held") {
					keys := mapKeysSorted(m.held)
					a = rapid.SampledFrom(keys).Draw(t, "r")
				} else {
					a = genAddr(t, m, "r")
				}
				var want error
				switch {
				case !m.contains(a):
					want = ErrOutOfRange
				case !m.held[a]:
					want = ErrNotAllocated
				}
				expectErr(t, "Release "+a.String(), p.Release(a), want)
				delete(m.held, a)
			},
			"ReleaseReallocate": func(t *rapid.T) {
				if len(m.held) == 0 {
					// rapid's Skip discards this action for this step, it skips no test: an
					// action with nothing to act on is not part of the sequence.
					t.Skip("nothing held")
				}
				a := rapid.SampledFrom(mapKeysSorted(m.held)).Draw(t, "rr")
				expectErr(t, "Release", p.Release(a), nil)
				if p.IsAllocated(a) {
					t.Fatalf("%v still allocated after Release", a)
				}
				expectErr(t, "re-Allocate", p.Allocate(a), nil)
			},
			"ForEachAllocated": func(t *rapid.T) {
				var got []netip.Addr
				p.ForEachAllocated(func(a netip.Addr) bool { got = append(got, a); return true })
				if want := mapKeysSorted(m.held); !slices.Equal(got, want) {
					t.Fatalf("ForEachAllocated = %v, want %v", got, want)
				}
			},
			"": func(t *rapid.T) {
				st := p.Stats()
				if st.Usable != uint64(len(m.usable)) || st.Used != uint64(len(m.held)) || st.Free != st.Usable-st.Used {
					t.Fatalf("Stats %+v, model usable %d held %d", st, len(m.usable), len(m.held))
				}
				if err := p.checkInvariants(); err != nil {
					t.Fatal(err)
				}
			},
		})
	})
}

func mapKeysSorted(m map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
