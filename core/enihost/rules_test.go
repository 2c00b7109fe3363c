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
	h := func(s string) netip.Prefix { return netip.PrefixFrom(a(s), 32) }
	pods := []Pod{
		{Addr: a("10.0.0.5")},              // primary ENI: the to-pod rule only
		{Addr: a("10.0.1.7"), ENIIndex: 1}, // secondary: to-pod and from-pod
		{Addr: a("10.0.2.9"), ENIIndex: 2}, // device 2 not ready: an error, no rule
		{ENIIndex: 1},                      // no address yet: nothing
	}
	want, errs := wantedRules(nil, pods, map[int]bool{0: true, 1: true})
	wantRules := map[ruleKey]bool{
		{h("10.0.0.5"), ToPodPriority, unix.RT_TABLE_MAIN}: true,
		{h("10.0.1.7"), ToPodPriority, unix.RT_TABLE_MAIN}: true,
		{h("10.0.1.7"), FromPodPriority, TableBase + 1}:    true,
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
	h := func(s string) netip.Prefix { return netip.PrefixFrom(netip.MustParseAddr(s), 32) }
	k1 := ruleKey{h("10.0.0.9"), FromPodPriority, TableBase + 1}
	k2 := ruleKey{h("10.0.0.9"), ToPodPriority, unix.RT_TABLE_MAIN}
	k3 := ruleKey{h("10.0.0.1"), ToPodPriority, unix.RT_TABLE_MAIN}
	have := map[ruleKey]*netlink.Rule{k3: nil}
	got := missingRules(map[ruleKey]bool{k1: true, k2: true, k3: true}, have)
	if want := []ruleKey{k2, k1}; !slices.Equal(got, want) {
		t.Errorf("missingRules = %v, want %v (by address, then priority)", got, want)
	}
}

// TestWantedRulesIPv6Prefix: an ENI's IPv6 prefix gets the rules once for all its pods; a
// pod outside its ENI's prefixes keeps rules of its own; the prefix of an ENI not ready gets
// none.
func TestWantedRulesIPv6Prefix(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	enis := []ENI{
		{Index: 0, IPv6Prefixes: []netip.Prefix{p("2600:1f18:0:0:b::/80")}},
		{Index: 1, IPv6Prefixes: []netip.Prefix{p("2600:1f18:0:1:a::/80")}},
		{Index: 2, IPv6Prefixes: []netip.Prefix{p("2600:1f18:0:2:c::/80")}},
	}
	pods := []Pod{
		{Addr: a("2600:1f18:0:1:a::5"), ENIIndex: 1}, // in its ENI's prefix: no rules of its own
		{Addr: a("2600:1f18:0:0:b::7")},              // the primary's prefix
		{Addr: a("2600:1f18:0:9::1"), ENIIndex: 1},   // outside: its own rules
	}
	want, errs := wantedRules(enis, pods, map[int]bool{0: true, 1: true})
	wantRules := map[ruleKey]bool{
		{p("2600:1f18:0:0:b::/80"), ToPodPriority, unix.RT_TABLE_MAIN}: true,
		{p("2600:1f18:0:1:a::/80"), ToPodPriority, unix.RT_TABLE_MAIN}: true,
		{p("2600:1f18:0:1:a::/80"), FromPodPriority, TableBase + 1}:    true,
		{p("2600:1f18:0:9::1/128"), ToPodPriority, unix.RT_TABLE_MAIN}: true,
		{p("2600:1f18:0:9::1/128"), FromPodPriority, TableBase + 1}:    true,
	}
	if len(errs) != 0 || len(want) != len(wantRules) {
		t.Errorf("wantedRules = %v %v, want %v", want, errs, wantRules)
	}
	for k := range wantRules {
		if !want[k] {
			t.Errorf("rule %s missing", k)
		}
	}
}
