package process

import (
	"testing"
	"time"
)

// TestInflight: slots are taken and freed, a call past the timeout is found once and its
// end reports it, and beyond the slots begin says so (the caller falls back to a context).
func TestInflight(t *testing.T) {
	f := &inflight{epoch: time.Now().Add(-time.Hour)}
	a := f.begin()
	if a < 0 || f.overdue(time.Hour) {
		t.Fatalf("begin = %d; a fresh call overdue", a)
	}
	f.slots[a].Store(1) // started an hour ago
	if !f.overdue(time.Minute) || f.overdue(time.Minute) {
		t.Fatal("an overdue call must be found exactly once")
	}
	if !f.end(a) {
		t.Fatal("end does not report the overdue call")
	}
	var taken []int
	for range inflightSlots {
		s := f.begin()
		if s < 0 {
			t.Fatalf("no slot after %d calls", len(taken))
		}
		taken = append(taken, s)
	}
	if s := f.begin(); s >= 0 {
		t.Fatalf("slot %d given beyond %d calls", s, inflightSlots)
	}
	for _, s := range taken {
		if f.end(s) {
			t.Fatal("a call that was on time reported overdue")
		}
	}
	if s := f.begin(); s < 0 {
		t.Fatal("no slot after all were freed")
	}
}
