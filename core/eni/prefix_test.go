package eni

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/allot-ipam/allot/sdk/cloud"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestCapacityWithPrefixes(t *testing.T) {
	tests := []struct {
		name   string
		limits cloud.Limits
		sel    Selector
		want   int
	}{
		// m5.large: 3 ENIs x (10 - 1) slots x 16 addresses.
		{"m5.large prefixes", cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 10}, Selector{Prefixes: true}, 3 * 9 * 16},
		{"m5.large addresses", cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 10}, Selector{}, 27},
		{"first index 1", cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 10}, Selector{First: 1, Prefixes: true}, 2 * 9 * 16},
		{"unknown limits", cloud.Limits{}, Selector{Prefixes: true}, 0},
	}
	for _, tt := range tests {
		if got := Capacity(cloud.NodeInventory{Limits: tt.limits}, tt.sel); got != tt.want {
			t.Errorf("%s: Capacity = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestPrefixAmount(t *testing.T) {
	tests := []struct{ onSubnet, onIfc, want, out int }{
		{1000, 9, 8, 1},   // 8 addresses: one /28
		{1000, 9, 16, 1},  // exactly one
		{1000, 9, 17, 2},  // rounded up
		{1000, 2, 100, 2}, // interface slots bound it
		{40, 9, 100, 2},   // 40 free addresses hold at most two /28s
		{5, 9, 8, 1},      // too few free to tell: ask once, the cloud answers
		{1000, 0, 8, 0},   // no slot
		{1000, 9, 0, 0},   // no need
	}
	for _, tt := range tests {
		if got := PrefixAmount(tt.onSubnet, tt.onIfc, tt.want); got != tt.out {
			t.Errorf("PrefixAmount(%d, %d, %d) = %d, want %d", tt.onSubnet, tt.onIfc, tt.want, got, tt.out)
		}
	}
}

func prefixInventory() cloud.NodeInventory {
	return cloud.NodeInventory{
		Limits: cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 10, PrefixDelegation: true},
		Interfaces: []cloud.Interface{{
			ID: "eni-0", Index: 0, Primary: true, Subnet: "s",
			Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.5")},
			Prefixes:  []netip.Prefix{pfx("10.0.0.16/28"), pfx("10.0.0.32/28"), pfx("2600:1f18::/80")},
		}},
	}
}

func TestPrefixInventoryArithmetic(t *testing.T) {
	inv := prefixInventory()
	if got := Available(inv, Selector{}); got != 1+32 {
		t.Errorf("Available = %d, want 33 (one address, two /28s; the /80 is not counted)", got)
	}
	if got := FreeOnInterface(inv.Interfaces[0], inv.Limits); got != 10-1-1-2 {
		t.Errorf("FreeOnInterface = %d, want 6 slots", got)
	}
	all := PoolAddrs(inv.Interfaces[0])
	if len(all) != 33 || all[0] != netip.MustParseAddr("10.0.0.5") || all[32] != netip.MustParseAddr("10.0.0.47") {
		t.Errorf("PoolAddrs = %v", all)
	}
	units := Units(inv, Selector{})
	if len(units) != 3 || units[0].Prefix.IsValid() || units[1].Prefix != pfx("10.0.0.16/28") || len(units[2].Addrs) != 16 {
		t.Errorf("Units = %+v", units)
	}
	if !HasIPv6Prefix(inv.Interfaces) {
		t.Error("HasIPv6Prefix = false")
	}
}

func TestPickReleaseWholePrefixes(t *testing.T) {
	inv := prefixInventory()
	busyAddr := netip.MustParseAddr("10.0.0.20") // in the first /28
	busy := func(a netip.Addr) bool { return a == busyAddr }
	tests := []struct {
		excess int
		want   []string
	}{
		{40, []string{"10.0.0.32/28", "10.0.0.5/32"}}, // the free /28 and the address; never the busy /28
		{16, []string{"10.0.0.32/28"}},
		{15, []string{"10.0.0.5/32"}}, // a /28 only whole
		{0, nil},
	}
	for _, tt := range tests {
		_, units := PickRelease(inv, Selector{}, busy, tt.excess)
		var got []string
		for _, u := range units {
			if u.Prefix.IsValid() {
				got = append(got, u.Prefix.String())
			} else {
				got = append(got, netip.PrefixFrom(u.Addrs[0], 32).String())
			}
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("excess %d: picked %v, want %v", tt.excess, got, tt.want)
		}
	}
}

func TestSettlePrefixUnits(t *testing.T) {
	inv := prefixInventory()
	units := Units(inv, Selector{})
	block := units[2].Addrs // 10.0.0.32/28
	all := func(st ReleaseState) map[netip.Addr]ReleaseState {
		m := map[netip.Addr]ReleaseState{}
		for _, a := range block {
			m[a] = st
		}
		return m
	}
	partly := all(StateReady)
	partly[block[3]] = StateMarked
	refused := all(StateReady)
	refused[block[0]] = StateDoNotRelease
	tests := []struct {
		name     string
		states   map[netip.Addr]ReleaseState
		inUse    map[netip.Addr]bool
		allowed  int
		ready    int
		aborted  int
		keep     int
		refusedN int
	}{
		{"all ready: unassign the /28", all(StateReady), nil, 16, 1, 0, 0, 0},
		{"partly ready: wait", partly, nil, 20, 0, 0, 4, 0},
		{"budget below a /28: abort all", all(StateMarked), nil, 15, 0, 16, 15, 0},
		{"one in use: abort all", all(StateMarked), map[netip.Addr]bool{block[5]: true}, 32, 0, 16, 32, 0},
		{"one refused: abort the rest", refused, nil, 32, 0, 15, 32, 1},
	}
	for _, tt := range tests {
		st := Settle(tt.states, units, tt.inUse, tt.allowed)
		aborted := 0
		for _, tr := range st.Transitions {
			if tr.To == StateNone && tr.From != StateDoNotRelease {
				aborted++
			}
		}
		if len(st.Ready) != tt.ready || aborted != tt.aborted || st.Keep != tt.keep || len(st.Refused) != tt.refusedN {
			t.Errorf("%s: ready %d aborted %d keep %d refused %d; want %d %d %d %d", tt.name, len(st.Ready), aborted, st.Keep, len(st.Refused), tt.ready, tt.aborted, tt.keep, tt.refusedN)
		}
	}
	// A /28 gone from the cloud: its ready entries finish.
	gone := Settle(all(StateReady), units[:2], nil, 16)
	if len(gone.Transitions) != 16 || gone.Transitions[0].To != StateReleased {
		t.Errorf("gone prefix: %+v", gone.Transitions)
	}
}

func TestMarkDueMarksWholeUnits(t *testing.T) {
	units := Units(prefixInventory(), Selector{})[2:]
	since := map[netip.Addr]time.Time{}
	t0 := time.Unix(1000, 0)
	ts, marked, next := MarkDue(units, since, t0, time.Minute)
	if len(ts) != 0 || marked != 0 || !next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("first sight: %v %d %v", ts, marked, next)
	}
	ts, marked, _ = MarkDue(units, since, t0.Add(time.Minute), time.Minute)
	if len(ts) != 16 || marked != 16 || len(since) != 0 {
		t.Fatalf("due: %d transitions, %d marked, since %v", len(ts), marked, since)
	}
	since[netip.MustParseAddr("10.9.9.9")] = t0
	MarkDue(nil, since, t0, time.Minute)
	if len(since) != 0 {
		t.Fatal("a unit no longer a candidate was not forgotten")
	}
}
