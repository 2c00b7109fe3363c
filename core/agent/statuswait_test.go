package agent

import (
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// TestStatusDue: a status that counts an address in use, or replaces one that did, is
// written at once; one of a node with nothing in use waits between half of StatusQuiet and
// all of it, the same due time across syncs.
func TestStatusDue(t *testing.T) {
	now := time.Unix(1000, 0)
	a := &Agent{opts: Options{Now: func() time.Time { return now }}}
	st := func(used4, avail4, used6 int64) v1alpha1.NodeIPAMStatus {
		return v1alpha1.NodeIPAMStatus{Pools: []v1alpha1.PoolUsage{{Pool: "default",
			IPv4: &v1alpha1.FamilyUsage{Used: used4, Available: avail4}, IPv6: &v1alpha1.FamilyUsage{Used: used6, Available: 255}}}}
	}
	none := v1alpha1.NodeIPAMStatus{}

	// The first blocks of a node: nothing in use, the object has no status yet.
	due := a.statusDue(none, st(0, 254, 0))
	if d := due.Sub(now); d < StatusQuiet/2 || d >= StatusQuiet {
		t.Fatalf("first blocks: due in %v, want [%v, %v)", d, StatusQuiet/2, StatusQuiet)
	}
	now = now.Add(10 * time.Second)
	if again := a.statusDue(none, st(0, 508, 0)); !again.Equal(due) {
		t.Fatalf("next sync: due %v, want the same %v", again, due)
	}
	// A pod's address: at once, and the wait is over.
	if got := a.statusDue(none, st(1, 254, 0)); !got.Equal(now) {
		t.Fatalf("an address in use: due %v, want now %v", got, now)
	}
	if !a.statusAt.IsZero() {
		t.Fatal("the wait is kept after an address came in use")
	}
	for _, c := range []struct {
		name     string
		cur, st  v1alpha1.NodeIPAMStatus
		deferred bool
	}{
		{"a second block while an address is in use", st(1, 254, 0), st(1, 508, 0), false},
		{"an IPv6 address in use", st(0, 254, 0), st(0, 254, 2), false},
		{"every address given back", st(1, 254, 0), st(0, 254, 0), false},
		{"a block given back with nothing in use", st(0, 508, 0), st(0, 254, 0), true},
	} {
		a.statusAt = time.Time{}
		if got := a.statusDue(c.cur, c.st).After(now); got != c.deferred {
			t.Errorf("%s: deferred %v, want %v", c.name, got, c.deferred)
		}
	}
}
