package masqconfig

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	c, err := Parse([]byte("nonMasqueradeCIDRs: [10.0.0.0/8, 'fd00::/8']\nmasqLinkLocal: true\nresyncInterval: 5s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.NonMasqueradeCIDRs) != 2 || !c.MasqLinkLocal || c.MasqLinkLocalIPv6 || c.ResyncInterval != 5*time.Second {
		t.Fatalf("%+v", c)
	}
	// JSON, as ip-masq-agent's ConfigMap often carries it.
	c, err = Parse([]byte(`{"nonMasqueradeCIDRs": ["192.168.0.0/16"], "masqLinkLocalIPv6": true}`))
	if err != nil || c.ResyncInterval != DefaultResync || !c.MasqLinkLocalIPv6 {
		t.Fatalf("%+v %v", c, err)
	}
	// Empty file: every default.
	if c, err := Parse(nil); err != nil || c.NonMasqueradeCIDRs != nil || c.ResyncInterval != DefaultResync {
		t.Fatalf("%+v %v", c, err)
	}
}

// TestParseIPMasqAgentSemantics pins ip-masq-agent's reading of its file: an absent list is
// the defaults, an explicit empty one is no exceptions, tabs in JSON are whitespace, and
// cidrLimit bounds the list.
func TestParseIPMasqAgentSemantics(t *testing.T) {
	c, err := Parse([]byte("masqLinkLocal: true\n"))
	if err != nil || c.NonMasqueradeSet || c.CIDRLimit != DefaultCIDRLimit {
		t.Fatalf("absent list: %+v %v", c, err)
	}
	for _, in := range []string{"nonMasqueradeCIDRs: []\n", "{\n\t\"nonMasqueradeCIDRs\": [],\n\t\"masqLinkLocal\": false\n}\n"} {
		c, err = Parse([]byte(in))
		if err != nil || !c.NonMasqueradeSet || len(c.NonMasqueradeCIDRs) != 0 {
			t.Fatalf("explicit empty list %q: %+v %v", in, c, err)
		}
	}
	if c, err = Parse([]byte("nonMasqueradeCIDRs: ~\n")); err != nil || c.NonMasqueradeSet {
		t.Fatalf("null list is absent: %+v %v", c, err)
	}
	if c, err = Parse([]byte("cidrLimit: 2\nnonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\n")); err != nil || c.CIDRLimit != 2 {
		t.Fatalf("cidrLimit: %+v %v", c, err)
	}
	if _, err = Parse([]byte("cidrLimit: 1\nnonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\n")); err == nil || !strings.Contains(err.Error(), "more than cidrLimit 1") {
		t.Fatalf("over cidrLimit: %v", err)
	}
	if _, err = Parse([]byte("cidrLimit: 0\n")); err == nil || !strings.Contains(err.Error(), "cidrLimit") {
		t.Fatalf("cidrLimit 0: %v", err)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	for in, want := range map[string]string{
		"nonMasqueradeCIDRs: [10.0.0.0/33]": "nonMasqueradeCIDRs[0]",
		"nonMasqueradeCIDRs: [10.0.0.1/8]":  "did you mean 10.0.0.0/8",
		"resyncInterval: soon":              "resyncInterval",
		"resyncInterval: 1ms":               "between 1s and 24h",
		"masqLinkLocl: true":                "masqLinkLocl",
		"nonMasqueradeCIDRs: 10.0.0.0/8":    "nonMasqueradeCIDRs",
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want mention of %q", in, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 60s"))
	f.Add([]byte(`{"masqLinkLocal": true}`))
	f.Add([]byte("- a\n- b"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		for _, p := range c.NonMasqueradeCIDRs {
			if !p.IsValid() || p.Masked() != p {
				t.Fatalf("accepted bad prefix %v", p)
			}
		}
		if c.ResyncInterval < time.Second {
			t.Fatalf("accepted resync %v", c.ResyncInterval)
		}
	})
}
