package k8senv_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/k8senv"
)

func pool(name string, v4 []string, v4mask int32, v6 []string, v6mask int32) *allotv1.IPPool {
	p := &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if v4 != nil {
		p.Spec.IPv4 = &allotv1.PoolFamily{CIDRs: v4, MaskSize: v4mask}
	}
	if v6 != nil {
		p.Spec.IPv6 = &allotv1.PoolFamily{CIDRs: v6, MaskSize: v6mask}
	}
	return p
}

func ccc(name string, v4 string, m4 int32, v6 string, m6 int32) *allotv1.ClusterCIDRConfig {
	c := &allotv1.ClusterCIDRConfig{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if v4 != "" {
		c.Spec.IPv4 = &allotv1.CIDRBlockSpec{CIDR: v4, PerNodeMaskSize: m4}
	}
	if v6 != "" {
		c.Spec.IPv6 = &allotv1.CIDRBlockSpec{CIDR: v6, PerNodeMaskSize: m6}
	}
	return c
}

// TestCRDValidation checks the CEL rules of the CRDs against a real API server.
func TestCRDValidation(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	creates := []struct {
		name    string
		obj     client.Object
		wantErr string // substring; "" means accepted
	}{
		{"pool ok", pool("ok", []string{"10.0.0.0/16", "10.1.0.0/16"}, 24, []string{"fd00::/104"}, 120), ""},
		{"pool v6 in v4", pool("p1", []string{"fd00::/104"}, 24, nil, 0), "spec.ipv4.cidrs: every entry must be an IPv4 CIDR"},
		{"pool not a cidr", pool("p2", []string{"10.0.0.0"}, 24, nil, 0), "every entry must be an IPv4 CIDR"},
		{"pool host bits", pool("p3", []string{"10.0.0.1/16"}, 24, nil, 0), "host bits set"},
		{"pool mask too short", pool("p4", []string{"10.0.0.0/16"}, 8, nil, 0), "spec.ipv4.maskSize must be at least the prefix length"},
		{"pool v4 mask > 32", pool("p5", []string{"10.0.0.0/16"}, 40, nil, 0), "spec.ipv4.maskSize must be at most 32"},
		{"pool overlap", pool("p6", []string{"10.0.0.0/16", "10.0.1.0/24"}, 24, nil, 0), "entries must not overlap"},
		{"pool empty", pool("p7", nil, 0, nil, 0), "at least one of spec.ipv4 and spec.ipv6"},
		{"ccc ok dual", ccc("c-ok", "10.0.0.0/16", 24, "fd00::/104", 120), ""},
		{"ccc unequal host bits", ccc("c1", "10.0.0.0/16", 24, "fd00::/104", 112), "32 - spec.ipv4.perNodeMaskSize must equal 128 - spec.ipv6.perNodeMaskSize"},
		{"ccc bad cidr", ccc("c2", "10.0.0.0/33", 24, "", 0), "spec.ipv4.cidr must be an IPv4 CIDR"},
		{"ccc mask too short", ccc("c3", "10.0.0.0/16", 12, "", 0), "spec.ipv4.perNodeMaskSize must be between"},
		{"allotnode bad block", &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: allotv1.AllotNodeSpec{IPAM: allotv1.NodeIPAMSpec{Pools: allotv1.NodePools{
			Allocated: []allotv1.PoolAllocation{{Pool: "ok", CIDRs: []string{"10.0.0.1/24"}}}}}}}, "every block must be a CIDR with no host bits set"},
	}
	for _, tc := range creates {
		err := c.Create(ctx, tc.obj)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: create refused: %v", tc.name, err)
		case tc.wantErr != "" && err == nil:
			t.Errorf("%s: create accepted; want error containing %q", tc.name, tc.wantErr)
		case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
			t.Errorf("%s: error %q; want it to contain %q", tc.name, err, tc.wantErr)
		}
	}

	// Immutable mask size; CIDRs may be added.
	var p allotv1.IPPool
	if err := c.Get(ctx, client.ObjectKey{Name: "ok"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.IPv4.CIDRs = append(p.Spec.IPv4.CIDRs, "10.2.0.0/16")
	if err := c.Update(ctx, &p); err != nil {
		t.Errorf("adding a CIDR: %v", err)
	}
	p.Spec.IPv4.MaskSize = 25
	if err := c.Update(ctx, &p); err == nil || !strings.Contains(err.Error(), "maskSize is immutable") {
		t.Errorf("changing maskSize: %v; want immutable error", err)
	}
	var cc allotv1.ClusterCIDRConfig
	if err := c.Get(ctx, client.ObjectKey{Name: "c-ok"}, &cc); err != nil {
		t.Fatal(err)
	}
	cc.Spec.IPv4.PerNodeMaskSize = 25
	cc.Spec.IPv6.PerNodeMaskSize = 121
	if err := c.Update(ctx, &cc); err == nil || !strings.Contains(err.Error(), "spec is immutable") {
		t.Errorf("changing a ClusterCIDRConfig: %v; want immutable error", err)
	}
}

// TestRestartAPIServer stops and starts the API server; etcd keeps the data.
func TestRestartAPIServer(t *testing.T) {
	env := k8senv.Start(t, k8senv.Options{CRDDir: "-"})
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cm := newConfigMap("survives")
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	before := servingCert(t, env.Config.Host)
	env.StopAPIServer()
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err == nil {
		t.Fatal("API server still answers after StopAPIServer")
	}
	if err := env.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if !servingCert(t, env.Config.Host).Equal(before) {
		t.Fatal("the serving certificate changed with the restart")
	}
}

// servingCert is the certificate the API server at host presents, which must be ECDSA P-256
// (a handshake costs the server an ECDSA signature, not an RSA-2048 one).
func servingCert(t *testing.T, host string) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(host, "https://"), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // throwaway server
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cert := conn.ConnectionState().PeerCertificates[0]
	if k, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Fatalf("serving certificate key %T, want ECDSA P-256", cert.PublicKey)
	}
	return cert
}

