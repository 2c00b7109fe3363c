package daemon

import (
	"net/netip"
	"testing"

	"github.com/allot-ipam/allot/core/store"
)

func TestPodsToHold(t *testing.T) {
	addr := func(s string) store.Address { return store.Address{Pool: "p", Prefix: netip.MustParsePrefix(s)} }
	rec := func(name string, addrs ...store.Address) store.Record {
		return store.Record{Pod: store.Pod{Namespace: "ns", Name: name}, Addresses: addrs}
	}
	salvaged := []store.Record{rec("a", addr("10.0.0.1/32"))}
	pods := []store.Record{
		rec("a", addr("10.0.0.1/32")),                      // salvaged already: dropped
		rec("b", addr("10.0.0.2/32"), addr("10.0.0.1/32")), // keeps only its address no record holds
		rec("c", addr("10.0.0.2/32")),                      // b took it first: dropped
		rec("d", addr("fd00::3/128")),
	}
	got := podsToHold(salvaged, pods)
	want := map[string][]string{"b": {"10.0.0.2/32"}, "d": {"fd00::3/128"}}
	if len(got) != len(want) {
		t.Fatalf("podsToHold = %v, want pods b and d", got)
	}
	for _, r := range got {
		w := want[r.Pod.Name]
		if len(r.Addresses) != len(w) || r.Addresses[0].Prefix.String() != w[0] {
			t.Errorf("pod %s holds %v, want %v", r.Pod.Name, r.Addresses, w)
		}
	}
	if len(pods[1].Addresses) != 2 {
		t.Errorf("podsToHold changed its input: %v", pods[1].Addresses)
	}
}
