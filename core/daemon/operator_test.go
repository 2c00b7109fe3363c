package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/internal/metricslint"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/plugins/builtin"
	"github.com/allot-ipam/allot/test/k8senv"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func writeKubeconfig(t *testing.T, c *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Host, InsecureSkipTLSVerify: c.Insecure, CertificateAuthorityData: c.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: c.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestOperatorMode loads an operator-mode configuration file as allotd does and checks that
// the operator becomes leader and serves /healthz, /readyz and /metrics.
func TestOperatorMode(t *testing.T) {
	env := k8senv.Start(t)
	kc := writeKubeconfig(t, env.Config)
	path := filepath.Join(t.TempDir(), "allotd.yaml")
	body := "mode: operator\nhttp: {address: 127.0.0.1:0, metricsAddress: 127.0.0.1:0}\ncluster:\n  kubeconfig: " + kc +
		"\n  leaderElection: {leaseDuration: 4s, renewDeadline: 3s, retryPeriod: 500ms}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewOperator(cfg, builtin.Registry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	base := "http://" + d.HTTPAddr()
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	testenv.Eventually(t, 30*time.Second, "/readyz to say leader", func() (bool, string) {
		code, body := get(t, base+"/readyz")
		return code == 200 && strings.Contains(body, "leader") && !strings.Contains(body, "standby"), fmt.Sprintf("%d %q", code, body)
	})
	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "allot_operator") {
		t.Fatalf("/metrics: %d, operator metrics present: %v", code, strings.Contains(body, "allot_operator"))
	}
	// The metrics listener serves the same registry, and it passes Prometheus' linter.
	code, body := get(t, "http://"+d.metrics.Addr()+"/metrics")
	if code != 200 || !strings.Contains(body, "allot_operator_leader 1") {
		t.Fatalf("/metrics on the metrics listener: %d %.300q", code, body)
	}
	problems, err := metricslint.Text(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s", p)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("operator did not stop")
	}
}

func TestOperatorModeBadKubeconfig(t *testing.T) {
	c := config.Defaults()
	c.Mode = "operator"
	c.Cluster.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	if _, err := NewOperator(&c, builtin.Registry(), quiet); err == nil || !strings.Contains(err.Error(), "cluster.kubeconfig") {
		t.Fatalf("got %v", err)
	}
}

// TestENIEngineConfigCarriesTheSettings: cluster.eni reaches the engine: watermarks,
// excluded interface tags and the cluster name that tags created ENIs.
func TestENIEngineConfigCarriesTheSettings(t *testing.T) {
	pre := 4
	c := ENIEngineConfig(config.ClusterENI{Backend: "aws-eni", PreAllocate: &pre, MaxAllocate: 30,
		ExcludeInterfaceTags: map[string]string{"no-pods": "1"}, ClusterName: "blue", PrefixDelegation: true, IPv6PrefixDelegation: true})
	if c.Params.PreAllocate != 4 || c.Params.MaxAllocate != 30 || c.ExcludeInterfaceTags["no-pods"] != "1" || c.ClusterName != "blue" ||
		!c.PrefixDelegation || !c.IPv6PrefixDelegation {
		t.Fatalf("engine config %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
