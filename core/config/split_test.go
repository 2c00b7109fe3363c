package config

import (
	"net/netip"
	"testing"
)

func TestEnvKey(t *testing.T) {
	for _, tc := range []struct {
		variable, key string
		unknown       bool
	}{
		{"ALLOT_STORE_PATH", "store.path", false},
		{"ALLOT_CONFIG", "", false},
		{"ALLOT_STORE_PTAH", "", true},
	} {
		key, unknown := envKey(tc.variable)
		if key != tc.key || unknown != tc.unknown {
			t.Errorf("envKey(%s) = %q, %v; want %q, %v", tc.variable, key, unknown, tc.key, tc.unknown)
		}
	}
}

func TestOverlaps(t *testing.T) {
	placed := func(field, cidr string) placedCIDR {
		return placedCIDR{prefix: netip.MustParsePrefix(cidr), field: field}
	}
	for _, tc := range []struct {
		name string
		all  []placedCIDR
		want [][2]string // fields of {earlier, later}
	}{
		{"disjoint", []placedCIDR{placed("a", "10.0.0.0/24"), placed("b", "10.0.1.0/24")}, nil},
		{"inside", []placedCIDR{placed("a", "10.0.0.128/25"), placed("b", "10.0.0.0/24")}, [][2]string{{"b", "a"}}},
		{"equal", []placedCIDR{placed("a", "fd00::/64"), placed("b", "fd00::/64")}, [][2]string{{"a", "b"}}},
		{"families apart", []placedCIDR{placed("a", "0.0.0.0/0"), placed("b", "::/0")}, nil},
		{"each once", []placedCIDR{placed("a", "10.0.0.0/8"), placed("b", "10.1.0.0/16"), placed("c", "10.1.2.0/24")}, [][2]string{{"a", "b"}, {"b", "c"}}},
	} {
		got := overlaps(tc.all)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d overlaps, want %d: %v", tc.name, len(got), len(tc.want), got)
			continue
		}
		for i, o := range got {
			if o[0].field != tc.want[i][0] || o[1].field != tc.want[i][1] {
				t.Errorf("%s: overlap %d is %s/%s, want %v", tc.name, i, o[0].field, o[1].field, tc.want[i])
			}
		}
	}
}
