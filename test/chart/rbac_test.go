package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/allot-ipam/allot/core/api"
	apiclient "github.com/allot-ipam/allot/core/api/client"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/test/ec2fake"
)

// TestLiveMultiPoolSharedPools: the chart's multi-pool mode with a shared-pool network and the
// webhook on. The agent serves a pod from its node's block and another from a shared pool,
// the operator hands out the block, keeps pool status, frees the claims of a deleted
// StatefulSet pod and answers the webhook through the chart's Service and certificate; at the
// end the DaemonSet is deleted and the agent stopped (the uninstall path). Every request of
// both, as the chart's ServiceAccounts, must be allowed by the chart's RBAC.
func TestLiveMultiPoolSharedPools(t *testing.T) {
	l := startLive(t, `
mode: multipool
operator:
  replicas: 1
sharedPools:
  networks: [underlay]
  pools:
    - name: underlay-v4
      default: true
      ipv4:
        subnet: 172.18.0.0/24
        ips: ["172.18.0.10-172.18.0.50"]
        gateway: 172.18.0.1
  reservedIPs:
    - name: infra
      ips: ["172.18.0.10"]
  gc:
    grace: 2s
webhook:
  enabled: true
`)
	ctx := context.Background()
	l.node("node-a", nil, "")

	// The operator, with its webhook behind the chart's Service.
	opCfg := l.operatorConfig(l.saKubeconfig("allot-operator"))
	whPort := freePort(t)
	set(opCfg, "cluster.sharedPools.webhook.address", fmt.Sprintf(":%d", whPort))
	set(opCfg, "cluster.sharedPools.webhook.certDir", l.webhookCerts())
	l.webhookEndpoint(whPort)
	op := l.startAllotd("operator", opCfg, "POD_NAME=allot-operator-1", "POD_NAMESPACE="+Namespace, "NODE_NAME=node-a")

	agCfg, _ := l.agentConfig(l.saKubeconfig("allot-agent"))
	podName := l.agentPod("node-a")
	ag := l.startAllotd("agent", agCfg, "NODE_NAME=node-a", "POD_NAME="+podName, "POD_NAMESPACE="+Namespace)
	cli := apiclient.New(agCfg["socket"].(string))
	defer cli.Close()
	l.waitAllotNode("node-a")

	// A pod of the default network: the node's block of the pool "default", both families.
	web := l.pod("default", "web-1", "node-a", nil)
	actx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	a, err := cli.Allocate(actx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "ctr-web-1", IfName: "eth0"}, Network: "allot",
		Pod: api.PodRef{Namespace: "default", Name: "web-1", UID: string(web.UID)}})
	if err != nil {
		t.Fatalf("ADD of a multi-pool pod: %v", err)
	}
	var fams []string
	for _, ip := range a.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err != nil || ip.Pool != "default" {
			t.Fatalf("multi-pool address %+v", ip)
		}
		fams = append(fams, map[bool]string{true: "v4", false: "v6"}[p.Addr().Is4()])
		if !netip.MustParsePrefix("10.244.0.0/16").Contains(p.Addr()) && !netip.MustParsePrefix("fd00:10:244::/56").Contains(p.Addr()) {
			t.Errorf("address %s is not from the chart's default pool", p)
		}
	}
	if strings.Join(fams, ",") != "v4,v6" {
		t.Errorf("want one address per family from the dual-stack default pool, got %+v", a.IPs)
	}

	// A StatefulSet pod of the shared network: an AddressClaim and an AllotEndpoint.
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10.1"}}}}}}
	if err := l.c.Create(ctx, sts); err != nil {
		t.Fatal(err)
	}
	db := l.pod("default", "db-0", "node-a", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: sts.UID, Controller: ptr.To(true)})
	s, err := cli.Allocate(actx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "ctr-db-0", IfName: "eth0"}, Network: "underlay",
		Pod: api.PodRef{Namespace: "default", Name: "db-0", UID: string(db.UID)}})
	if err != nil {
		t.Fatalf("ADD of a shared-pool pod: %v", err)
	}
	if len(s.IPs) != 1 || s.IPs[0].Pool != "underlay-v4" || s.IPs[0].Address == "172.18.0.10/24" {
		t.Fatalf("shared-pool address %+v (172.18.0.10 is reserved)", s.IPs)
	}
	claims := func() int {
		var l2 allotv1.AddressClaimList
		if err := l.c.List(ctx, &l2); err != nil {
			t.Fatal(err)
		}
		return len(l2.Items)
	}
	if n := claims(); n != 1 {
		t.Fatalf("%d AddressClaims after one shared ADD", n)
	}

	// ADD and DEL of a shared-pool pod (not of a StatefulSet): the agent deletes its claim and
	// endpoint.
	cache := l.pod("default", "cache-1", "node-a", nil)
	cacheRef := api.PodRef{Namespace: "default", Name: "cache-1", UID: string(cache.UID)}
	if _, err := cli.Allocate(actx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "ctr-cache-1", IfName: "eth0"}, Network: "underlay", Pod: cacheRef}); err != nil {
		t.Fatalf("ADD of a second shared-pool pod: %v", err)
	}
	if err := cli.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: "ctr-cache-1", IfName: "eth0"}, Network: "underlay", Pod: cacheRef}); err != nil {
		t.Fatalf("DEL of a shared-pool pod: %v", err)
	}
	if n := claims(); n != 1 {
		t.Fatalf("%d AddressClaims after the shared DEL, want the StatefulSet pod's only", n)
	}

	// DEL of the multi-pool pod.
	if err := cli.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: "ctr-web-1", IfName: "eth0"}, Network: "allot",
		Pod: api.PodRef{Namespace: "default", Name: "web-1", UID: string(web.UID)}}); err != nil {
		t.Fatalf("DEL: %v", err)
	}

	// The webhook, called by the API server through the chart's Service and caBundle, refuses a
	// pool overlapping the chart's (another subnet containing it).
	bad := &allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: "overlapping"}}
	bad.Spec.IPv4 = &allotv1.SharedPoolFamily{Subnet: "172.18.0.0/16", IPs: []string{"172.18.0.60-172.18.0.70"}}
	eventually(t, "the webhook refuses an overlapping pool", 30*time.Second, func() (bool, string) {
		err := l.c.Create(ctx, bad)
		if err == nil {
			_ = l.c.Delete(ctx, bad)
			return false, "created"
		}
		// "denied the request": the operator answered (not a TLS or connection failure).
		return strings.Contains(err.Error(), "denied the request"), err.Error()
	})

	// The operator's status of the pools.
	eventually(t, "IPPool status", 30*time.Second, func() (bool, string) {
		var p allotv1.IPPool
		if err := l.c.Get(ctx, client.ObjectKey{Name: "default"}, &p); err != nil {
			return false, err.Error()
		}
		return p.Status.ObservedGeneration > 0, fmt.Sprintf("%+v", p.Status)
	})

	// The operator's live reads the run above may not make: an AllotNode with blocks in doubt
	// (a write that failed ambiguously) is read with a GET.
	l.checkAllowed("allot-operator", authorizationv1.ResourceAttributes{Verb: "get", Group: "allot.io", Resource: "allotnodes", Name: "node-a"})

	// A request for a pool that does not exist: the operator reads the pool from the API server
	// (a GET the cache cannot answer, core/operator/livepool.go) before reporting it.
	ghost := &allotv1.AllotNode{ObjectMeta: metav1.ObjectMeta{Name: "node-ghost"}}
	ghost.Spec.IPAM.Pools.Requested = []allotv1.PoolRequest{{Pool: "nosuch", Needed: allotv1.AddressCounts{IPv4: 1}}}
	if err := l.c.Create(ctx, ghost); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a request for a missing pool reported", 30*time.Second, func() (bool, string) {
		if err := l.c.Get(ctx, client.ObjectKeyFromObject(ghost), ghost); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(ghost.Status.Conditions, allotv1.ConditionPoolsFulfilled)
		return c != nil && c.Reason == allotv1.ReasonPoolNotFound, fmt.Sprintf("%+v", c)
	})

	// The StatefulSet and its pod go: the operator's collector frees the claim and endpoint.
	// No kubelet confirms the deletion of a bound pod here: delete it at once.
	if err := l.c.Delete(ctx, db, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	if err := l.c.Delete(ctx, sts); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the operator frees the claims of a deleted StatefulSet pod", 60*time.Second, func() (bool, string) {
		n := claims()
		return n == 0, fmt.Sprintf("%d claims", n)
	})
	eventually(t, "events recorded by the operator", 30*time.Second, func() (bool, string) {
		var ev eventsv1.EventList
		if err := l.c.List(ctx, &ev); err != nil {
			return false, err.Error()
		}
		for _, e := range ev.Items {
			if e.ReportingController == "allot-operator" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none from allot-operator", len(ev.Items))
	})
	var lease coordinationv1.Lease
	if err := l.c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "allot-operator"}, &lease); err != nil {
		t.Errorf("leader election Lease: %v", err)
	}

	if err := op.stop(30 * time.Second); err != nil {
		t.Errorf("operator stop: %v", err)
	}
	if daemonWritesConflist(t) {
		checkCNIUninstall(t, l, agCfg, ag, podName)
	} else {
		t.Log("allotd's daemon does not manage the network configuration yet (core/daemon does not use core/cniinstall): the conflist and uninstall checks do not run")
	}
}

