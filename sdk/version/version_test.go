package version

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want string
		err  string
	}{
		{"1.2.3", "1.2.3", ""},
		{"v1.2.3", "1.2.3", ""},
		{"1.0.0-rc.1+build.5", "1.0.0-rc.1+build.5", ""},
		{"0.0.0", "0.0.0", ""},
		{"1.2", "", "want MAJOR.MINOR.PATCH"},
		{"1.2.3.4", "", "want MAJOR.MINOR.PATCH"},
		{"01.2.3", "", `bad major "01"`},
		{"1.x.3", "", `bad minor "x"`},
		{"1.2.", "", `bad patch ""`},
		{"1.2.-3", "", `bad patch ""`},
		{"1.2.3-01", "", "bad pre-release"},
		{"1.2.3+", "", "bad build metadata"},
		{"1.2.99999999999999999999", "", `bad patch`},
		{"", "", "want MAJOR.MINOR.PATCH"},
	}
	for _, tt := range tests {
		v, err := Parse(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse(%q) error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || v.String() != tt.want {
			t.Errorf("Parse(%q) = %v, %v, want %s", tt.in, v, err, tt.want)
		}
	}
}

func TestCompatible(t *testing.T) {
	tests := []struct {
		host, plugin string
		ok           bool
	}{
		{"1.0.0", "1.0.0", true},
		{"1.3.0", "1.2.9", true},
		{"1.3.0", "1.3.7", true},
		{"1.3.0-rc.1", "1.3.0", true},
		{"1.0.0", "1.1.0", false},
		{"1.0.0", "2.0.0", false},
		{"2.0.0", "1.9.0", false},
		{"1.0.0", "garbage", false},
	}
	for _, tt := range tests {
		err := Compatible(tt.host, tt.plugin)
		if (err == nil) != tt.ok {
			t.Errorf("Compatible(%s, %s) = %v, want ok=%v", tt.host, tt.plugin, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrIncompatible) {
			t.Errorf("Compatible(%s, %s) = %v, does not wrap ErrIncompatible", tt.host, tt.plugin, err)
		}
	}
}

func TestCheckNamesBoth(t *testing.T) {
	err := Check("x", "pool-policy", "1.0.0", "2.0.0")
	want := `plugin "x" speaks pool-policy contract 2.0.0, host speaks 1.0.0`
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrIncompatible) {
		t.Fatalf("Check = %v, want it to contain %q", err, want)
	}
	if err := Check("x", "pool-policy", "1.2.0", "1.1.0"); err != nil {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1.2.3", "v0.0.1-alpha+b", "1..2", "-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(v.String())
		if err != nil || again != v {
			t.Fatalf("Parse(%q) = %v; reparse = %v, %v", s, v, again, err)
		}
	})
}
