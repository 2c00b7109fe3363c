package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestClusterDefaultsAndOverrides(t *testing.T) {
	p := writeFile(t, "mode: agent\ncluster: {nodeName: node-a, preAllocation: {blue: 4}, pendingTimeout: 5s}\n")
	c, err := load(p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Cluster
	if cl.NodeName != "node-a" || cl.PendingTimeout != 5*time.Second || cl.RequestDebounce != 100*time.Millisecond {
		t.Fatalf("cluster %+v", cl)
	}
	// As with Cilium's flag, a map given replaces the default one.
	if cl.PreAllocation["blue"] != 4 || cl.PreAllocation["default"] != 0 {
		t.Fatalf("preAllocation %v", cl.PreAllocation)
	}
	if cl.LeaderElection.Name != "allot-operator" || cl.LeaderElection.LeaseDuration != 15*time.Second {
		t.Fatalf("leaderElection %+v", cl.LeaderElection)
	}
}

func TestClusterPreAllocationDefault(t *testing.T) {
	c, err := load(writeFile(t, "mode: agent\ncluster: {nodeName: n}\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Cluster.PreAllocation) != 1 || c.Cluster.PreAllocation["default"] != 8 {
		t.Fatalf("preAllocation %v", c.Cluster.PreAllocation)
	}
}

func TestClusterNodeNameFromEnv(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	p := writeFile(t, "mode: agent\n")
	c, err := load(p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster.NodeName != "from-env" {
		t.Fatalf("nodeName %q", c.Cluster.NodeName)
	}
}

func TestClusterValidationNamesTheField(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	for _, tc := range []struct{ name, body, want string }{
		{"no node", "mode: agent\n", "cluster.nodeName: must be set in agent mode"},
		{"bad node", "mode: agent\ncluster: {nodeName: Node_A}\n", `cluster.nodeName: "Node_A" is not a valid Kubernetes node name`},
		{"negative prealloc", "mode: agent\ncluster: {nodeName: n, preAllocation: {default: -1}}\n", "cluster.preAllocation.default: -1 must be between 0"},
		{"bad pool", "mode: agent\ncluster: {nodeName: n, preAllocation: {Blue: 1}}\n", `cluster.preAllocation.Blue: "Blue" is not a valid pool name`},
		{"negative duration", "mode: agent\ncluster: {nodeName: n, releaseDelay: -1s}\n", "cluster.releaseDelay: -1s must be between 0"},
		{"kubeconfig", "mode: operator\ncluster: {kubeconfig: /nonexistent/kubeconfig}\n", "cluster.kubeconfig: stat /nonexistent/kubeconfig"},
		{"pod CIDR", "mode: operator\ncluster: {clusterCIDRConfig: true, podCIDRs: [10.244.0.0/16, 10.300.0.0/16]}\n", `cluster.podCIDRs[1]: "10.300.0.0/16" is not a CIDR`},
		{"pod CIDR host bits", "mode: operator\ncluster: {clusterCIDRConfig: true, podCIDRs: [10.244.1.0/16]}\n", "cluster.podCIDRs[0]: 10.244.1.0/16 has host bits set (did you mean 10.244.0.0/16?)"},
		{"pod CIDR overlap", "mode: operator\ncluster: {clusterCIDRConfig: true, podCIDRs: [10.0.0.0/8, 10.244.0.0/16]}\n", "cluster.podCIDRs[1]: 10.244.0.0/16 overlaps cluster.podCIDRs[0] 10.0.0.0/8"},
		{"lease", "mode: operator\ncluster: {leaderElection: {leaseDuration: 5s, renewDeadline: 10s}}\n", "cluster.leaderElection.renewDeadline: 10s must be shorter than leaseDuration 5s"},
		{"ipam", "mode: agent\ncluster: {nodeName: n, ipam: host-local}\n", `cluster.ipam: "host-local" is not one of "multi-pool", "kubernetes"`},
		{"ipam and eni", "mode: agent\ncluster: {nodeName: n, ipam: kubernetes, eni: {backend: aws-eni}}\n", `cluster.ipam: "kubernetes" cannot be combined with ENI mode`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(writeFile(t, tc.body), nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant %q", err, tc.want)
			}
		})
	}
}

func TestStandaloneIgnoresCluster(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	if _, err := load(writeFile(t, minimal), nil, nil); err != nil {
		t.Fatal(err)
	}
}

// TestAgentDatapathConfigIslandMode: in island mode the cluster pod CIDR is never masqueraded
// (native routing) by an agent, whatever else the datapath section says; other modes leave the
// datapath section as written.
func TestAgentDatapathConfigIslandMode(t *testing.T) {
	c, err := load(writeFile(t, "mode: agent\ncluster: {nodeName: n, podCIDRs: [100.64.0.0/16, \"fd00:64::/48\"]}\n"+
		"datapath: {type: iptables, nonMasqueradeCIDRs: [192.0.2.0/24], nativeRoutingCIDRs: [192.168.0.0/16, 100.64.1.0/24]}\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := c.AgentDatapathConfig()
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(dc.NativeRoutingCIDRs)
	if want := "[100.64.0.0/16 192.168.0.0/16 fd00:64::/48]"; got != want {
		t.Errorf("nativeRoutingCIDRs %s; want %s", got, want)
	}
	// ip-masq-agent's list given explicitly (its defaults would cover 100.64.0.0/10 anyway).
	non := fmt.Sprint(dc.EffectiveNonMasquerade())
	if want := "[100.64.0.0/16 169.254.0.0/16 192.0.2.0/24 192.168.0.0/16 fd00:64::/48 fe80::/10]"; non != want {
		t.Errorf("effective non-masquerade %s; want %s", non, want)
	}
	c.Mode = "operator"
	if dc, err = c.AgentDatapathConfig(); err != nil || fmt.Sprint(dc.NativeRoutingCIDRs) != "[192.168.0.0/16 100.64.1.0/24]" {
		t.Errorf("operator mode: %v %v", dc.NativeRoutingCIDRs, err)
	}
}
