package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/importer"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/allot-ipam/allot/test/k8senv"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestImportCluster runs allotctl import against a real API server holding the peers' CRDs
// and objects (core/importer/testdata), allot's CRDs and admission policy (deploy/crds) and
// the allot operator with its validating webhook: --dry-run prints the diff and writes
// nothing; the import writes objects the API server's CEL rules and the webhook accept,
// keeps an AllotNode's existing block beside the imported ones, and a second import finds
// nothing to change.
func TestImportCluster(t *testing.T) {
	env := k8senv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := k8senv.InstallManifests(ctx, env.Config, "testdata/peer-crds"); err != nil {
		t.Fatal(err)
	}
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	createPeers(ctx, t, env, c)
	// worker-1 already holds a block allot gave it: the import must keep it.
	held := &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}
	held.Spec.IPAM.Pools.Allocated = []allotv1.PoolAllocation{{Pool: "default", CIDRs: []string{"10.10.7.0/24"}}}
	if err := c.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	startWebhook(ctx, t, env, c)
	kc := writeKubeconfig(t, env.Config)

	diff := run(t, "import", "--dry-run", "--kubeconfig", kc)
	for _, want := range []string{"--- /dev/null\n+++ b/IPPool/default\n", "--- a/AllotNode/worker-1\n+++ b/AllotNode/worker-1\n",
		"+        - 10.10.1.0/24\n", "+++ b/AddressClaim/v4-172.18.41.10\n", "+++ b/ClusterCIDRConfig/workers\n",
		"# dry run: 11 of 11 objects would change; nothing written\n"} {
		if !strings.Contains(diff, want) {
			t.Errorf("dry run lacks %q:\n%s", want, diff)
		}
	}
	var pools allotv1.IPPoolList
	if err := c.List(ctx, &pools); err != nil || len(pools.Items) != 0 {
		t.Fatalf("the dry run wrote IPPools: %d, %v", len(pools.Items), err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "worker-1"}, held); err != nil || fmt.Sprint(held.Spec.IPAM.Pools.Allocated) != "[{default [10.10.7.0/24]}]" {
		t.Fatalf("the dry run changed AllotNode worker-1: %v, %v", held.Spec.IPAM.Pools.Allocated, err)
	}

	out := run(t, "import", "--kubeconfig", kc)
	if !strings.Contains(out, "allotnode worker-1 updated\n") || !strings.Contains(out, "ippool mars created\n") ||
		!strings.Contains(out, "# 11 of 11 objects written\n") {
		t.Errorf("import output:\n%s", out)
	}
	// KEP-2593 ClusterCIDRs from a file (-f), written to the same cluster.
	kep := filepath.Join(t.TempDir(), "clustercidr.yaml")
	if err := os.WriteFile(kep, []byte(kepClusterCIDR), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := run(t, "import", "-f", kep, "--kubeconfig", kc); out != "clustercidrconfig racks-0 created\nclustercidrconfig racks-1 created\n# 2 of 2 objects written\n" {
		t.Errorf("import -f:\n%s", out)
	}
	checkImported(ctx, t, c)
	if again := run(t, "import", "--dry-run", "--kubeconfig", kc); !strings.HasSuffix(again, "# dry run: 0 of 11 objects would change; nothing written\n") {
		t.Errorf("a second import would change:\n%s", again)
	}
}