// TestRestartEtcd stops and starts etcd under a running API server: the data survives, and
// the API server serves again without being restarted itself.
func TestRestartEtcd(t *testing.T) {
	env := k8senv.Start(t, k8senv.Options{CRDDir: "-"})
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cm := newConfigMap("survives-etcd")
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	env.StopEtcd()
	// The API server holds a write while etcd is away until its own timeout; 5 s tells.
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	err = c.Create(dctx, newConfigMap("while-down"))
	dcancel()
	if err == nil {
		t.Fatal("the API server stored an object while etcd was stopped")
	}
	if err := env.StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	// The API server's etcd client reconnects with backoff.
	if err := testenv.Poll(ctx, testenv.CondErr(func() error { return c.Get(ctx, client.ObjectKeyFromObject(cm), cm) })); err != nil {
		t.Fatalf("after the etcd restart: %v", err)
	}
	if err := c.Create(ctx, newConfigMap("after-etcd")); err != nil {
		t.Fatalf("create after the etcd restart: %v", err)
	}
}

// TestWriteKubeconfig: a client built from the written kubeconfig reaches the API server.
func TestWriteKubeconfig(t *testing.T) {
	env := k8senv.Start(t, k8senv.Options{CRDDir: "-"})
	p := t.TempDir() + "/kubeconfig"
	if err := env.WriteKubeconfig(p); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", p)
	if err != nil {
		t.Fatal(err)
	}
	if err := createConfigMap(t, cfg, "from-kubeconfig"); err != nil {
		t.Fatal(err)
	}
}

// TestPrinterColumns reads IPPools as `kubectl get` does (server-side table).
func TestPrinterColumns(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := pool("default", []string{"10.0.0.0/16"}, 24, []string{"fd00::/104"}, 120)
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, env.Config.Host+"/apis/allot.io/v1alpha1/ippools", nil)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	req.Header.Set("Authorization", "Bearer "+env.Config.BearerToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var table metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	want := []string{"Name", "V4 CIDRS", "V4 USED", "V4 TOTAL", "V6 CIDRS", "V6 USED", "V6 TOTAL", "IPS IN USE", "AGE"}
	if strings.Join(cols, "|") != strings.Join(want, "|") {
		t.Errorf("columns %q; want %q", cols, want)
	}
	if len(table.Rows) != 1 || fmt.Sprint(table.Rows[0].Cells[1]) != `["10.0.0.0/16"]` {
		t.Errorf("row %v", table.Rows)
	}
}

// TestServiceAccountConfig: a ServiceAccount's config authenticates as that ServiceAccount
// (RBAC refuses it what no binding grants, naming it), and an unlisted one has no config.
func TestServiceAccountConfig(t *testing.T) {
	env := k8senv.Start(t, k8senv.Options{CRDDir: "-", ServiceAccounts: []string{"kube-system/agent"}})
	if _, err := env.ServiceAccountConfig("kube-system/other"); err == nil {
		t.Fatal("a ServiceAccount not in Options.ServiceAccounts got a config")
	}
	cfg, err := env.ServiceAccountConfig("kube-system/agent")
	if err != nil {
		t.Fatal(err)
	}
	err = createConfigMap(t, cfg, "as-agent")
	if want := `"system:serviceaccount:kube-system:agent" cannot create`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("create as the ServiceAccount: got %v, want a refusal containing %s", err, want)
	}
}
