package operator

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

// rebuildFunc is a leader hook made of a function.
type rebuildFunc func(context.Context) error

func (f rebuildFunc) Rebuild(ctx context.Context) error { return f(ctx) }

// A rebuild that fails after another hook reserved its blocks is retried from an empty state:
// the blocks reserved by the first attempt are not taken again as another node's.
func TestRebuildRetriesFromEmptyState(t *testing.T) {
	st := newState()
	block := netip.MustParsePrefix("10.0.0.0/24")
	reserve := rebuildFunc(func(context.Context) error {
		st.mu.Lock()
		defer st.mu.Unlock()
		// As allotNodeReconciler.Rebuild: a block already taken is a conflict, skipped.
		h := &allotHold{blocks: map[netip.Prefix]string{}}
		if err := st.set.Reserve(block); err == nil {
			h.blocks[block] = "p"
		}
		st.allot["n1"] = h
		return nil
	})
	fails := 1
	flaky := rebuildFunc(func(context.Context) error {
		if fails > 0 {
			fails--
			return errors.New("list Nodes: connection refused")
		}
		return nil
	})
	op := &operator{st: st, rebuilders: []rebuilder{reserve, flaky}}
	if err := op.rebuild(context.Background()); err == nil {
		t.Fatal("first rebuild: want the hook's error")
	}
	if err := op.rebuild(context.Background()); err != nil {
		t.Fatalf("second rebuild: %v", err)
	}
	if got := st.allot["n1"]; got == nil || got.blocks[block] != "p" {
		t.Fatalf("n1 after the retried rebuild holds %+v, want %v of pool p", got, block)
	}
	if n := st.set.Len(); n != 1 {
		t.Fatalf("taken blocks: %d, want 1", n)
	}
}
