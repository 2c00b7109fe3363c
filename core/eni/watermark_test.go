package eni

import "testing"

func TestNeededIPs(t *testing.T) {
	tests := []struct {
		avail, used, pre, min, max int
		want                       int
	}{
		// From Cilium's TestCalculateNeededIPs (pkg/ipam/node_test.go).
		{8, 4, 8, 8, 6, 0},
		{4, 4, 8, 0, 8, 4},
		// Plain pre-allocation.
		{0, 0, 8, 0, 0, 8},
		{8, 0, 8, 0, 0, 0},
		{8, 3, 8, 0, 0, 3},
		{10, 10, 8, 0, 0, 8},
		// min-allocate dominates an empty node.
		{0, 0, 8, 16, 0, 16},
		{10, 0, 8, 16, 0, 6},
		// max-allocate caps the need, never below zero.
		{0, 0, 8, 16, 10, 10},
		{12, 12, 8, 0, 10, 0},
		{20, 0, 8, 0, 0, 0},
	}
	for _, tt := range tests {
		got := NeededIPs(tt.avail, tt.used, Params{PreAllocate: tt.pre, MinAllocate: tt.min, MaxAllocate: tt.max})
		if got != tt.want {
			t.Errorf("NeededIPs(avail=%d used=%d pre=%d min=%d max=%d) = %d, want %d", tt.avail, tt.used, tt.pre, tt.min, tt.max, got, tt.want)
		}
	}
}

func TestExcessIPs(t *testing.T) {
	tests := []struct {
		avail, used, pre, min, maw int
		want                       int
	}{
		// Cilium's calculateExcessIPs test vectors.
		{17, 0, 8, 16, 0, 9},
		{21, 0, 8, 0, 4, 9},
		{20, 4, 8, 0, 8, 0},
		// Nothing to release at or under the watermark.
		{16, 0, 8, 16, 0, 0},
		{8, 0, 8, 0, 0, 0},
		// used + pre above the watermark: keep used + pre + maw.
		{30, 10, 8, 0, 2, 10},
		{30, 30, 8, 0, 0, 0},
		{40, 20, 8, 4, 4, 8},
	}
	for _, tt := range tests {
		got := ExcessIPs(tt.avail, tt.used, Params{PreAllocate: tt.pre, MinAllocate: tt.min, MaxAboveWatermark: tt.maw})
		if got != tt.want {
			t.Errorf("ExcessIPs(avail=%d used=%d pre=%d min=%d maw=%d) = %d, want %d", tt.avail, tt.used, tt.pre, tt.min, tt.maw, got, tt.want)
		}
	}
}

// codeFormNeeded is the formula as Cilium's code writes it (pkg/ipam/node.go,
// calculateNeededIPs): min-allocate only when set, max-allocate and zero as explicit clamps.
func codeFormNeeded(avail, used, pre, min, max int) int {
	needed := pre - (avail - used)
	if min > 0 && min-avail > needed {
		needed = min - avail
	}
	if max > 0 && avail+needed > max {
		needed = max - avail
	}
	if needed < 0 {
		needed = 0
	}
	return needed
}

// TestNeededMatchesCodeForm checks, exhaustively over small values, that the form of Cilium's
// ENI documentation (implemented) and the form of Cilium's code agree.
func TestNeededMatchesCodeForm(t *testing.T) {
	for avail := 0; avail <= 24; avail++ {
		for used := 0; used <= avail; used++ {
			for pre := 0; pre <= 10; pre += 2 {
				for mn := 0; mn <= 20; mn += 5 {
					for mx := 0; mx <= 24; mx += 3 {
						p := Params{PreAllocate: pre, MinAllocate: mn, MaxAllocate: mx}
						if got, want := NeededIPs(avail, used, p), codeFormNeeded(avail, used, pre, mn, mx); got != want {
							t.Fatalf("avail=%d used=%d %+v: documented form %d, code form %d", avail, used, p, got, want)
						}
					}
				}
			}
		}
	}
}

// TestNoOscillation: after allocating what one step targets, then releasing whatever excess
// that leaves (Cilium's formulas can leave one or two, e.g. pre 4, min 10, maw 2 at 7 used),
// the node is stable: no need and no excess. So allocation and release never take turns.
func TestNoOscillation(t *testing.T) {
	for avail := 0; avail <= 30; avail++ {
		for used := 0; used <= avail; used++ {
			for _, p := range []Params{{PreAllocate: 8}, {PreAllocate: 8, MaxAboveWatermark: 4}, {PreAllocate: 4, MinAllocate: 10, MaxAboveWatermark: 2}} {
				n := NeededIPs(avail, used, p)
				if n == 0 {
					continue
				}
				after := avail + AllocationTarget(avail, n, 0, p)
				after -= ExcessIPs(after, used, p)
				if n2, e2 := NeededIPs(after, used, p), ExcessIPs(after, used, p); n2 != 0 || e2 != 0 {
					t.Fatalf("avail=%d used=%d %+v: settles at %d with need %d excess %d", avail, used, p, after, n2, e2)
				}
			}
		}
	}
}

func TestSurgeAndTarget(t *testing.T) {
	p := Params{PreAllocate: 8, MaxAboveWatermark: 2}
	if got := SurgeIPs(5, p); got != 0 {
		t.Errorf("surge(5) = %d", got)
	}
	if got := SurgeIPs(20, p); got != 12 {
		t.Errorf("surge(20) = %d", got)
	}
	if got := AllocationTarget(0, 8, 20, p); got != 8+2+12 {
		t.Errorf("target = %d", got)
	}
	p.MaxAllocate = 10
	if got := AllocationTarget(0, 8, 20, p); got != 10 {
		t.Errorf("target under max-allocate = %d", got)
	}
	if got := AllocationTarget(0, 0, 20, p); got != 0 {
		t.Errorf("target without need = %d", got)
	}
}

func TestDeficitOrder(t *testing.T) {
	if !(Deficit(5, 0) > Deficit(1, 0) && Deficit(1, 0) > Deficit(0, 0) && Deficit(0, 0) > Deficit(0, 3)) {
		t.Fatal("deficit does not order need before excess")
	}
}
