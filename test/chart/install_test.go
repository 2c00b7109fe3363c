package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/k8senv"
)

// requireKube returns the API server binaries' directory; without them the test ends by
// internal/testenv's rule.
func requireKube(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("short mode: needs a real kube-apiserver and etcd")
	}
	d, err := k8senv.BinDir()
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	return d
}

// writeKubeconfig writes a kubeconfig for cfg (the environment's admin token) for helm and
// kubectl.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
`, cfg.Host, cfg.BearerToken)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func adminClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	s := allotk8s.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// objectsOf decodes a rendered manifest into unstructured objects (kind, namespace, name).
func objectsOf(t *testing.T, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	raws, err := splitYAML(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, r := range raws {
		u := &unstructured.Unstructured{}
		if err := yamlToUnstructured(r, u); err != nil {
			t.Fatalf("%v\n%s", err, r)
		}
		out = append(out, u)
	}
	return out
}

// exists reports whether the API server has the object (any error but NotFound fails).
func exists(t *testing.T, c client.Client, o *unstructured.Unstructured) bool {
	t.Helper()
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(o.GroupVersionKind())
	err := c.Get(context.Background(), client.ObjectKeyFromObject(o), cur)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("get %s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return cur.GetDeletionTimestamp() == nil
}

// TestHelmInstallExamples installs every example into a real API server with helm, so the
// API server itself validates every object (field types, CRD schemas and CEL rules, RBAC
// rules, the admission policy's and the webhook configuration's CEL), checks that each object
// of the release exists, upgrades (the webhook certificate must survive), and uninstalls
// (pools stay, everything else goes).
func TestHelmInstallExamples(t *testing.T) {
	requireKube(t)
	env := k8senv.Start(t, k8senv.Options{CRDDir: "-"}) // the chart installs the CRDs
	kc := writeKubeconfig(t, env.Config)
	helmEnv := []string{"KUBECONFIG=" + kc}
	c := adminClient(t, env.Config)
	ctx := context.Background()
	for _, vc := range exampleCases(t) {
		t.Run(vc.name, func(t *testing.T) {
			args := append([]string{"install", ReleaseName, chartDir(t), "--namespace", Namespace}, vc.args(t)...)
			out := runHelm(t, helmEnv, args...)
			notes := out[max(0, bytes.Index(out, []byte("NOTES:"))):]
			if !bytes.Contains(notes, []byte(" is installed in "+Namespace+" (mode: ")) {
				t.Errorf("helm install printed no NOTES:\n%s", out)
			}
			t.Logf("%s", notes)
			manifest := runHelm(t, helmEnv, "get", "manifest", ReleaseName, "--namespace", Namespace)
			objs := objectsOf(t, manifest)
			if len(objs) < 8 {
				t.Fatalf("release has %d objects", len(objs))
			}
			var kept []*unstructured.Unstructured
			for _, o := range objs {
				if !exists(t, c, o) {
					t.Errorf("%s %s/%s of the release is not in the API server", o.GetKind(), o.GetNamespace(), o.GetName())
				}
				if o.GetAnnotations()["helm.sh/resource-policy"] == "keep" {
					kept = append(kept, o)
				}
			}
			for _, crd := range []string{"ippools", "allotnodes", "clustercidrconfigs", "sharedippools", "addressclaims", "allotendpoints", "reservedips", "allotsubnets"} {
				var o apiextensionsv1.CustomResourceDefinition
				if err := c.Get(ctx, client.ObjectKey{Name: crd + ".allot.io"}, &o); err != nil {
					t.Errorf("CRD %s: %v", crd, err)
				}
			}
			if strings.Contains(string(manifest), "kind: ValidatingWebhookConfiguration") {
				checkWebhookLive(t, c, helmEnv, vc)
			}
			if strings.Contains(string(manifest), "kind: FlowSchema") {
				checkFlowSchemaLive(t, c, env.Config)
			}
			runHelm(t, helmEnv, "uninstall", ReleaseName, "--namespace", Namespace, "--wait", "--timeout", "2m")
			for _, o := range objs {
				keep := o.GetAnnotations()["helm.sh/resource-policy"] == "keep"
				if got := exists(t, c, o); got != keep {
					t.Errorf("after uninstall %s %s exists: %v (kept: %v)", o.GetKind(), o.GetName(), got, keep)
				}
			}
			// The next example starts from a cluster without allot's objects.
			for _, o := range kept {
				if err := c.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
		})
	}
}

// checkWebhookLive: with the operator not running, the webhook the chart registered must
// refuse a pool created by someone else (failurePolicy Fail, so the API server did call it),
// while the chart's own pools were created; and an upgrade keeps the certificate.
func checkWebhookLive(t *testing.T, c client.Client, helmEnv []string, vc valuesCase) {
	t.Helper()
	ctx := context.Background()
	pool := &allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: "not-from-the-chart"}}
	pool.Spec.IPv4 = &allotv1.SharedPoolFamily{Subnet: "192.168.77.0/24", IPs: []string{"192.168.77.10-192.168.77.20"}}
	err := c.Create(ctx, pool)
	if err == nil || !strings.Contains(err.Error(), "sharedippools.allot.io") {
		_ = c.Delete(ctx, pool)
		t.Errorf("a SharedIPPool created while no operator answers: %v; want the webhook's failure (failurePolicy Fail)", err)
	}
	var before corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "allot-operator-webhook-tls"}, &before); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"upgrade", ReleaseName, chartDir(t), "--namespace", Namespace}, vc.args(t)...)
	runHelm(t, helmEnv, args...)
	var after corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "allot-operator-webhook-tls"}, &after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before.Data["tls.crt"], after.Data["tls.crt"]) || !bytes.Equal(before.Data["ca.crt"], after.Data["ca.crt"]) {
		t.Errorf("helm upgrade replaced the webhook's certificate: running replicas and the caBundle would disagree")
	}
}

// TestManifestsApply applies deploy/manifests/allot.yaml with kubectl as its header says, into a
// fresh API server, and checks every object is there.
func TestManifestsApply(t *testing.T) {
	dir := requireKube(t)
	kubectl := filepath.Join(dir, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		testenv.Missing(t, "kubectl is not in "+dir+" (make kube-binaries)")
	}
	env := k8senv.Start(t, k8senv.Options{CRDDir: "-"})
	kc := writeKubeconfig(t, env.Config)
	p := filepath.Join(repoRoot(t), "deploy", "manifests", "allot.yaml")
	apply := func() ([]byte, error) {
		cmd := exec.Command(kubectl, "--kubeconfig", kc, "apply", "--server-side", "-f", p)
		return cmd.CombinedOutput()
	}
	out, err := apply()
	if err != nil {
		// The documented second run, once the CRDs are established.
		if !strings.Contains(string(out), "ensure CRDs are installed first") {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
		actx, acancel := context.WithTimeout(context.Background(), time.Minute)
		_ = testenv.Poll(actx, func() (bool, string) { out, err = apply(); return err == nil, "" })
		acancel()
		if err != nil {
			t.Fatalf("kubectl apply (second run): %v\n%s", err, out)
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	c := adminClient(t, env.Config)
	for _, o := range objectsOf(t, b) {
		if !exists(t, c, o) {
			t.Errorf("%s %s/%s is not in the API server after kubectl apply", o.GetKind(), o.GetNamespace(), o.GetName())
		}
	}
}
