package iptables

import "testing"

func TestChooseBackend(t *testing.T) {
	const kubelet = "*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n"
	const rules = "*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -j MASQUERADE\n-A POSTROUTING -j ACCEPT\nCOMMIT\n"
	count := func(outs ...string) ruleCount {
		var rc ruleCount
		for _, o := range outs {
			rc.add([]byte(o))
		}
		return rc
	}
	for _, tc := range []struct {
		name        string
		nft, legacy ruleCount
		want        string
	}{
		{"empty node: the distributions' default", count(), count(), backendNFT},
		{"kubelet on legacy, more rules in nft", count(rules, rules), count(kubelet), backendLegacy},
		{"kubelet on nft, more rules in legacy", count(kubelet), count(rules, rules), backendNFT},
		{"no marker: the one holding more rules", count(rules), count(rules, rules), backendLegacy},
		{"markers in both: more rules wins, nft on a tie", count(kubelet, rules), count(kubelet, rules), backendNFT},
	} {
		if got := chooseBackend(tc.nft, tc.legacy); got != tc.want {
			t.Errorf("%s: got %s, want %s (nft %+v, legacy %+v)", tc.name, got, tc.want, tc.nft, tc.legacy)
		}
	}
}
