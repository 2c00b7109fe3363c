package config

import (
	"strings"
	"testing"
)

func TestSharedPools(t *testing.T) {
	c, err := load(writeFile(t, "mode: agent\ncluster: {nodeName: n, sharedPools: {networks: [underlay, vlan10]}}\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sp := c.Cluster.SharedPools
	if !sp.SharedNetwork("underlay") || !sp.SharedNetwork("vlan10") || sp.SharedNetwork("pods") || sp.SharedNetwork("") {
		t.Fatalf("sharedPools %+v", sp)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"empty", "mode: agent\ncluster: {nodeName: n, sharedPools: {networks: ['']}}\n", "cluster.sharedPools.networks[0]: must not be empty"},
		{"twice", "mode: agent\ncluster: {nodeName: n, sharedPools: {networks: [a, a]}}\n", `cluster.sharedPools.networks[1]: "a" is listed twice`},
		{"bad", "mode: agent\ncluster: {nodeName: n, sharedPools: {networks: [a/b]}}\n", `cluster.sharedPools.networks[0]: "a/b" is not a valid CNI network name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(writeFile(t, tc.body), nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant %q", err, tc.want)
			}
		})
	}
}
