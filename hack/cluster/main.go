// Command cluster brings up a real one-node Kubernetes cluster on this machine (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, containerd, runc: see
// test/realnode) with allot installed by its Helm chart from a locally built image, and
// takes it down again (make cluster, make cluster-down).
//
//	cluster up   -image bin/allot-image.tar -helm PATH [-dir DIR]
//	cluster down [-dir DIR]
//
// The components outlive the command (their own sessions); `down` stops them and removes
// every trace they left on the machine (mounts, cgroups, links, iptables chains, files).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/allot-ipam/allot/test/install"
	"github.com/allot-ipam/allot/test/realnode"
)

const defaultDir = "/var/lib/allot-cluster"

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: cluster up -image TAR -helm PATH [-dir DIR] | cluster down [-dir DIR]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", defaultDir, "directory of the cluster's state, certificates and logs")
	image := fs.String("image", "bin/allot-image.tar", "allot's image (make image)")
	helm := fs.String("helm", os.Getenv("ALLOT_HELM"), "helm binary (make helm)")
	chart := fs.String("chart", "deploy/helm/allot", "the chart")
	_ = fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if os.Args[1] == "up" {
		err = up(ctx, *dir, *image, *helm, *chart)
	} else {
		err = down(ctx, *dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func up(ctx context.Context, dir, imageTar, helm, chart string) error {
	if helm == "" {
		return errors.New("no helm: pass -helm or set ALLOT_HELM (make helm prints the path)")
	}
	ref, err := install.ImageRef(imageTar)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "state.json")); err == nil {
		return fmt.Errorf("a cluster already runs from %s (make cluster-down first)", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	imgDir := filepath.Join(dir, "images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	fmt.Println("building the test images (pause, test server)")
	testImages, err := realnode.BuildImages(ctx, imgDir)
	if err != nil {
		return err
	}
	fmt.Println("starting etcd, kube-apiserver, controller-manager, scheduler, containerd, kubelet")
	c, err := realnode.Start(ctx, realnode.Options{Dir: dir, Images: []string{imageTar, testImages}, Detach: true, LockWait: time.Second})
	if err != nil {
		return err
	}
	values, err := install.Values(c, ref)
	if err != nil {
		return err
	}
	vpath := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(vpath, values, 0o644); err != nil {
		return err
	}
	fmt.Printf("helm install allot (%s)\n", ref)
	cmd := exec.CommandContext(ctx, helm, "install", "allot", chart, "--namespace", "kube-system", "--values", vpath,
		"--kubeconfig", c.Kubeconfig, "--wait", "--timeout", "5m")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("helm install: %w (logs in %s/logs; make cluster-down removes the cluster)", err, dir)
	}
	if err := c.WaitNodeReady(ctx, true); err != nil {
		return err
	}
	fmt.Printf(`
The node %s is Ready with allot installed. Try:

  export KUBECONFIG=%s
  %s get nodes,pods -A -o wide
  %s create deployment web --image=%s --replicas=3 -- /pause serve
  %s get allotnodes,ippools

Component logs are in %s/logs (kubectl logs cannot reach this kubelet; pod logs are in
%s/kubelet/pod-logs). make cluster-down stops everything and removes every trace.
`, c.NodeName, c.Kubeconfig, c.KubectlPath(), c.KubectlPath(), realnode.TestServerImage, c.KubectlPath(), dir, dir)
	return nil
}

func down(ctx context.Context, dir string) error {
	if err := realnode.Cleanup(ctx, dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	fmt.Printf("cluster in %s removed\n", dir)
	return nil
}
