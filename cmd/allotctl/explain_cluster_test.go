package main

import (
	"context"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/test/k8senv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod this node's allotd never served: allotctl reads the pod's node from a real API
// server and names the allot agent pod there to ask.
func TestExplainNamesThePodsNode(t *testing.T) {
	env := k8senv.Start(t)
	cl, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pause := []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: corev1.PodSpec{NodeName: "node-2", Containers: pause}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pending"}, Spec: corev1.PodSpec{Containers: pause}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "allot-agent-x7k2p", Labels: map[string]string{"app.kubernetes.io/name": "allot-agent"}},
			Spec: corev1.PodSpec{NodeName: "node-2", Containers: pause}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "allot-agent-a1b2c", Labels: map[string]string{"app.kubernetes.io/name": "allot-agent"}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: pause}},
	} {
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	kc := writeKubeconfig(t, env.Config)
	socket := startStandalone(t)
	_, err = allotctl(t, socket, "explain", "pod", "default/web", "--kubeconfig", kc)
	if err == nil || !strings.Contains(err.Error(), "runs on node node-2: ask its agent with\n  kubectl -n kube-system exec allot-agent-x7k2p -- allotctl explain pod default/web") {
		t.Fatalf("explain of a pod on another node: %v", err)
	}
	_, err = allotctl(t, socket, "explain", "pod", "default/pending", "--kubeconfig", kc)
	if err == nil || !strings.Contains(err.Error(), "is not scheduled to a node yet") {
		t.Fatalf("explain of an unscheduled pod: %v", err)
	}
}

func TestHintFor(t *testing.T) {
	p := api.PodRef{Namespace: "ns", Name: "p"}
	on := func(node string) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}} }
	agent := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "allot", Name: "allot-agent-1"}}
	for _, tc := range []struct {
		pod, agent *corev1.Pod
		want       string
	}{
		{on(""), nil, "not scheduled to a node yet"},
		{on("n1"), nil, "runs on node n1: run allotctl explain on that node"},
		{on("n1"), agent, "kubectl -n allot exec allot-agent-1 -- allotctl explain pod ns/p"},
	} {
		if got := hintFor(tc.pod, tc.agent, p); !strings.Contains(got, tc.want) {
			t.Errorf("hintFor(%s) = %q, want %q in it", tc.pod.Spec.NodeName, got, tc.want)
		}
	}
}

// Bad arguments are refused naming what is wrong, before allotd is asked.
func TestExplainArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain"}, "usage: allotctl explain pod NAMESPACE/NAME"},
		{[]string{"explain", "pod", "web"}, `pod: "web" is not NAMESPACE/NAME`},
		{[]string{"explain", "node", "x"}, `"node": explain takes pod NAMESPACE/NAME or container ID`},
		{[]string{"explain", "--dry-run"}, "--dry-run: -f pod.yaml is required"},
		{[]string{"explain", "--dry-run", "pod", "a/b"}, "--dry-run: takes the pod from -f"},
		{[]string{"explain", "-f", "x.yaml", "pod", "a/b"}, "-f: only with --dry-run"},
		{[]string{"-o", "yaml", "explain", "pod", "a/b"}, `--output: "yaml" is not table or json`},
	} {
		if _, err := allotctl(t, "/nonexistent.sock", tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("allotctl %v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestParsePod(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"kind: Pod\nmetadata: {name: a}\n", ""},
		{"kind: Deployment\nmetadata: {name: a}\n", `kind: "Deployment", want Pod`},
		{"kind: Pod\nmetadata: {}\n", "metadata.name: must not be empty"},
		{"kind: Pod\nmetadata: {name: a}\nspec: {nodeNam: x}\n", "unknown field"},
	} {
		p, err := parsePod([]byte(tc.in))
		switch {
		case tc.want == "" && (err != nil || p.Namespace != "default"):
			t.Errorf("%q: %v, namespace %q", tc.in, err, p.Namespace)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
}
