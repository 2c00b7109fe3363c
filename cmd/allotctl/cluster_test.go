package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/test/k8senv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func writeKubeconfig(t *testing.T, c *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Host, InsecureSkipTLSVerify: c.Insecure, CertificateAuthorityData: c.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: c.BearerToken, ClientCertificateData: c.CertData, ClientKeyData: c.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	root := newRoot(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		t.Fatalf("allotctl %v: %v", args, err)
	}
	return out.String()
}

// TestClusterViews runs allotctl cluster pools/nodes against a real API server holding
// IPPools and AllotNodes as the operator and agents write them.
func TestClusterViews(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pools := []allotv1.IPPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: allotv1.IPPoolSpec{
			IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.10.0.0/16"}, MaskSize: 24},
			IPv6: &allotv1.PoolFamily{CIDRs: []string{"fd00:10::/104"}, MaskSize: 120}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "blue"}, Spec: allotv1.IPPoolSpec{
			IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.20.0.0/16"}, MaskSize: 26}}},
	}
	for i := range pools {
		if err := c.Create(ctx, &pools[i]); err != nil {
			t.Fatal(err)
		}
	}
	nodes := []allotv1.AllotNode{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: allotv1.AllotNodeSpec{IPAM: allotv1.NodeIPAMSpec{Pools: allotv1.NodePools{
			Requested: []allotv1.PoolRequest{{Pool: "default", Needed: allotv1.AddressCounts{IPv4: 16, IPv6: 16}}},
			Allocated: []allotv1.PoolAllocation{{Pool: "default", CIDRs: []string{"10.10.0.0/24", "fd00:10::/120"}}},
		}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Spec: allotv1.AllotNodeSpec{IPAM: allotv1.NodeIPAMSpec{Pools: allotv1.NodePools{
			Requested: []allotv1.PoolRequest{{Pool: "default", Needed: allotv1.AddressCounts{IPv4: 8, IPv6: 8}}, {Pool: "blue", Needed: allotv1.AddressCounts{IPv4: 3}}},
			Allocated: []allotv1.PoolAllocation{{Pool: "blue", CIDRs: []string{"10.20.0.64/26"}}, {Pool: "default", CIDRs: []string{"10.10.1.0/24", "fd00:10::100/120"}}},
		}}}},
	}
	for i := range nodes {
		if err := c.Create(ctx, &nodes[i]); err != nil {
			t.Fatal(err)
		}
	}
	nodes[0].Status.IPAM.Pools = []allotv1.PoolUsage{{Pool: "default", IPv4: &allotv1.FamilyUsage{Used: 3, Available: 254}, IPv6: &allotv1.FamilyUsage{Used: 3, Available: 255}}}
	nodes[1].Status.IPAM.Pools = []allotv1.PoolUsage{{Pool: "blue", IPv4: &allotv1.FamilyUsage{Used: 3, Available: 62}}}
	for i := range nodes {
		if err := c.Status().Update(ctx, &nodes[i]); err != nil {
			t.Fatal(err)
		}
	}
	kc := writeKubeconfig(t, env.Config)

	out := run(t, "cluster", "pools", "--kubeconfig", kc)
	t.Logf("allotctl cluster pools:\n%s", out)
	for _, want := range []string{
		"POOL     FAMILY  POOL CIDRS     MASK  NODE    BLOCKS            USED  AVAILABLE",
		"blue     ipv4    10.20.0.0/16   /26   node-b  10.20.0.64/26     3     62",
		"default  ipv4    10.10.0.0/16   /24   node-a  10.10.0.0/24      3     254",
		"default  ipv4    10.10.0.0/16   /24   node-b  10.10.1.0/24      0     0",
		"default  ipv6    fd00:10::/104  /120  node-a  fd00:10::/120     3     255",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster pools: missing line %q", want)
		}
	}

	out = run(t, "cluster", "nodes", "--kubeconfig", kc)
	t.Logf("allotctl cluster nodes:\n%s", out)
	for _, want := range []string{
		"node-a  default  10.10.0.0/24,fd00:10::/120     16/16            3/3         254/255",
		"node-b  blue     10.20.0.64/26                  3/0              3/0         62/0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster nodes: missing line %q", want)
		}
	}

	var rows []ClusterNodeRow
	if err := json.Unmarshal([]byte(run(t, "cluster", "nodes", "--kubeconfig", kc, "-o", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[2].Node != "node-b" || rows[2].Pool != "default" || rows[2].Requested != [2]int64{8, 8} {
		t.Fatalf("json rows %+v", rows)
	}
}

func TestClusterBadKubeconfig(t *testing.T) {
	var out bytes.Buffer
	root := newRoot(&out)
	root.SetArgs([]string{"cluster", "pools", "--kubeconfig", "/nonexistent/kubeconfig"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Fatalf("got %v", err)
	}
}
