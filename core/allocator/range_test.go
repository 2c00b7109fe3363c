package allocator

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/addrset"
)

func TestParseRange(t *testing.T) {
	tests := []struct {
		in       string
		from, to string
		wantErr  string // substring; empty = success
	}{
		{in: "10.0.0.5", from: "10.0.0.5", to: "10.0.0.5"},
		{in: " 10.0.0.10 - 10.0.0.20 ", from: "10.0.0.10", to: "10.0.0.20"},
		{in: "10.0.0.0/28", from: "10.0.0.0", to: "10.0.0.15"},
		{in: "10.0.0.7/32", from: "10.0.0.7", to: "10.0.0.7"},
		{in: "0.0.0.0/0", from: "0.0.0.0", to: "255.255.255.255"},
		{in: "2001:db8::/64", from: "2001:db8::", to: "2001:db8::ffff:ffff:ffff:ffff"},
		{in: "2001:db8::1-2001:db8::ff", from: "2001:db8::1", to: "2001:db8::ff"},
		{in: "::/0", from: "::", to: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		{in: "", wantErr: `"": empty`},
		{in: "10.0.0.3/28", wantErr: "did you mean 10.0.0.0/28"},
		{in: "10.0.0.0/33", wantErr: `"10.0.0.0/33"`},
		{in: "10.0.0.20-10.0.0.10", wantErr: "From is after To"},
		{in: "10.0.0.1-2001:db8::1", wantErr: "different families"},
		{in: "fe80::1%eth0", wantErr: "zoned"},
		{in: "10.0.0.1-", wantErr: `"10.0.0.1-"`},
		{in: "nope", wantErr: `"nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParseRange(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseRange(%q) = %v, %v; want error containing %q", tt.in, r, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), "allocator: parse range") {
					t.Errorf("error %q lacks prefix", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRange(%q): %v", tt.in, err)
			}
			want := addrset.Range{From: netip.MustParseAddr(tt.from), To: netip.MustParseAddr(tt.to)}
			if r != want {
				t.Fatalf("ParseRange(%q) = %v, want %v", tt.in, r, want)
			}
		})
	}
}

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"10.0.0.5", "10.0.0.10-10.0.0.20", "10.0.0.0/28", "::/0", "2001:db8::1-2001:db8::2",
		"1.2.3.4/33", "a-b-c", "-", "/", "::ffff:1.2.3.4", "fe80::1%lo"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRange(s)
		if err != nil {
			if !strings.Contains(err.Error(), "allocator: parse range") {
				t.Fatalf("error %q does not name the input", err)
			}
			return
		}
		if err := validateRange(r); err != nil {
			t.Fatalf("ParseRange(%q) = %v: invalid: %v", s, r, err)
		}
		if !r.Contains(r.From) || !r.Contains(r.To) {
			t.Fatalf("ParseRange(%q) = %v does not contain its ends", s, r)
		}
		// String round-trips.
		r2, err := ParseRange(r.String())
		if err != nil || r2 != r {
			t.Fatalf("round trip of %v: %v, %v", r, r2, err)
		}
	})
}