// TestLiveClusterCIDR: the chart's clustercidr example; the operator writes the Nodes' pod
// CIDRs (with a condition and an Event), as its ServiceAccount.
func TestLiveClusterCIDR(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(t), "examples", "clustercidr.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	l := startLive(t, string(b)+"\noperator:\n  replicas: 1\n")
	ctx := context.Background()
	l.node("node-a", nil, "")
	l.node("node-b", map[string]string{"allot.io/node-class": "dense"}, "")
	op := l.startAllotd("operator", l.operatorConfig(l.saKubeconfig("allot-operator")), "POD_NAMESPACE="+Namespace)
	eventually(t, "pod CIDRs on both nodes", 60*time.Second, func() (bool, string) {
		var nodes corev1.NodeList
		if err := l.c.List(ctx, &nodes); err != nil {
			return false, err.Error()
		}
		got := map[string][]string{}
		for _, n := range nodes.Items {
			got[n.Name] = n.Spec.PodCIDRs
		}
		// node-a: not 10.244.0.0/24, which the example reserves.
		ok := len(got["node-a"]) == 2 && got["node-a"][0] == "10.244.1.0/24" && len(got["node-b"]) == 2 &&
			strings.HasPrefix(got["node-b"][0], "10.250.") && strings.HasSuffix(got["node-b"][0], "/23") &&
			strings.HasSuffix(got["node-b"][1], "/119")
		return ok, fmt.Sprint(got)
	})
	var cfg allotv1.ClusterCIDRConfig
	eventually(t, "ClusterCIDRConfig status", 30*time.Second, func() (bool, string) {
		if err := l.c.Get(ctx, client.ObjectKey{Name: "default"}, &cfg); err != nil {
			return false, err.Error()
		}
		return cfg.Status.AllocatedBlocks == 1, fmt.Sprintf("%+v", cfg.Status)
	})
	// The chart's agent, as its ServiceAccount, serves a pod of node-b from node-b's pod CIDR.
	var nb corev1.Node
	if err := l.c.Get(ctx, client.ObjectKey{Name: "node-b"}, &nb); err != nil {
		t.Fatal(err)
	}
	agCfg, _ := l.agentConfig(l.saKubeconfig("allot-agent"))
	ag := l.startAllotd("agent", agCfg, "NODE_NAME=node-b", "POD_NAME="+l.agentPod("node-b"), "POD_NAMESPACE="+Namespace)
	cli := apiclient.New(agCfg["socket"].(string))
	defer cli.Close()
	p := l.pod("default", "app-1", "node-b", nil)
	actx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	a, err := cli.Allocate(actx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "ctr-app-1", IfName: "eth0"}, Network: "allot",
		Pod: api.PodRef{Namespace: "default", Name: "app-1", UID: string(p.UID)}})
	if err != nil {
		t.Fatalf("ADD in clustercidr mode: %v", err)
	}
	// One address per family, each from node-b's pod CIDR of that family, whose first address
	// is the gateway.
	if len(a.IPs) != len(nb.Spec.PodCIDRs) {
		t.Fatalf("ADD in clustercidr mode: %+v, want one address per pod CIDR of node-b %v", a.IPs, nb.Spec.PodCIDRs)
	}
	for _, ip := range a.IPs {
		addr := netip.MustParsePrefix(ip.Address).Addr()
		var podCIDR netip.Prefix
		for _, s := range nb.Spec.PodCIDRs {
			if c := netip.MustParsePrefix(s); c.Addr().Is4() == addr.Is4() {
				podCIDR = c
			}
		}
		if !podCIDR.Contains(addr) || ip.Gateway != podCIDR.Addr().Next().String() {
			t.Fatalf("ADD in clustercidr mode: %+v, want addresses of node-b's pod CIDRs %v with their first address as gateway", a.IPs, nb.Spec.PodCIDRs)
		}
	}
	if err := ag.stop(30 * time.Second); err != nil {
		t.Errorf("agent stop: %v", err)
	}
	if err := op.stop(30 * time.Second); err != nil {
		t.Errorf("operator stop: %v", err)
	}
}

