package agent

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestReclaimDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	grace := 30 * time.Second
	for _, tc := range []struct {
		name           string
		since, created time.Time
		want           time.Time
	}{
		{"gone after an old allocation", t0, t0.Add(-time.Hour), t0.Add(grace)},
		{"allocation newer than the sighting", t0, t0.Add(10 * time.Second), t0.Add(10*time.Second + grace)},
		{"same instant", t0, t0, t0.Add(grace)},
	} {
		if got := reclaimDue(tc.since, tc.created, grace); !got.Equal(tc.want) {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestReleaseCandidates(t *testing.T) {
	p := netip.MustParsePrefix
	ds := []demand{
		{pool: "a", release: []netip.Prefix{p("10.0.0.0/26"), p("10.0.0.64/26")}},
		{pool: "b"},
		{pool: "c", release: []netip.Prefix{p("fd00::/120")}},
	}
	want := []blockKey{{"a", p("10.0.0.0/26")}, {"a", p("10.0.0.64/26")}, {"c", p("fd00::/120")}}
	if got := releaseCandidates(ds); !slices.Equal(got, want) {
		t.Errorf("releaseCandidates = %v, want %v", got, want)
	}
	if got := releaseCandidates(nil); got != nil {
		t.Errorf("releaseCandidates(nil) = %v, want nil", got)
	}
}
