package enihost

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestWantedRules(t *testing.T) {
	a := netip.MustParseAddr
	pods := []Pod{
		{Addr: a("10.0.0.5")},              // primary ENI: the to-pod rule only
		{Addr: a("10.0.1.7"), ENIIndex: 1}, // secondary: to-pod and from-pod
		{Addr: a("10.0.2.9"), ENIIndex: 2}, // device 2 not ready: an error, no rule
		{ENIIndex: 1},                      // no address yet: nothing
	}
	want, errs := wantedRules(pods, map[int]bool{0: true, 1: true})
	wantRules := map[ruleKey]bool{
		{a("10.0.0.5"), ToPodPriority, unix.RT_TABLE_MAIN}: true,
		{a("10.0.1.7"), ToPodPriority, unix.RT_TABLE_MAIN}: true,
		{a("10.0.1.7"), FromPodPriority, TableBase + 1}:    true,
	}
	if len(want) != len(wantRules) {
		t.Errorf("wantedRules = %v, want %v", want, wantRules)
	}
	for k := range wantRules {
		if !want[k] {
			t.Errorf("rule %s missing", k)
		}
	}
	if len(errs) != 1 {
		t.Errorf("errors %v, want one for the pod of device 2", errs)
	}
}

func TestMissingRules(t *testing.T) {
	a := netip.MustParseAddr
	k1 := ruleKey{a("10.0.0.9"), FromPodPriority, TableBase + 1}
	k2 := ruleKey{a("10.0.0.9"), ToPodPriority, unix.RT_TABLE_MAIN}
	k3 := ruleKey{a("10.0.0.1"), ToPodPriority, unix.RT_TABLE_MAIN}
	have := map[ruleKey]*netlink.Rule{k3: nil}
	got := missingRules(map[ruleKey]bool{k1: true, k2: true, k3: true}, have)
	if want := []ruleKey{k2, k1}; !slices.Equal(got, want) {
		t.Errorf("missingRules = %v, want %v (by address, then priority)", got, want)
	}
}
