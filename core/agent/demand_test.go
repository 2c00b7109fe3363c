package agent

import (
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/allocator"
)

func TestNeededIPs(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		inUse, pending, pre, out uint64
	}{
		// Cilium's ipam-multi-pool-pre-allocation defaults to default=8.
		{"idle node keeps the buffer", 0, 0, 8, 8},
		{"one pod", 1, 0, 8, 16},
		{"seven pods", 7, 0, 8, 16},
		{"eight pods: a full buffer beyond them", 8, 0, 8, 16},
		{"nine pods", 9, 0, 8, 24},
		{"pending counts like in use", 3, 6, 8, 24},
		{"only pending", 0, 1, 8, 16},
		{"pre 1", 5, 0, 1, 6},
		{"pre 16", 17, 0, 16, 48},
		// Pools not in the map pre-allocate nothing.
		{"no pre-allocation, idle", 0, 0, 0, 0},
		{"no pre-allocation", 5, 2, 0, 7},
		{"no pre-allocation, only pending", 0, 3, 0, 3},
		{"saturates", math.MaxUint64 - 1, 5, 8, math.MaxUint64},
		{"saturates without pre", math.MaxUint64, 1, 0, math.MaxUint64},
	} {
		if got := NeededIPs(tc.inUse, tc.pending, tc.pre); got != tc.out {
			t.Errorf("%s: NeededIPs(%d, %d, %d) = %d, want %d", tc.name, tc.inUse, tc.pending, tc.pre, got, tc.out)
		}
	}
}

func blk(cidr string, usable, used uint64) allocator.CIDRStats {
	return allocator.CIDRStats{Prefix: netip.MustParsePrefix(cidr), Usable: usable, Used: used}
}

func TestReleasable(t *testing.T) {
	a, b, c := "10.0.0.0/28", "10.0.0.16/28", "10.0.0.32/28"
	for _, tc := range []struct {
		name   string
		blocks []allocator.CIDRStats
		needed uint64
		want   []string
	}{
		{"nothing held", nil, 8, nil},
		{"one block needed by pre-allocation", []allocator.CIDRStats{blk(a, 14, 0)}, 8, nil},
		{"no demand at all: give everything back", []allocator.CIDRStats{blk(a, 14, 0), blk(b, 14, 0)}, 0, []string{b, a}},
		{"second empty block not needed", []allocator.CIDRStats{blk(a, 14, 3), blk(b, 14, 0)}, 8, []string{b}},
		{"second block needed to cover demand", []allocator.CIDRStats{blk(a, 14, 10), blk(b, 14, 0)}, 24, nil},
		{"block in use never released", []allocator.CIDRStats{blk(a, 14, 0), blk(b, 14, 1)}, 0, []string{a}},
		{"highest empty first, keep enough", []allocator.CIDRStats{blk(a, 14, 0), blk(b, 14, 0), blk(c, 14, 0)}, 16, []string{c}},
		{"exact fit keeps the block", []allocator.CIDRStats{blk(a, 14, 0), blk(b, 14, 0)}, 15, nil},
		{"exact fit releases the other", []allocator.CIDRStats{blk(a, 14, 0), blk(b, 14, 0)}, 14, []string{b}},
	} {
		got := Releasable(tc.blocks, tc.needed)
		var gs []string
		for _, p := range got {
			gs = append(gs, p.String())
		}
		if !slices.Equal(gs, tc.want) {
			t.Errorf("%s: Releasable = %v, want %v", tc.name, gs, tc.want)
		}
	}
}

func TestIdleTracker(t *testing.T) {
	var tr idleTracker
	t0 := time.Unix(1000, 0)
	k1 := blockKey{"default", netip.MustParsePrefix("10.0.0.0/24")}
	k2 := blockKey{"blue", netip.MustParsePrefix("10.1.0.0/24")}
	due, next := tr.update(t0, []blockKey{k1}, 10*time.Second)
	if len(due) != 0 || !next.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("first sight: due %v next %v", due, next)
	}
	due, _ = tr.update(t0.Add(5*time.Second), []blockKey{k1, k2}, 10*time.Second)
	if len(due) != 0 {
		t.Fatalf("too early: %v", due)
	}
	due, next = tr.update(t0.Add(10*time.Second), []blockKey{k1, k2}, 10*time.Second)
	if !slices.Equal(due, []blockKey{k1}) || !next.Equal(t0.Add(15*time.Second)) {
		t.Fatalf("k1 due: %v next %v", due, next)
	}
	// k2 stops being releasable (a pod took an address): its clock restarts.
	tr.update(t0.Add(11*time.Second), []blockKey{k1}, 10*time.Second)
	due, _ = tr.update(t0.Add(16*time.Second), []blockKey{k1, k2}, 10*time.Second)
	if !slices.Equal(due, []blockKey{k1}) {
		t.Fatalf("k2 clock not restarted: %v", due)
	}
	// Zero delay: due at once, sorted by pool then address.
	var tz idleTracker
	due, _ = tz.update(t0, []blockKey{k1, k2}, 0)
	if !slices.Equal(due, []blockKey{k2, k1}) {
		t.Fatalf("zero delay: %v", due)
	}
}
