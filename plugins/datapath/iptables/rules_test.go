package iptables

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/plugins/datapath/internal/netinfo"
	"github.com/allot-ipam/allot/sdk/datapath"
)

func TestBuildRules(t *testing.T) {
	pods := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")}
	non := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	v4 := func(e netinfo.Egress) netip.Addr { return e.V4 }
	tests := []struct {
		name   string
		cfg    datapath.Config
		egress []netinfo.Egress
		random bool
		want   []string
	}{
		{"all interfaces", datapath.Config{PodInterfaces: []string{"lxc+"}}, nil, false, []string{
			"-o lo -j RETURN", "-o lxc+ -j RETURN", "-d 10.0.0.0/8 -j RETURN", "-s 10.244.0.0/24 -j MASQUERADE"}},
		{"egress list, random", datapath.Config{EgressInterfaces: []string{"eth+", "bond0"}}, nil, true, []string{
			"-d 10.0.0.0/8 -j RETURN",
			"-s 10.244.0.0/24 -o bond0 -j MASQUERADE --random-fully",
			"-s 10.244.0.0/24 -o eth+ -j MASQUERADE --random-fully"}},
		{"route source", datapath.Config{EgressInterfaces: []string{"eth0", "eth1"}, MasqueradeToRouteSource: true},
			[]netinfo.Egress{{Name: "eth0", V4: netip.MustParseAddr("192.0.2.10")}, {Name: "eth1"}}, false, []string{
				"-d 10.0.0.0/8 -j RETURN",
				"-s 10.244.0.0/24 -o eth0 -j SNAT --to-source 192.0.2.10",
				"-s 10.244.0.0/24 -o eth1 -j MASQUERADE"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rules := buildRules(tc.cfg, pods, non, tc.egress, v4, tc.random)
			var got []string
			for _, r := range rules {
				got = append(got, strings.Join(r, " "))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if n := chainName(rules); len(n) > 28 || !strings.HasPrefix(n, chainPrefix) {
				t.Errorf("chain name %q", n)
			}
			if chainName(rules) != chainName(buildRules(tc.cfg, pods, non, tc.egress, v4, tc.random)) {
				t.Error("chain name not deterministic")
			}
		})
	}
}
