package allocator

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/allot-ipam/allot/core/addrset"
	"github.com/allot-ipam/allot/core/internal/addrmath"
)

// FuzzAllocator: the first 4 bytes pick a small pool (family, size,
// exclusion, gateway); each following 3-byte group is one operation
// (op, 16-bit offset) checked against the brute-force model.
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0x08, 0x10, 0x20, 0x01, 0, 0, 0, 1, 0, 5, 2, 0, 5, 0, 0, 0})
	f.Add([]byte{0x8c, 0x00, 0xff, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0x10, 0x00})
	f.Add([]byte{0x02, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0x0d, 0x01, 0xf0, 0x00, 0, 0, 0, 1, 0x0f, 0xff, 1, 0x10, 0x00, 2, 0x0f, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		v6 := data[0]&0x80 != 0
		hb := int(data[0]&0x0f) % 14 // up to 8192 addresses: two chunks
		var pf netip.Prefix
		if v6 {
			pf = netip.PrefixFrom(netip.MustParseAddr("2001:db8::"), 128-hb)
		} else {
			pf = netip.PrefixFrom(netip.MustParseAddr("10.0.0.0"), 32-hb)
		}
		size := uint64(1) << hb
		base := addrmath.FromAddr(pf.Addr())
		at := func(off uint64) netip.Addr { return base.Add64(off % size).Addr(!v6) }
		cfg := Config{Name: "fuzz", CIDRs: []netip.Prefix{pf}}
		if data[1] != 0 || data[2] != 0 {
			lo, hi := uint64(data[1])<<5, uint64(data[1])<<5+uint64(data[2])<<3
			lo, hi = min(lo, size-1), min(hi, size-1)
			cfg.Exclude = []addrset.Range{{From: at(lo), To: at(hi)}}
		}
		// The gateway is the first address New accepts: offset 0 is the network address (IPv4)
		// or the subnet-router anycast address (IPv6) unless the prefix is a /31, /32, /127
		// or /128, and New refuses those as gateways.
		if data[3]&1 != 0 && hb < 2 {
			cfg.Gateway = at(0)
		} else if data[3]&1 != 0 {
			cfg.Gateway = at(1)
		}
		p, err := New(cfg)
		if err != nil {
			t.Fatalf("New(%+v): %v", cfg, err)
		}
		m := newModel(cfg)
		for ops := data[4:]; len(ops) >= 3; ops = ops[3:] {
			a := at(uint64(ops[1])<<8 | uint64(ops[2]))
			switch ops[0] % 4 {
			case 0, 3: // AllocateNext is the common operation
				got, err := p.AllocateNext()
				if len(m.held) == len(m.usable) {
					if !errors.Is(err, ErrExhausted) {
						t.Fatalf("full pool: AllocateNext = %v, %v", got, err)
					}
					break
				}
				if err != nil || !m.usable[got] || m.held[got] {
					t.Fatalf("AllocateNext = %v, %v (usable %v held %v)", got, err, m.usable[got], m.held[got])
				}
				m.held[got] = true
			case 1:
				err := p.Allocate(a)
				switch {
				case !m.usable[a]:
					if !errors.Is(err, ErrExcluded) {
						t.Fatalf("Allocate(excluded %v) = %v", a, err)
					}
				case m.held[a]:
					if !errors.Is(err, ErrInUse) {
						t.Fatalf("Allocate(held %v) = %v", a, err)
					}
				default:
					if err != nil {
						t.Fatalf("Allocate(%v) = %v", a, err)
					}
					m.held[a] = true
				}
			case 2:
				err := p.Release(a)
				if m.held[a] != (err == nil) || err != nil && !errors.Is(err, ErrNotAllocated) {
					t.Fatalf("Release(%v) = %v, held %v", a, err, m.held[a])
				}
				delete(m.held, a)
			}
			if err := p.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			if st := p.Stats(); st.Used != uint64(len(m.held)) || st.Usable != uint64(len(m.usable)) {
				t.Fatalf("Stats %+v, model %d/%d", st, len(m.held), len(m.usable))
			}
			if p.IsAllocated(a) != m.held[a] {
				t.Fatalf("IsAllocated(%v) = %v", a, p.IsAllocated(a))
			}
		}
	})
}
