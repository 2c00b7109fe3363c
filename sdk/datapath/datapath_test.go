package datapath

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func pfx(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string // "" = valid
	}{
		{"zero config", Config{}, ""},
		{"typical", Config{PodCIDRs: pfx("10.244.0.0/24", "fd00:244::/64"), EgressInterfaces: []string{"eth+", "ens5"}}, ""},
		{"host bits", Config{PodCIDRs: pfx("10.244.0.1/24")}, "PodCIDRs[0]"},
		{"invalid prefix", Config{NonMasqueradeCIDRs: []netip.Prefix{{}}}, "NonMasqueradeCIDRs[0]"},
		{"mapped v6", Config{NativeRoutingCIDRs: pfx("::ffff:10.0.0.0/104")}, "NativeRoutingCIDRs[0]"},
		{"pod everything", Config{PodCIDRs: pfx("0.0.0.0/0")}, "PodCIDRs[0]"},
		{"empty egress name", Config{EgressInterfaces: []string{""}}, "EgressInterfaces[0]"},
		{"plus alone", Config{PodInterfaces: []string{"+"}}, "PodInterfaces[0]"},
		{"long name", Config{EgressInterfaces: []string{"abcdefghijklmnop"}}, "EgressInterfaces[0]"},
		{"slash in name", Config{EgressInterfaces: []string{"a/b"}}, "EgressInterfaces[0]"},
		{"port min zero", Config{PortRange: PortRange{Min: 0, Max: 10}}, "PortRange.Min"},
		{"port inverted", Config{PortRange: PortRange{Min: 40000, Max: 30000}}, "PortRange"},
		{"ct too small", Config{Maps: MapSizes{ConnTrack: 8}}, "Maps.ConnTrack"},
		{"cidrs too small", Config{Maps: MapSizes{CIDRs: 2}}, "Maps.CIDRs"},
		{"negative gc", Config{GCInterval: -time.Second}, "GCInterval"},
		{"sub-second timeout", Config{Timeouts: Timeouts{UDP: time.Millisecond}}, "Timeouts.UDP"},
		{"relative pin path", Config{PinPath: "bpf/allot"}, "PinPath"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want error naming %s", tc.field)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not wrap ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field+":") {
				t.Errorf("error %q does not name field %q", err, tc.field)
			}
		})
	}
}

func TestEffectiveNonMasquerade(t *testing.T) {
	defaults := []string{"10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24",
		"192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4"}
	with := func(base []string, extra ...string) []netip.Prefix {
		return NormalizePrefixes(pfx(append(slices.Clone(base), extra...)...))
	}
	tests := []struct {
		name string
		cfg  Config
		want []netip.Prefix
	}{
		{"defaults plus link-local", Config{}, with(defaults, "169.254.0.0/16", "fe80::/10")},
		{"masq link-local", Config{MasqLinkLocal: true, MasqLinkLocalIPv6: true}, with(defaults)},
		{"explicitly empty: only link-local", Config{NonMasqueradeExplicit: true}, pfx("169.254.0.0/16", "fe80::/10")},
		{"explicitly empty with pods", Config{NonMasqueradeExplicit: true, MasqLinkLocal: true, PodCIDRs: pfx("10.244.0.0/24")},
			pfx("10.244.0.0/24", "fe80::/10")},
		{"custom list replaces defaults", Config{NonMasqueradeCIDRs: pfx("198.18.0.0/15"), MasqLinkLocal: true},
			pfx("198.18.0.0/15", "fe80::/10")},
		{"pod and native added, covered dropped", Config{
			NonMasqueradeCIDRs: pfx("203.0.113.0/24"), MasqLinkLocal: true, MasqLinkLocalIPv6: true,
			PodCIDRs:           pfx("10.244.1.0/24", "fd00:244::/64"),
			NativeRoutingCIDRs: pfx("10.244.0.0/16")},
			pfx("10.244.0.0/16", "203.0.113.0/24", "fd00:244::/64")},
		{"duplicates and order", Config{NonMasqueradeCIDRs: pfx("2001:db8::/32", "192.0.2.0/24", "192.0.2.0/24"), MasqLinkLocal: true, MasqLinkLocalIPv6: true},
			pfx("192.0.2.0/24", "2001:db8::/32")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.cfg.EffectiveNonMasquerade()
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
			// Deterministic regardless of input order.
			rev := tc.cfg
			rev.NonMasqueradeCIDRs = slices.Clone(tc.cfg.NonMasqueradeCIDRs)
			slices.Reverse(rev.NonMasqueradeCIDRs)
			if again := rev.EffectiveNonMasquerade(); !slices.Equal(again, got) {
				t.Errorf("order-dependent: %v vs %v", again, got)
			}
		})
	}
}

