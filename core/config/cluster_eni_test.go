package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestClusterENI(t *testing.T) {
	c, err := load(writeFile(t, `mode: agent
cluster:
  nodeName: n
  eni:
    backend: aws-eni
    preAllocate: 4
    maxAboveWatermark: 2
    subnetTags: {role: pods}
    releaseDelay: 30s
    node: {instanceID: i-0abc, instanceType: m5.large, zone: us-east-1a, minAllocate: 10}
`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := c.Cluster.ENI
	if !e.Enabled() || *e.PreAllocate != 4 || e.MaxAboveWatermark != 2 || e.SubnetTags["role"] != "pods" || e.Node.InstanceID != "i-0abc" || *e.Node.MinAllocate != 10 {
		t.Fatalf("eni %+v", e)
	}
	c, err = load(writeFile(t, "mode: agent\ncluster: {nodeName: n}\n"), nil, nil)
	if err != nil || c.Cluster.ENI.Enabled() {
		t.Fatalf("ENI mode must be off by default: %+v %v", c.Cluster.ENI, err)
	}
}

func TestClusterENIValidationNamesTheField(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"negative", "mode: operator\ncluster: {eni: {backend: aws-eni, preAllocate: -1}}\n", "cluster.eni.preAllocate: -1 must be between 0 and 4096"},
		{"min above max", "mode: operator\ncluster: {eni: {backend: aws-eni, minAllocate: 9, maxAllocate: 4}}\n", "cluster.eni.minAllocate: 9 is above maxAllocate 4"},
		{"prefix delegation max", "mode: operator\ncluster: {eni: {backend: aws-eni, prefixDelegation: true, maxAllocate: 20}}\n", "cluster.eni.maxAllocate: 20 is not a multiple of 16: with prefixDelegation"},
		{"index", "mode: operator\ncluster: {eni: {backend: aws-eni, firstInterfaceIndex: 99}}\n", "cluster.eni.firstInterfaceIndex: 99 must be between 0 and 64"},
		{"duration", "mode: operator\ncluster: {eni: {backend: aws-eni, releaseDelay: -1s}}\n", "cluster.eni.releaseDelay: -1s must be between 0 and 24h"},
		{"subnet id", "mode: operator\ncluster: {eni: {backend: aws-eni, subnetIDs: ['']}}\n", "cluster.eni.subnetIDs[0]: empty"},
		{"gc interval", "mode: operator\ncluster: {eni: {backend: aws-eni, clusterName: blue, gcInterval: 48h}}\n", "cluster.eni.gcInterval: 48h0m0s must be at most 24h"},
		{"netns dir", "mode: agent\ncluster: {nodeName: n, eni: {backend: aws-eni, netnsDirs: [run/netns]}}\n", `cluster.eni.netnsDirs[0]: "run/netns" is not an absolute path`},
		{"node config tag", "mode: operator\ncluster: {eni: {backend: aws-eni, nodeConfigs: {a: {securityGroupTags: {'': x}}}}}\n", "cluster.eni.nodeConfigs.a: empty tag key"},
		{"node override", "mode: agent\ncluster: {nodeName: n, eni: {backend: aws-eni, node: {maxAllocate: 5000}}}\n", "cluster.eni.node.maxAllocate: 5000 must be between 0 and 4096"},
		{"pool", "mode: agent\ncluster: {nodeName: n, eni: {backend: aws-eni, pool: Bad_Pool}}\n", `cluster.eni.pool: "Bad_Pool" is not a valid pool name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(writeFile(t, tc.body), nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestENIModeMasqueradesByDefault: in ENI mode datapath.type defaults to iptables
// (masquerading on, as Cilium's and the AWS VPC CNI's defaults), elsewhere to none; a type
// set by any source wins; the per-family switches filter the pod CIDRs handed to it.
func TestENIModeMasqueradesByDefault(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		env        []string
		want       string
	}{
		{"eni agent", "mode: agent\ncluster: {nodeName: n, eni: {backend: aws-eni}}\n", nil, "iptables"},
		{"eni, type set", "mode: agent\ncluster: {nodeName: n, eni: {backend: aws-eni}}\ndatapath: {type: none}\n", nil, "none"},
		{"eni, mode from env", "cluster: {nodeName: n, eni: {backend: aws-eni}}\n", []string{"ALLOT_MODE=agent"}, "iptables"},
		{"multi-pool agent", "mode: agent\ncluster: {nodeName: n}\n", nil, "none"},
		{"standalone", "mode: standalone\npools: [{name: a, cidrs: [10.0.0.0/24]}]\n", nil, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(writeFile(t, tc.body), tc.env, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.Datapath.Type != tc.want {
				t.Fatalf("datapath.type = %q, want %q", c.Datapath.Type, tc.want)
			}
		})
	}
	c, err := load(writeFile(t, "mode: agent\ncluster: {nodeName: n, eni: {backend: aws-eni}}\ndatapath: {enableIPv6Masquerade: false}\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := []netip.Prefix{netip.MustParsePrefix("10.1.1.50/32"), netip.MustParsePrefix("2600:1f14::5/128"), netip.MustParsePrefix("10.1.1.51/32")}
	if got := c.Datapath.MasqueradedPodCIDRs(in); !slices.Equal(got, []netip.Prefix{in[0], in[2]}) {
		t.Fatalf("IPv6 masquerade off: pod CIDRs %v", got)
	}
}
