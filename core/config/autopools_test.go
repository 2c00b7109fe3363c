package config

import (
	"strings"
	"testing"
)

func TestAutoCreatePools(t *testing.T) {
	c, err := load(writeFile(t, `mode: operator
cluster:
  autoCreatePools:
    - name: default
      ipv4: {cidrs: [10.10.0.0/16], maskSize: 24}
      ipv6: {cidrs: ["fd00:10::/104"], maskSize: 120}
    - name: blue.team-a
      ipv4: {cidrs: [10.20.0.0/16, 10.21.0.0/16], maskSize: 26}
`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := c.Cluster.AutoCreatePools
	if len(ps) != 2 || ps[0].Name != "default" || ps[0].IPv4.MaskSize != 24 || ps[0].IPv6.CIDRs[0] != "fd00:10::/104" ||
		ps[1].Name != "blue.team-a" || ps[1].IPv6 != nil || len(ps[1].IPv4.CIDRs) != 2 {
		t.Fatalf("autoCreatePools %+v", ps)
	}
}

func TestAutoCreatePoolsValidationNamesTheField(t *testing.T) {
	for _, tc := range []struct{ name, pools, want string }{
		{"name", "[{name: Bad_Name, ipv4: {cidrs: [10.0.0.0/16], maskSize: 24}}]", `cluster.autoCreatePools[0].name: "Bad_Name" is not a valid IPPool name`},
		{"duplicate", "[{name: a, ipv4: {cidrs: [10.0.0.0/16], maskSize: 24}}, {name: a, ipv4: {cidrs: [10.1.0.0/16], maskSize: 24}}]", `cluster.autoCreatePools[1].name: "a" is already cluster.autoCreatePools[0]`},
		{"no family", "[{name: a}]", `cluster.autoCreatePools[0]: pool "a": set ipv4, ipv6 or both`},
		{"family", "[{name: a, ipv4: {cidrs: ['fd00::/64'], maskSize: 24}}]", `cluster.autoCreatePools[0].ipv4.cidrs[0]: "fd00::/64" is not an ipv4 CIDR`},
		{"host bits", "[{name: a, ipv4: {cidrs: [10.0.0.1/16], maskSize: 24}}]", `cluster.autoCreatePools[0].ipv4.cidrs[0]: "10.0.0.1/16" has host bits set; write 10.0.0.0/16`},
		{"mask", "[{name: a, ipv6: {cidrs: ['fd00::/64'], maskSize: 48}}]", `cluster.autoCreatePools[0].ipv6.maskSize: 48 is shorter than the prefix length of cidrs[0] fd00::/64`},
		{"mask range", "[{name: a, ipv4: {cidrs: [10.0.0.0/16], maskSize: 33}}]", `cluster.autoCreatePools[0].ipv4.maskSize: 33 must be between 1 and 32`},
		{"overlap", "[{name: a, ipv4: {cidrs: [10.0.0.0/16, 10.0.1.0/24], maskSize: 26}}]", `cluster.autoCreatePools[0].ipv4.cidrs[1]: 10.0.1.0/24 overlaps cidrs[0] 10.0.0.0/16`},
		{"empty", "[{name: a, ipv4: {cidrs: [], maskSize: 24}}]", `cluster.autoCreatePools[0].ipv4.cidrs: empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(writeFile(t, "mode: operator\ncluster: {autoCreatePools: "+tc.pools+"}\n"), nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
