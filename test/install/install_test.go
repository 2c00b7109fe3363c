package install

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/test/realnode"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	ns        = "kube-system"
	appNS     = "default"
	app       = "web"
	replicas  = 50
	testImage = "local.test/allot-testserver:v1"
)

// TestInstallOnRealNode is the user's path from an empty node to an uninstalled one.
func TestInstallOnRealNode(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	work := t.TempDir()

	c := startNode(ctx, t, work)
	n := &node{t: t, c: c, ctx: ctx}
	defer func() {
		if t.Failed() {
			n.dump()
		}
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("cluster stop: %v", err)
		}
		// A run that failed before helm uninstall leaves the agent's rules (it keeps them when
		// it stops while its DaemonSet exists, as in a rolling update): remove them here.
		sweepAllot(t)
	}()
	ext := newExternalHost(t, realnode.TestServerPath(work))

	// 1. No CNI configuration: the node is NotReady. helm install; the agent and the
	// operator start as pods; the node turns Ready once the agent has written the
	// configuration.
	if err := c.WaitNodeReady(ctx, false); err != nil {
		t.Fatalf("node before install: %v", err)
	}
	if es, _ := os.ReadDir(c.CNIConfDir); len(es) != 0 {
		t.Fatalf("CNI configuration before install: %v", es)
	}
	values := n.values(env.imageRef)
	start := time.Now()
	n.helm("install", "allot", env.chart, "--namespace", ns, "--values", values)
	n.step("agent and operator Running", 3*time.Minute, func() error {
		if err := n.podsRunning(ns, agentSelector, 1); err != nil {
			return err
		}
		return n.podsRunning(ns, operatorSelector, 1)
	})
	if err := c.WaitNodeReady(ctx, true); err != nil {
		t.Fatalf("node after install: %v", err)
	}
	t.Logf("node Ready %v after helm install", time.Since(start).Round(time.Millisecond))
	if _, err := os.Stat(filepath.Join(c.CNIConfDir, "05-allot.conflist")); err != nil {
		t.Fatalf("the agent's CNI configuration: %v", err)
	}

	// 2. 50 replicas, dual stack, every address from the pool and none twice; host-to-pod and
	// pod-to-pod HTTP.
	n.createDeployment(replicas)
	pods := n.waitApp(replicas, 5*time.Minute)
	n.checkAddresses(pods)
	n.checkTraffic(pods)

	// 3. Pod to a host outside the pod and non-masquerade ranges: it sees the node's address.
	for _, p := range pods[:3] {
		for _, fam := range []int{4, 6} {
			got := n.fetchFrom(p, fam, ext.url(fam))
			var who struct{ Remote string }
			if err := json.Unmarshal([]byte(got), &who); err != nil {
				t.Fatalf("external host answered %q: %v", got, err)
			}
			ap, err := netip.ParseAddrPort(who.Remote)
			if err != nil {
				t.Fatalf("external host saw %q: %v", who.Remote, err)
			}
			if ap.Addr() != ext.nodeAddr(fam) {
				t.Fatalf("pod %s (IPv%d) reached the external host from %s, want the node's %s (masquerade)", p.Name, fam, ap.Addr(), ext.nodeAddr(fam))
			}
		}
	}

	// 4. Scale to 0: every address is freed, as allotctl and the node object say. Then
	// scale up again and kill the agent during the churn: no duplicate, no leak.
	n.scale(0)
	n.waitApp(0, 3*time.Minute)
	n.step("allocations freed", time.Minute, func() error { return n.allocationsMatch(nil) })
	n.scale(replicas)
	n.step("churn under way", time.Minute, func() error {
		ps := n.appPods()
		running := 0
		for _, p := range ps {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running < 5 || running == replicas {
			return fmt.Errorf("%d of %d Running", running, replicas)
		}
		return nil
	})
	killed := n.deleteAgentPod()
	t.Logf("agent pod %s deleted during scale-up", killed)
	pods = n.waitApp(replicas, 5*time.Minute)
	n.step("a new agent Running", 3*time.Minute, func() error {
		return n.podsRunning(ns, agentSelector, 1)
	})
	n.checkAddresses(pods)
	n.step("allocations = pods after the agent restart", 2*time.Minute, func() error { return n.allocationsMatch(n.appPods()) })
	n.checkTraffic(pods[:5])

	// 5. helm upgrade to a new image tag keeps every allocation.
	before := n.allocations()
	newRef := n.retag(env.imageRef, "upgrade")
	n.helm("upgrade", "allot", env.chart, "--namespace", ns, "--values", n.values(newRef))
	n.step("the agent runs the new image", 3*time.Minute, func() error {
		return n.agentRunsImage(newRef)
	})
	n.step("allocations kept across the upgrade", time.Minute, func() error {
		after := n.allocations()
		if !slices.Equal(after, before) {
			return fmt.Errorf("allocations changed:\nbefore %v\nafter  %v", before, after)
		}
		return nil
	})
	n.checkTraffic(n.waitApp(replicas, time.Minute)[:5])

	// helm uninstall (after the workload is gone: its pods need allot-cni for DEL) leaves no
	// CNI configuration, no binary, no iptables rule and no eBPF program of allot's.
	n.deleteDeployment()
	n.waitApp(0, 3*time.Minute)
	n.helm("uninstall", "allot", "--namespace", ns, "--wait", "--timeout", "3m")
	n.step("agent gone", 3*time.Minute, func() error { return n.podsGone(ns, agentSelector) })
	n.checkUninstalled()
}

// checkUninstalled: nothing of allot's is left on the node.
func (n *node) checkUninstalled() {
	n.t.Helper()
	n.step("no CNI configuration", 30*time.Second, func() error {
		es, err := os.ReadDir(n.c.CNIConfDir)
		if err != nil {
			return err
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		if len(names) > 0 {
			return fmt.Errorf("CNI configuration directory holds %v", names)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(n.c.CNIBinDir, "allot-cni")); !os.IsNotExist(err) {
		n.t.Errorf("allot-cni still in %s: %v", n.c.CNIBinDir, err)
	}
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		out := n.run(cmd, "-t", "nat")
		if strings.Contains(out, "ALLOT") {
			n.t.Errorf("%s still shows allot's rules:\n%s", cmd, out)
		}
	}
	if es, err := os.ReadDir("/sys/fs/bpf/allot"); err == nil && len(es) > 0 {
		n.t.Errorf("eBPF objects left in /sys/fs/bpf/allot: %v", es)
	}
}

func (n *node) createDeployment(replicas int32) {
	n.t.Helper()
	labels := map[string]string{"app": app}
	no := false
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: app},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  &no,
					EnableServiceLinks:            &no,
					TerminationGracePeriodSeconds: ptr[int64](2),
					Containers: []corev1.Container{{
						Name: "web", Image: testImage, ImagePullPolicy: corev1.PullNever,
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
					}},
				},
			},
		},
	}
	if _, err := n.c.Client.AppsV1().Deployments(appNS).Create(n.ctx, d, metav1.CreateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }
