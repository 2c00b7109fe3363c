package ipam

import (
	"slices"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

func TestWaitedPools(t *testing.T) {
	c := func(pools ...string) []policy.Candidate {
		var out []policy.Candidate
		for _, p := range pools {
			out = append(out, policy.Candidate{Pool: p})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		d    policy.PodDecision
		want []poolKey
	}{
		{"none", policy.PodDecision{}, nil},
		{"first candidate only", policy.PodDecision{IPv4: c("a", "b")}, []poolKey{{"a", policy.IPv4}}},
		{"dual stack", policy.PodDecision{IPv4: c("a"), IPv6: c("b", "c")}, []poolKey{{"a", policy.IPv4}, {"b", policy.IPv6}}},
		{"IPv6 only", policy.PodDecision{IPv6: c("b")}, []poolKey{{"b", policy.IPv6}}},
	} {
		if got := waitedPools(tc.d); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
