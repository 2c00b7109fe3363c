package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/importer"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/k8senv"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// importedAutoPool is a Spiderpool auto pool as spiderpool-controller cuts it from a
// SpiderSubnet for Deployment default/web (its owner labels), holding three addresses that
// are not the subnet's lowest (a fresh cut would take 172.19.40.1-3), two of them given to
// the Deployment's running pods.
const importedAutoPool = `apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderSubnet
metadata: {name: vlan200}
spec: {ipVersion: 4, subnet: 172.19.0.0/16, ips: ["172.19.40.1-172.19.40.100"], gateway: 172.19.0.1}
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata:
  name: auto4-web-eth0-9f8e7
  labels:
    ipam.spidernet.io/owner-spider-subnet: vlan200
    ipam.spidernet.io/owner-application-gv: apps_v1
    ipam.spidernet.io/owner-application-kind: Deployment
    ipam.spidernet.io/owner-application-namespace: default
    ipam.spidernet.io/owner-application-name: web
    ipam.spidernet.io/owner-application-uid: UID
    ipam.spidernet.io/interface: eth0
    ipam.spidernet.io/ippool-reclaim: "true"
    ipam.spidernet.io/ip-version: IPv4
spec:
  ipVersion: 4
  subnet: 172.19.0.0/16
  ips: ["172.19.40.7-172.19.40.9"]
  gateway: 172.19.0.1
  podAffinity: {matchLabels: {app: web}}
status:
  allocatedIPs: '{"172.19.40.7":{"pod":"default/web-a","podUid":"a0000000-0000-4000-8000-000000000001"},"172.19.40.8":{"pod":"default/web-b","podUid":"a0000000-0000-4000-8000-000000000002"}}'
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderEndpoint
metadata: {name: web-a, namespace: default}
status:
  current: {uid: a0000000-0000-4000-8000-000000000001, node: worker-1, ips: [{interface: eth0, ipv4: 172.19.40.7/16, ipv4Pool: auto4-web-eth0-9f8e7}]}
  ownerControllerType: ReplicaSet
  ownerControllerName: web-5d8f
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderEndpoint
metadata: {name: web-b, namespace: default}
status:
  current: {uid: a0000000-0000-4000-8000-000000000002, node: worker-1, ips: [{interface: eth0, ipv4: 172.19.40.8/16, ipv4Pool: auto4-web-eth0-9f8e7}]}
  ownerControllerType: ReplicaSet
  ownerControllerName: web-5d8f
`

// TestImportAutoPoolAdopted migrates a running Deployment's Spiderpool auto pool on a real API
// server: allotctl import, then the operator starts. The subnet controller adopts the imported
// pool for the Deployment (matched by application, interface, subnet and family, as Spiderpool
// matches its owner labels) instead of cutting a pool of its own with other addresses: the
// same pool keeps the same addresses and its claims, no second pool appears, it is not
// reclaimed while the Deployment exists, and it grows with the Deployment around the
// addresses it has.
func TestImportAutoPoolAdopted(t *testing.T) {
	env := k8senv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := k8senv.InstallManifests(ctx, env.Config, "testdata/peer-crds"); err != nil {
		t.Fatal(err)
	}
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	replicas := int32(2)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"ipam.spidernet.io/subnet": `{"ipv4":["vlan200"]}`}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}}}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	createSpiderObjects(ctx, t, env, strings.Replace(importedAutoPool, "UID", string(dep.UID), 1))

	run(t, "import", "--kubeconfig", writeKubeconfig(t, env.Config))
	startWebhook(ctx, t, env, c)

	const name = "auto4-web-eth0-9f8e7"
	// The operator has fitted the pool to the Deployment once it names the Deployment's
	// namespace (Spiderpool's pool did not).
	waitAutoPools(t, c, name, []string{"172.19.40.7-172.19.40.9"}, func(p *allotv1.SharedIPPool) error {
		if !slices.Equal(p.Spec.NamespaceName, []string{"default"}) || p.Annotations[allotv1.AnnotationAutoPoolAppUID] != string(dep.UID) {
			return fmt.Errorf("not fitted to the Deployment yet: namespaceName %v, annotations %v", p.Spec.NamespaceName, p.Annotations)
		}
		return nil
	})
	for _, ip := range []string{"172.19.40.7", "172.19.40.8"} {
		var cl allotv1.AddressClaim
		if err := c.Get(ctx, client.ObjectKey{Name: "v4-" + ip}, &cl); err != nil || cl.Spec.Pool != name {
			t.Errorf("claim of %s: pool %q, %v", ip, cl.Spec.Pool, err)
		}
	}
	// A third replica: the pool grows by the subnet's lowest free address, keeping its own.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		replicas = 3
		dep.Spec.Replicas = &replicas
		return c.Update(ctx, dep)
	}); err != nil {
		t.Fatal(err)
	}
	waitAutoPools(t, c, name, []string{"172.19.40.1", "172.19.40.7-172.19.40.9"}, func(*allotv1.SharedIPPool) error { return nil })
}

// waitAutoPools waits until pool is the one auto pool of Deployment default/web, holding ips
// both in its spec and in its subnet's allocation, and check holds for it.
func waitAutoPools(t *testing.T, c client.Client, pool string, ips []string, check func(*allotv1.SharedIPPool) error) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "pool "+pool+" serving Deployment default/web with "+strings.Join(ips, ","), testenv.CondErr(func() error {
		ctx := context.Background()
		var l allotv1.SharedIPPoolList
		if err := c.List(ctx, &l, client.MatchingLabels{allotv1.LabelAutoPool: "true"}); err != nil {
			return err
		}
		if len(l.Items) != 1 || l.Items[0].Name != pool {
			names := []string{}
			for _, p := range l.Items {
				names = append(names, p.Name)
			}
			return fmt.Errorf("auto pools %v, want only %s", names, pool)
		}
		p := &l.Items[0]
		if p.Spec.IPv4 == nil || !slices.Equal(p.Spec.IPv4.IPs, ips) || p.Annotations[allotv1.AnnotationAutoPoolApp] != "Deployment/default/web" {
			return fmt.Errorf("pool %s: spec %+v, annotations %v", pool, p.Spec.IPv4, p.Annotations)
		}
		var s allotv1.AllotSubnet
		if err := c.Get(ctx, client.ObjectKey{Name: "vlan200"}, &s); err != nil {
			return err
		}
		if a := s.Status.Allocations; len(a) != 1 || a[0].Pool != pool || !slices.Equal(a[0].IPs, ips) {
			return fmt.Errorf("AllotSubnet vlan200 allocations %+v", a)
		}
		return check(p)
	}))
}

// createSpiderObjects creates the Spiderpool objects of a YAML stream as spiderpool-controller
// would have.
func createSpiderObjects(ctx context.Context, t *testing.T, env *k8senv.Env, yaml string) {
	t.Helper()
	dc, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := importer.Decode("spiderpool.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		gvr := schema.GroupVersionResource{Group: "spiderpool.spidernet.io", Version: "v2beta1",
			Resource: strings.ToLower(u.GetKind()) + "s"}
		var ri dynamic.ResourceInterface = dc.Resource(gvr)
		if u.GetNamespace() != "" {
			ri = dc.Resource(gvr).Namespace(u.GetNamespace())
		}
		if _, err := ri.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}