// createPeers creates the objects of core/importer/testdata as the peers would have, and
// the Nodes the AllotNodes belong to.
func createPeers(ctx context.Context, t *testing.T, env *k8senv.Env, c client.Client) {
	t.Helper()
	for _, ns := range []string{"prod", "cluster-demo"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"worker-1", "ip-10-0-1-5.ec2.internal"} {
		if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	dc, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../../core/importer/testdata/*.yaml")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := importer.Decode(f, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range objs {
			i := slices.IndexFunc(importer.Sources, func(s importer.Source) bool {
				return s.GVK.Kind == u.GetKind() && s.GVK.Group == u.GroupVersionKind().Group
			})
			s := importer.Sources[i]
			r := dc.Resource(s.GVK.GroupVersion().WithResource(s.Resource))
			var ri dynamic.ResourceInterface = r
			if s.Namespaced {
				ri = r.Namespace(u.GetNamespace())
			}
			if u.GetKind() == "ClusterCIDR" {
				continue // no CRD can serve it (testdata/peer-crds/README.md): imported from a file
			}
			if _, err := ri.Create(ctx, u, metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: create %s %s: %v", f, u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// startWebhook runs the allot operator with its validating webhook and waits until the API
// server calls it.
func startWebhook(ctx context.Context, t *testing.T, env *k8senv.Env, c client.Client) {
	t.Helper()
	opCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	opts := operator.Options{RESTConfig: env.Config, Identity: "import-test",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	opts.SharedPools.Webhook = operator.WebhookOptions{Address: "127.0.0.1:0", Register: true}
	// The imported claims name pods this API server has never run: the collector must not
	// free them while the test looks at them.
	opts.SharedPools.GCGrace = time.Hour
	go func() { done <- operator.Run(opCtx, opts) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})
	probe := &allotv1.ReservedIP{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: allotv1.ReservedIPSpec{IPs: []string{"10.0.0.9-10.0.0.1"}}}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var vwc admissionregv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: operator.DefaultWebhookConfigName}, &vwc); err != nil {
			return false, nil
		}
		return c.Create(ctx, probe, client.DryRunAll) != nil, nil
	})
	if err != nil {
		t.Fatalf("the webhook never refused an invalid ReservedIP: %v", err)
	}
}

func checkImported(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	get := func(name string, o client.Object) {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKey{Name: name}, o); err != nil {
			t.Fatal(err)
		}
	}
	var w allotv1.AllotNode
	get("worker-1", &w)
	if got := fmt.Sprint(w.Spec.IPAM.Pools.Allocated); !strings.Contains(got, "10.10.7.0/24 10.10.1.0/24 fd00:10::100/120") || !strings.Contains(got, "{mars [10.20.0.64/26]}") {
		t.Errorf("worker-1 blocks: %s", got)
	}
	var e allotv1.AllotNode
	get("ip-10-0-1-5.ec2.internal", &e)
	if e.Spec.IPAM.Pool["10.0.1.21"].Resource != "eni-0aaa" || e.Status.IPAM.Used["10.0.1.20"].Owner != "default/web-0" || e.Spec.ENI.InstanceID != "i-0123456789abcdef0" {
		t.Errorf("ENI node: %+v / %+v", e.Spec, e.Status.IPAM)
	}
	var cl allotv1.AddressClaim
	get("v4-172.18.41.10", &cl)
	if h := cl.Spec.Holder; cl.Spec.Pool != "vlan100-v4" || h.Pod != "db-0" || h.Interface != "net1" || h.StatefulSet != "db" || h.Node != "worker-2" {
		t.Errorf("claim: %+v", cl.Spec)
	}
	var s allotv1.AllotSubnet
	get("vlan100", &s)
	if len(s.Status.Allocations) != 1 || s.Status.Allocations[0].Pool != "auto4-demo-eth0-1a2b3" {
		t.Errorf("subnet allocations: %+v", s.Status.Allocations)
	}
	for _, o := range []struct {
		name string
		obj  client.Object
	}{{"mars", &allotv1.IPPool{}}, {"vlan100-v4", &allotv1.SharedIPPool{}}, {"routers", &allotv1.ReservedIP{}},
		{"racks-0", &allotv1.ClusterCIDRConfig{}}, {"workers", &allotv1.ClusterCIDRConfig{}}} {
		get(o.name, o.obj)
	}
}

// kepClusterCIDR is the ClusterCIDR of core/importer/testdata/clustercidr.yaml.
const kepClusterCIDR = `apiVersion: networking.k8s.io/v1alpha1
kind: ClusterCIDR
metadata: {name: racks}
spec:
  perNodeHostBits: 8
  ipv4: 10.100.0.0/16
  ipv6: fd00:100::/112
  nodeSelector:
    nodeSelectorTerms:
    - matchExpressions: [{key: rack, operator: In, values: [r1, r2]}]
    - matchExpressions: [{key: node-role.kubernetes.io/edge, operator: Exists}]
`