func TestMatchInterface(t *testing.T) {
	tests := []struct {
		patterns []string
		name     string
		want     bool
	}{
		{[]string{"eth+"}, "eth0", true},
		{[]string{"eth+"}, "ens5", false},
		{[]string{"eth0"}, "eth0", true},
		{[]string{"eth0"}, "eth01", false},
		{DefaultPodInterfaces, "veth1234", true},
		{DefaultPodInterfaces, "cni0", true},
		{nil, "eth0", false},
	}
	for _, tc := range tests {
		if got := MatchInterface(tc.patterns, tc.name); got != tc.want {
			t.Errorf("MatchInterface(%v, %q) = %v, want %v", tc.patterns, tc.name, got, tc.want)
		}
	}
}

func TestParsePortRange(t *testing.T) {
	tests := []struct {
		in      string
		want    PortRange
		wantErr bool
	}{
		{"32768-65535", PortRange{32768, 65535}, false},
		{" 1000 - 2000 ", PortRange{1000, 2000}, false},
		{"8080", PortRange{8080, 8080}, false},
		{"0-10", PortRange{}, true},
		{"20-10", PortRange{}, true},
		{"1-65536", PortRange{}, true},
		{"a-b", PortRange{}, true},
		{"", PortRange{}, true},
	}
	for _, tc := range tests {
		got, err := ParsePortRange(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v, err=%v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParsePrefixList(t *testing.T) {
	got, err := ParsePrefixList("10.0.0.0/8, 192.0.2.1 2001:db8::/32")
	if err != nil {
		t.Fatal(err)
	}
	want := pfx("10.0.0.0/8", "192.0.2.1/32", "2001:db8::/32")
	if !slices.Equal(got, want) {
		t.Errorf("got %v want %v", got, want)
	}
	if _, err := ParsePrefixList("10.0.0.0/33"); err == nil {
		t.Error("want error for /33")
	}
}

func FuzzParsePortRange(f *testing.F) {
	for _, s := range []string{"32768-65535", "1", "0", "-", "65535-1", " 5 - 6 ", "99999", "1-2-3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParsePortRange(s)
		if err != nil {
			return
		}
		if r.Min == 0 || r.Min > r.Max {
			t.Fatalf("ParsePortRange(%q) = %v: invalid range accepted", s, r)
		}
		back, err := ParsePortRange(r.String())
		if err != nil || back != r {
			t.Fatalf("round trip %v -> %q -> %v, %v", r, r.String(), back, err)
		}
		if err := (Config{PortRange: r}).Validate(); err != nil {
			t.Fatalf("parsed range %v fails Validate: %v", r, err)
		}
	})
}

func FuzzParsePrefixList(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "10.0.0.1,fe80::/10", "", ",,", "1.2.3.4/33", "::ffff:1.2.3.4/128 x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParsePrefixList(s)
		if err != nil {
			return
		}
		for _, p := range ps {
			if !p.IsValid() {
				t.Fatalf("invalid prefix %v accepted from %q", p, s)
			}
		}
		// Normalisation must be idempotent and never panic.
		n := NormalizePrefixes(ps)
		if !slices.Equal(NormalizePrefixes(n), n) {
			t.Fatalf("NormalizePrefixes not idempotent for %q", s)
		}
		_ = Config{NonMasqueradeCIDRs: ps}.EffectiveNonMasquerade()
	})
}
