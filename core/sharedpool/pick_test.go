package sharedpool

import (
	"net/netip"
	"testing"

	"github.com/allot-ipam/allot/core/addrset"
	"github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPickFrom(t *testing.T) {
	set, err := addrset.Parse("ips", policy.IPv4, []string{"10.0.0.1-10.0.0.4", "10.0.0.10-10.0.0.11"})
	if err != nil {
		t.Fatal(err)
	}
	// Positions: 0=.1 1=.2 2=.3 3=.4 4=.10 5=.11
	for _, tc := range []struct {
		name  string
		used  []uint64
		start uint64
		want  string // "" = none free
	}{
		{"empty, from 0", nil, 0, "10.0.0.1"},
		{"empty, from 4 crosses ranges", nil, 4, "10.0.0.10"},
		{"start wraps modulo size", nil, 6, "10.0.0.1"},
		{"skips used run", []uint64{0, 1}, 0, "10.0.0.3"},
		{"skips used at start", []uint64{2, 3}, 2, "10.0.0.10"},
		{"used before start ignored", []uint64{0, 1}, 3, "10.0.0.4"},
		{"wraps past the end", []uint64{4, 5}, 5, "10.0.0.1"},
		{"wraps past the end and a used head", []uint64{0, 4, 5}, 4, "10.0.0.2"},
		{"last free", []uint64{0, 1, 2, 3, 4}, 99, "10.0.0.11"},
		{"full", []uint64{0, 1, 2, 3, 4, 5}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := pickFrom(set, tc.used, tc.start)
			if tc.want == "" {
				if ok {
					t.Fatalf("got %s, want none", got)
				}
				return
			}
			if !ok || got != netip.MustParseAddr(tc.want) {
				t.Fatalf("got %s %v, want %s", got, ok, tc.want)
			}
		})
	}
}

// From any start, the pick is free, and repeatedly picking and marking used fills every
// free address exactly once.
func TestPickFromFillsEveryFreeAddress(t *testing.T) {
	set, _ := addrset.Parse("ips", policy.IPv4, []string{"10.0.0.0-10.0.0.63"})
	for start := uint64(0); start < 70; start += 7 {
		used := []uint64{0, 5, 6, 7, 31, 32, 63}
		seen := map[netip.Addr]bool{}
		for {
			a, ok := pickFrom(set, used, start)
			if !ok {
				break
			}
			i, _ := set.Index(a)
			for _, u := range used {
				if u == i {
					t.Fatalf("start %d picked used %s", start, a)
				}
			}
			if seen[a] {
				t.Fatalf("start %d picked %s again", start, a)
			}
			seen[a] = true
			used = insertSorted(used, i)
		}
		if len(seen) != 64-7 {
			t.Fatalf("start %d filled %d of %d", start, len(seen), 64-7)
		}
	}
}

func insertSorted(s []uint64, v uint64) []uint64 {
	i := 0
	for i < len(s) && s[i] < v {
		i++
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}
func TestPickFree(t *testing.T) {
	set, err := addrset.Parse("ips", policy.IPv4, []string{"10.0.0.1-10.0.0.4", "10.0.0.10-10.0.0.11"})
	if err != nil {
		t.Fatal(err)
	}
	// Positions: 0=.1 1=.2 2=.3 3=.4 4=.10 5=.11
	for _, tc := range []struct {
		name string
		used []uint64
		seed uint64
		want string // "" = none free
	}{
		{"empty, rank 0", nil, 0, "10.0.0.1"},
		{"empty, rank 4 crosses ranges", nil, 4, "10.0.0.10"},
		{"rank wraps modulo free", nil, 6, "10.0.0.1"},
		{"skips used prefix", []uint64{0, 1}, 0, "10.0.0.3"},
		{"skips used in the middle", []uint64{1, 2}, 1, "10.0.0.4"},
		{"last free", []uint64{0, 1, 2, 3, 4}, 99, "10.0.0.11"},
		{"full", []uint64{0, 1, 2, 3, 4, 5}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := pickFree(set, tc.used, tc.seed)
			if tc.want == "" {
				if ok {
					t.Fatalf("got %s, want none", got)
				}
				return
			}
			if !ok || got != netip.MustParseAddr(tc.want) {
				t.Fatalf("got %s %v, want %s", got, ok, tc.want)
			}
		})
	}
}

// Every seed picks a free address, and over all ranks every free address is picked once.
func TestPickFreeCoversEveryFreeAddress(t *testing.T) {
	set, _ := addrset.Parse("ips", policy.IPv4, []string{"10.0.0.0-10.0.0.63"})
	used := []uint64{0, 5, 6, 7, 31, 32, 63}
	seen := map[netip.Addr]bool{}
	for seed := range uint64(64 - len(used)) {
		a, ok := pickFree(set, used, seed)
		if !ok {
			t.Fatal("none")
		}
		i, _ := set.Index(a)
		for _, u := range used {
			if u == i {
				t.Fatalf("seed %d picked used %s", seed, a)
			}
		}
		if seen[a] {
			t.Fatalf("seed %d picked %s again", seed, a)
		}
		seen[a] = true
	}
}

// An address noted taken (a lost Create) is free again once the informer reports the winning
// claim deleted, in whichever order the informer event and the note arrived.
func TestTakenClearedByClaimDelete(t *testing.T) {
	for _, noteFirst := range []bool{true, false} {
		x := NewIndex(nil, nil)
		x.UpsertPool(&v1alpha1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: v1alpha1.SharedIPPoolSpec{IPv4: &v1alpha1.SharedPoolFamily{Subnet: "10.0.0.0/24", IPs: []string{"10.0.0.10"}}}})
		a := netip.MustParseAddr("10.0.0.10")
		claim := &v1alpha1.AddressClaim{ObjectMeta: metav1.ObjectMeta{Name: k8s.ClaimName(a), UID: "u1"},
			Spec: v1alpha1.AddressClaimSpec{IP: a.String(), Pool: "p"}}
		if noteFirst {
			x.noteTaken(a)
			x.UpsertClaim(claim)
		} else {
			x.UpsertClaim(claim)
			x.noteTaken(a)
		}
		if _, ok := x.pick("p", policy.IPv4, 0, false); ok {
			t.Fatalf("noteFirst=%v: the held address was picked", noteFirst)
		}
		x.DeleteClaim(claim.Name)
		got, ok := x.pick("p", policy.IPv4, 0, false)
		if !ok || got != a {
			t.Fatalf("noteFirst=%v: after the delete got %v %v, want %s", noteFirst, got, ok, a)
		}
		x.unpend(got)
	}
}