// TestLiveENI: the chart's aws-eni example pointed at the EC2 fake: the operator attaches an
// ENI and assigns addresses to the node, the agent serves a pod from them. Every EC2 action the
// backend called must be allowed by deploy/aws/iam-policy.json too.
func TestLiveENI(t *testing.T) {
	requireKube(t)
	fake := ec2fake.New(ec2fake.Options{Seed: 7})
	vpc := fake.AddVPC(ec2fake.VPC{CIDR: netip.MustParsePrefix("10.0.0.0/16")})
	subnet, err := fake.AddSubnet(ec2fake.Subnet{VPC: vpc, AZ: "us-east-1a", CIDR: netip.MustParsePrefix("10.0.1.0/24"),
		Tags: map[string]string{"kubernetes.io/role/pods": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	sg := fake.AddSecurityGroup(ec2fake.SecurityGroup{VPC: vpc, Name: "nodes"})
	inst, err := fake.AddInstance(ec2fake.Instance{Type: "m5.large", Subnet: subnet, SecurityGroups: []string{sg}})
	if err != nil {
		t.Fatal(err)
	}
	url := ec2fake.Start(t, fake)
	b, err := os.ReadFile(filepath.Join(chartDir(t), "examples", "aws-eni.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	l := startLive(t, string(b)+fmt.Sprintf(`
operator:
  replicas: 1
k8sServiceHost: ""
datapath:
  type: none
eni:
  config:
    securityGroups: [%s]
  aws:
    region: us-east-1
    endpoint: %s
    vpc-id: %s
`, sg, url, vpc))
	ctx := context.Background()
	l.node("node-a", map[string]string{"node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "us-east-1a"}, "aws:///us-east-1a/"+inst)
	awsEnv := []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true"}
	op := l.startAllotd("operator", l.operatorConfig(l.saKubeconfig("allot-operator")), append(awsEnv, "POD_NAMESPACE="+Namespace)...)
	agCfg, _ := l.agentConfig(l.saKubeconfig("allot-agent"))
	podName := l.agentPod("node-a")
	ag := l.startAllotd("agent", agCfg, "NODE_NAME=node-a", "POD_NAME="+podName, "POD_NAMESPACE="+Namespace)
	cli := apiclient.New(agCfg["socket"].(string))
	defer cli.Close()
	l.waitAllotNode("node-a")
	p := l.pod("default", "app-1", "node-a", nil)
	actx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	a, err := cli.Allocate(actx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "ctr-app-1", IfName: "eth0"}, Network: "allot",
		Pod: api.PodRef{Namespace: "default", Name: "app-1", UID: string(p.UID)}})
	if err != nil {
		t.Fatalf("ADD in ENI mode: %v", err)
	}
	if len(a.IPs) != 1 || !netip.MustParsePrefix("10.0.1.0/24").Contains(netip.MustParsePrefix(a.IPs[0].Address).Addr()) {
		t.Fatalf("ENI address %+v is not from the subnet", a.IPs)
	}
	if err := ag.stop(30 * time.Second); err != nil {
		t.Errorf("agent stop: %v", err)
	}
	if err := op.stop(30 * time.Second); err != nil {
		t.Errorf("operator stop: %v", err)
	}
	// What the backend really called, against the IAM policy.
	pol := readPolicy(t, filepath.Join(repoRoot(t), "deploy", "aws", "iam-policy.json"))
	allowed := map[string]bool{}
	for _, st := range pol.Statement {
		for _, a := range st.Action {
			allowed[a] = true
		}
	}
	for action, st := range fake.Stats() {
		if st.Calls > 0 && !allowed["ec2:"+action] {
			t.Errorf("the backend called %s (%d times), which deploy/aws/iam-policy.json does not allow", action, st.Calls)
		}
	}
	var an allotv1.AllotNode
	if err := l.c.Get(ctx, client.ObjectKey{Name: "node-a"}, &an); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// checkCNIUninstall: the agent wrote the chart's conflist once it served; a stop while its
// DaemonSet exists (a rolling update) leaves it; after the DaemonSet is deleted (helm
// uninstall) a stop removes it. The agent reads its Pod and DaemonSet as the chart's
// ServiceAccount.
func checkCNIUninstall(t *testing.T, l *liveEnv, agCfg map[string]any, ag *proc, podName string) {
	cniCfg, _ := agCfg["cni"].(map[string]any)
	confDir, _ := cniCfg["confDir"].(string)
	confFile := filepath.Join(confDir, fmt.Sprint(cniCfg["confName"]))
	var want, got any
	if err := json.Unmarshal([]byte(fmt.Sprint(cniCfg["conflist"])), &want); err != nil {
		t.Fatalf("rendered cni.conflist: %v", err)
	}
	eventually(t, "the agent writes "+confFile, 30*time.Second, func() (bool, string) {
		b, err := os.ReadFile(confFile)
		if err != nil {
			return false, err.Error()
		}
		if err := json.Unmarshal(b, &got); err != nil {
			return false, err.Error()
		}
		return reflect.DeepEqual(got, want), string(b)
	})

	// A rolling update (the DaemonSet stays): the stopped agent leaves the node's
	// configuration in place. Its replacement serves from the same store.
	if err := ag.stop(30 * time.Second); err != nil {
		t.Errorf("agent stop: %v", err)
	}
	if _, err := os.Stat(confFile); err != nil {
		t.Errorf("cni.uninstall auto: the agent removed the configuration on a stop while its DaemonSet exists: %v", err)
	}
	ag = l.startAllotd("agent-2", agCfg, "NODE_NAME=node-a", "POD_NAME="+podName, "POD_NAMESPACE="+Namespace)

	// helm uninstall deletes the DaemonSet, then (at once, in Helm's uninstall order) the
	// RoleBindings, Roles, ClusterRoleBindings, ClusterRoles, ConfigMaps and ServiceAccounts;
	// the kubelet stops the agent only after the garbage collector deleted its Pod, so by then
	// its ServiceAccount and RBAC are gone. The agent must still see that it is uninstalled.
	l.uninstalled = time.Now()
	runHelm(t, l.helmEnv, "uninstall", ReleaseName, "--namespace", Namespace)
	if err := ag.stop(30 * time.Second); err != nil {
		t.Errorf("agent stop: %v", err)
	}
	if _, err := os.Stat(confFile); !os.IsNotExist(err) {
		t.Errorf("cni.uninstall auto: %s is still there after helm uninstall (%v): the agent decided at stop, when its "+
			"ServiceAccount and RBAC were already deleted; agent log:\n%s", confFile, err, tail(ag.log, 15))
	}
}

// daemonWritesConflist reports whether the daemon links the code that writes and removes the
// network configuration (core/cniinstall), which the agent's cni section drives.
func daemonWritesConflist(t *testing.T) bool {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./core/daemon")
	cmd.Dir = repoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./core/daemon: %v", err)
	}
	return slices.Contains(strings.Fields(string(out)), "github.com/allot-ipam/allot/core/cniinstall")
}

// checkAllowed fails the test unless the chart's RBAC lets ServiceAccount sa make the request
// (a SubjectAccessReview), for requests a test cannot provoke.
func (l *liveEnv) checkAllowed(sa string, attrs authorizationv1.ResourceAttributes) {
	l.t.Helper()
	rev := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:" + Namespace + ":" + sa, ResourceAttributes: &attrs}}
	got, err := l.cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), rev, metav1.CreateOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	if !got.Status.Allowed {
		l.t.Errorf("%s may not %s %s/%s: %s", sa, attrs.Verb, attrs.Group, attrs.Resource, got.Status.Reason)
	}
}
