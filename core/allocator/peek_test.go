package allocator

import (
	"errors"
	"net/netip"
	"testing"
)

// PeekNext names what AllocateNext then hands out, and CanAllocate agrees with Allocate,
// both without taking anything.
func TestPeekNextMatchesAllocateNext(t *testing.T) {
	p, err := New(Config{Name: "p", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/29")}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		used := p.Stats().Used
		peek, perr := p.PeekNext()
		if p.Stats().Used != used {
			t.Fatal("PeekNext took an address")
		}
		got, aerr := p.AllocateNext()
		if (perr == nil) != (aerr == nil) || got != peek {
			t.Fatalf("PeekNext = %v, %v; AllocateNext = %v, %v", peek, perr, got, aerr)
		}
		if aerr != nil {
			if !errors.Is(perr, ErrExhausted) {
				t.Fatalf("PeekNext on a full pool: %v", perr)
			}
			break
		}
		if err := p.CanAllocate(got); !errors.Is(err, ErrInUse) {
			t.Fatalf("CanAllocate(%v) held = %v, want ErrInUse", got, err)
		}
	}
	a := netip.MustParseAddr("10.0.0.3")
	if err := p.Release(a); err != nil {
		t.Fatal(err)
	}
	if err := p.CanAllocate(a); err != nil {
		t.Fatalf("CanAllocate(%v) freed = %v", a, err)
	}
	if err := p.CanAllocate(netip.MustParseAddr("10.1.0.1")); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("CanAllocate outside = %v", err)
	}
	if peek, err := p.PeekNext(); err != nil || peek != a {
		t.Fatalf("PeekNext after release = %v, %v; want %v", peek, err, a)
	}
}
