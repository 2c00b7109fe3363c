package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-ipam/allot/internal/testenv"
)

// TestCluster proves the harness with the CNI reference plugins alone: NotReady without a
// CNI configuration, Ready with one, pods Running with addresses and answering HTTP, and
// nothing left after Stop.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: starts a real one-node cluster")
	}
	if err := Check(); err != nil {
		testenv.Missing(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	work := t.TempDir()
	imgs, err := BuildImages(ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c, err := Start(ctx, Options{Images: []string{imgs}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	dir := c.Dir
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop(context.Background())
		}
	}()
	if err := c.WaitNodeReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := c.InstallCNIPlugins("bridge", "host-local"); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"rn","plugins":[{"type":"bridge","bridge":"rncni0","isGateway":true,"ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.246.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":%q}}]}`, filepath.Join(c.Dir, "host-local"))
	if err := os.WriteFile(filepath.Join(c.CNIConfDir, "10-rn.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodeReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	var three int32 = 3
	no := false
	labels := map[string]string{"app": "ts"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "ts", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: &three, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no, EnableServiceLinks: &no,
			Containers: []corev1.Container{{Name: "ts", Image: TestServerImage, ImagePullPolicy: corev1.PullNever}},
		}},
	}}
	if _, err := c.Client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	testenv.Eventually(t, 3*time.Minute, "3 pods Running", func() (bool, string) {
		l, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=ts"})
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				running++
			}
		}
		pods = l.Items
		return running == 3, fmt.Sprintf("pods not Running: %+v\nkubelet:\n%s", l.Items, c.LogTail("kubelet", 40))
	})
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	for _, p := range pods {
		var body []byte
		for range 20 {
			resp, err := hc.Get("http://" + p.Status.PodIP + ":8080/fetch?url=" + "http://" + pods[0].Status.PodIP + ":8080/")
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			time.Sleep(200 * time.Millisecond) // sleep: bounded retries of a pod that may not listen yet
		}
		var who struct{ Addrs []string }
		if err := json.Unmarshal(body, &who); err != nil || len(who.Addrs) == 0 || !strings.HasPrefix(who.Addrs[0], pods[0].Status.PodIP+"/") {
			t.Fatalf("pod %s fetching pod %s: %q %v", p.Name, pods[0].Name, body, err)
		}
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("scratch dir left: %v", err)
	}
	if _, err := os.Stat("/sys/class/net/rncni0"); err == nil {
		t.Error("bridge rncni0 left")
	}
	for _, m := range mounts() {
		if strings.HasPrefix(m, dir) {
			t.Errorf("mount left: %s", m)
		}
	}
	if ms, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(ms) > 0 {
		t.Errorf("cgroups left: %v", ms)
	}
	if f, err := takeLock(ctx, time.Second); err != nil {
		t.Errorf("lock not released: %v", err)
	} else {
		f.Close()
	}
}
