package policy

import (
	"net/netip"
	"testing"
)

func TestPoolNamePatterns(t *testing.T) {
	tests := []struct {
		pattern, name string
		isPattern     bool
		match         bool
		wantErr       bool
	}{
		{"blue", "blue", false, true, false},
		{"blue", "blue-1", false, false, false},
		{"blue*", "blue-1", true, true, false},
		{"blue*", "green", true, false, false},
		{"v4-pool?", "v4-pool1", true, true, false},
		{"v4-pool?", "v4-pool10", true, false, false},
		{"v4-pool[12]", "v4-pool2", true, true, false},
		{"v4-pool[12]", "v4-pool3", true, false, false},
		{"v4-pool[^12]", "v4-pool3", true, true, false},
		{"v4-pool[a-c]", "v4-poolb", true, true, false},
		{"*", "anything", true, true, false},
		{"only[bracket", "only[bracket", false, true, false}, // '[' without ']' is a plain name
		{"bad[", "bad[", false, true, false},
		{"bad[]x]", "x", true, false, true},
		{"bad[a-]", "x", true, false, true},
		{"x*[", "y", true, false, true}, // malformed even though the prefix already mismatches
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"~"+tt.name, func(t *testing.T) {
			if got := IsPoolNamePattern(tt.pattern); got != tt.isPattern {
				t.Fatalf("IsPoolNamePattern = %v, want %v", got, tt.isPattern)
			}
			got, err := MatchPoolName(tt.pattern, tt.name)
			if (err != nil) != tt.wantErr {
				t.Fatalf("MatchPoolName err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.match {
				t.Fatalf("MatchPoolName = %v, want %v", got, tt.match)
			}
			if tt.isPattern {
				if err := ValidatePoolNamePattern(tt.pattern); (err != nil) != tt.wantErr {
					t.Fatalf("ValidatePoolNamePattern err = %v, wantErr %v", err, tt.wantErr)
				}
			}
		})
	}
}

func TestLookupPool(t *testing.T) {
	pools := []PoolView{
		{Name: "default", Family: IPv4, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}},
		{Name: "default", Family: IPv6, CIDRs: []netip.Prefix{netip.MustParsePrefix("fd00::/104")}},
		{Name: "v4only", Family: IPv4},
	}
	if p := LookupPool(pools, "default", IPv6); p == nil || p.Family != IPv6 {
		t.Fatalf("LookupPool(default, ipv6) = %+v", p)
	}
	if p := LookupPool(pools, "v4only", IPv6); p != nil {
		t.Fatalf("LookupPool(v4only, ipv6) = %+v, want nil", p)
	}
	if !PoolExists(pools, "v4only") || PoolExists(pools, "nope") {
		t.Fatal("PoolExists wrong")
	}
	if c := Candidates("a", "b"); len(c) != 2 || c[1].Pool != "b" {
		t.Fatalf("Candidates = %v", c)
	}
	if Candidates() != nil {
		t.Fatal("Candidates() should be nil")
	}
	if !IPv4.Valid() || Family("ipv5").Valid() || IPv6.Label() != "IPv6" {
		t.Fatal("Family helpers wrong")
	}
}

func FuzzMatchPoolName(f *testing.F) {
	f.Add("blue*", "blue-1")
	f.Add("v4-pool[12]", "v4-pool1")
	f.Add("[", "x")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		ok, err := MatchPoolName(pattern, name)
		if err != nil && ok {
			t.Fatal("match reported together with an error")
		}
		if !IsPoolNamePattern(pattern) && ok != (pattern == name) {
			t.Fatal("plain names must match only themselves")
		}
	})
}
