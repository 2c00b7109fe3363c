// Package realnode runs a real one-node Kubernetes cluster on the machine the tests run on:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet that starts pods
// through containerd and runc, with the CNI reference plugins. Nothing is faked: the
// kubelet execs the CNI plugins of the node's CNI configuration, as on any cluster.
//
// The machine needs root, cgroups (v1 works: the kubelet is told failCgroupV1: false),
// containerd and runc (Debian packages), the kube binaries (make kube-binaries) and the CNI
// plugins (make cni-tools). Two settings matter on small VMs without CAP_SYS_RESOURCE:
// containerd's restrict_oom_score_adj (runc cannot set a negative oom_score_adj there) and
// the cgroupfs driver (no systemd).
//
// Only one cluster can run on a machine (the kubelet owns the kubepods cgroups and a few
// iptables chains): Start waits for a lock file. Stop, or Cleanup from another process,
// removes every trace.
package realnode

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/allot-ipam/allot/test/k8senv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// NodeName is the node's name (the kubelet's --hostname-override).
	NodeName   = "realnode"
	serviceVIP = "10.96.0.1"
	// RunDir holds the lock, containerd's socket and state: short paths under /run.
	RunDir   = "/run/allot-realnode"
	lockPath = "/run/allot-realnode.lock"
)

// Options tune Start. The zero value is fine.
type Options struct {
	// Dir is the scratch directory everything lives under (default: a new temporary one).
	Dir string
	// Images are OCI layout tars imported into containerd's k8s.io namespace before the
	// kubelet starts.
	Images []string
	// Log, if set, also receives every component's output.
	Log io.Writer
	// Detach starts the components in their own sessions, outliving this process (make
	// cluster); otherwise they die with it.
	Detach bool
	// LockWait bounds the wait for another cluster on this machine to go (default 20 min).
	LockWait time.Duration
}

// Cluster is a running one-node cluster.
type Cluster struct {
	Dir        string
	Kubeconfig string // admin
	NodeName   string
	// APIServerPort is the API server's port on 127.0.0.1 (hostNetwork pods reach it there:
	// no kube-proxy runs, so the service VIP is not routed).
	APIServerPort int
	Config        *rest.Config
	Client        kubernetes.Interface
	// CNIBinDir and CNIConfDir are containerd's CNI directories; the conf dir starts empty.
	CNIBinDir, CNIConfDir string
	// ContainerdSocket is containerd's API socket (for ctr --address).
	ContainerdSocket string
	// KubeBinDir holds kubectl and the other kube binaries.
	KubeBinDir string

	state *state
	lock  *os.File
	procs []*proc
	mu    sync.Mutex
}

// KubectlPath is the kubectl binary of the cluster's version.
func (c *Cluster) KubectlPath() string { return filepath.Join(c.KubeBinDir, "kubectl") }

// Kubectl runs kubectl against the cluster as admin.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, c.KubectlPath(), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
}

// Start brings the cluster up and returns once the node is registered (NotReady: no CNI
// configuration yet).
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	bin, cniSrc, err := prerequisites()
	if err != nil {
		return nil, err
	}
	lock, err := takeLock(ctx, o.LockWait)
	if err != nil {
		return nil, err
	}
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "allot-realnode-"); err != nil {
			lock.Close()
			return nil, err
		}
	}
	c := &Cluster{Dir: o.Dir, NodeName: NodeName, lock: lock, KubeBinDir: bin,
		CNIBinDir: filepath.Join(o.Dir, "cni", "bin"), CNIConfDir: filepath.Join(o.Dir, "cni", "net.d"),
		ContainerdSocket: filepath.Join(RunDir, "containerd.sock")}
	c.state = &state{Dir: o.Dir, Before: snapshotHost()}
	defer func() {
		if err != nil {
			_ = c.Stop(context.WithoutCancel(ctx))
		}
	}()
	for _, d := range []string{"logs", "cni/bin", "cni/net.d", "etcd", "kubelet/root", "kubelet/pki", "kubelet/pod-logs", "containerd/root", "containerd/opt"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return nil, err
	}
	if err := c.InstallCNIPluginsFrom(cniSrc, "loopback"); err != nil {
		return nil, err
	}
	l := &launcher{dir: o.Dir, log: o.Log, detach: o.Detach}

	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, kcmPort, schedPort, kubeletPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	c.APIServerPort = apiPort
	p, err := newPKI(filepath.Join(o.Dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("realnode: pki: %w", err)
	}

	// etcd
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	pr, err := l.start("etcd", filepath.Join(bin, "etcd"), "--name=realnode", "--data-dir="+filepath.Join(o.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", peerPort), fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", peerPort),
		fmt.Sprintf("--initial-cluster=realnode=http://127.0.0.1:%d", peerPort), "--listen-metrics-urls=http://127.0.0.1:0",
		"--unsafe-no-fsync=true")
	if err != nil {
		return nil, err
	}
	c.add(pr)
	if err := waitHTTP(ctx, pr, etcdURL+"/health", "", nil); err != nil {
		return nil, err
	}

	// kube-apiserver
	pr, err = l.start("kube-apiserver", filepath.Join(bin, "kube-apiserver"), "--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", apiPort), "--advertise-address=127.0.0.1",
		"--tls-cert-file="+p.servingCert, "--tls-private-key-file="+p.servingKey,
		"--token-auth-file="+p.path("tokens.csv"), "--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.saPub, "--service-account-signing-key-file="+p.saKey,
		"--service-cluster-ip-range=10.96.0.0/24", "--enable-admission-plugins=NodeRestriction",
		"--kubelet-preferred-address-types=InternalIP,Hostname")
	if err != nil {
		return nil, err
	}
	c.add(pr)
	if err := waitHTTP(ctx, pr, fmt.Sprintf("https://127.0.0.1:%d/readyz", apiPort), p.tokens["admin"], p.caPEM); err != nil {
		return nil, err
	}
	kubeconfigs := map[string]string{}
	for _, comp := range []string{"admin", "kcm", "scheduler", "kubelet"} {
		if kubeconfigs[comp], err = p.kubeconfig(comp, apiPort); err != nil {
			return nil, err
		}
	}
	c.Kubeconfig = kubeconfigs["admin"]
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, err
	}
	c.Config.QPS, c.Config.Burst = 100, 200
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}

	// controller-manager and scheduler: leader election off (a restarted one would wait for
	// its own stale Lease); service-account credentials per controller, as in clusters.
	pr, err = l.start("kube-controller-manager", filepath.Join(bin, "kube-controller-manager"), "--kubeconfig="+kubeconfigs["kcm"],
		"--use-service-account-credentials=true", "--leader-elect=false", "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", kcmPort),
		"--authentication-kubeconfig="+kubeconfigs["kcm"], "--authorization-kubeconfig="+kubeconfigs["kcm"])
	if err != nil {
		return nil, err
	}
	c.add(pr)
	pr, err = l.start("kube-scheduler", filepath.Join(bin, "kube-scheduler"), "--kubeconfig="+kubeconfigs["scheduler"],
		"--leader-elect=false", "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", schedPort),
		"--authentication-kubeconfig="+kubeconfigs["scheduler"], "--authorization-kubeconfig="+kubeconfigs["scheduler"])
	if err != nil {
		return nil, err
	}
	c.add(pr)

	// containerd
	cfg := fmt.Sprintf(containerdConfig, filepath.Join(o.Dir, "containerd", "root"), filepath.Join(RunDir, "state"),
		c.ContainerdSocket, c.CNIBinDir, c.CNIConfDir, filepath.Join(o.Dir, "containerd", "opt"))
	cfgPath := filepath.Join(o.Dir, "containerd", "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	cdPath, _ := exec.LookPath("containerd")
	pr, err = l.start("containerd", cdPath, "--config", cfgPath)
	if err != nil {
		return nil, err
	}
	c.add(pr)
	if err := waitCmd(ctx, pr, "ctr", "--address", c.ContainerdSocket, "version"); err != nil {
		return nil, err
	}
	for _, img := range o.Images {
		if out, err := exec.CommandContext(ctx, "ctr", "--address", c.ContainerdSocket, "-n", "k8s.io", "images", "import", "--no-unpack", img).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("realnode: importing %s: %v\n%s", img, err, out)
		}
	}

	// kubelet
	kcfg := fmt.Sprintf(kubeletConfig, c.ContainerdSocket, kubeletPort, filepath.Join(o.Dir, "kubelet", "pod-logs"))
	kcfgPath := filepath.Join(o.Dir, "kubelet", "config.yaml")
	if err := os.WriteFile(kcfgPath, []byte(kcfg), 0o644); err != nil {
		return nil, err
	}
	pr, err = l.start("kubelet", filepath.Join(bin, "kubelet"), "--config="+kcfgPath, "--kubeconfig="+kubeconfigs["kubelet"],
		"--root-dir="+filepath.Join(o.Dir, "kubelet", "root"), "--cert-dir="+filepath.Join(o.Dir, "kubelet", "pki"),
		"--hostname-override="+NodeName, "--node-ip=127.0.0.1", "--v=2")
	if err != nil {
		return nil, err
	}
	c.add(pr)
	if err := c.saveState(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err == nil {
			break
		}
		if pr.exited() {
			return nil, fmt.Errorf("realnode: kubelet exited: %v\n%s", pr.err, c.LogTail("kubelet", 30))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("realnode: node %s not registered: %v\n%s", NodeName, err, c.LogTail("kubelet", 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The default ServiceAccount appears with the controller-manager; pods need it.
	for {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("realnode: no default ServiceAccount (controller-manager): %v\n%s", err, c.LogTail("kube-controller-manager", 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return c, nil
}

func (c *Cluster) add(p *proc) {
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.state.Procs = append(c.state.Procs, procState{Name: p.name, PID: p.pid})
	c.mu.Unlock()
}

// LogTail is the last n lines of a component's log (kubelet, containerd, kube-apiserver, ...).
func (c *Cluster) LogTail(component string, n int) string {
	return k8senv.TailFile(filepath.Join(c.Dir, "logs", component+".log"), n)
}

// PodLog reads a container's log from the kubelet's pod logs directory (kubectl logs cannot
// work: the API server would dial the kubelet, which listens on loopback only).
func (c *Cluster) PodLog(namespace, pod, container string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(c.Dir, "kubelet", "pod-logs", namespace+"_"+pod+"_*", container, "*.log"))
	if err != nil || len(matches) == 0 {
		return "", fmt.Errorf("realnode: no log for %s/%s/%s", namespace, pod, container)
	}
	var out []byte
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			return "", err
		}
		out = append(out, b...)
	}
	return string(out), nil
}

// WaitNodeReady waits until the node's Ready condition is want.
func (c *Cluster) WaitNodeReady(ctx context.Context, want bool) error {
	deadline := time.Now().Add(3 * time.Minute)
	var last string
	for {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					last = fmt.Sprintf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
					if (cond.Status == corev1.ConditionTrue) == want {
						return nil
					}
				}
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("realnode: node Ready=%v not reached: %s", want, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// InstallCNIPlugins copies CNI reference plugins into the node's CNI bin dir.
func (c *Cluster) InstallCNIPlugins(names ...string) error {
	src, err := cniPluginDir()
	if err != nil {
		return err
	}
	return c.InstallCNIPluginsFrom(src, names...)
}

func (c *Cluster) InstallCNIPluginsFrom(src string, names ...string) error {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			return fmt.Errorf("realnode: CNI plugin %s: %w (make cni-tools)", n, err)
		}
		if err := os.WriteFile(filepath.Join(c.CNIBinDir, n), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// Check returns what this host lacks to run a cluster (root, binaries), or nil: tests check
// it first so that a missing piece follows internal/testenv's rule instead of failing Start.
func Check() error {
	_, _, err := prerequisites()
	return err
}

// prerequisites returns the kube binaries' directory and the CNI plugins' directory, or what
// is missing.
func prerequisites() (kubeBin, cniBin string, err error) {
	if os.Geteuid() != 0 {
		return "", "", errors.New("realnode: needs root (kubelet, containerd, cgroups, mounts)")
	}
	kubeBin, err = k8senv.BinDir()
	if err != nil {
		return "", "", fmt.Errorf("realnode: %w", err)
	}
	for _, b := range []string{"kubelet", "kube-controller-manager", "kube-scheduler", "kubectl"} {
		if _, err := os.Stat(filepath.Join(kubeBin, b)); err != nil {
			return "", "", fmt.Errorf("realnode: %s missing in %s (make kube-binaries)", b, kubeBin)
		}
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr"} {
		if _, err := exec.LookPath(b); err != nil {
			return "", "", fmt.Errorf("realnode: %s not on PATH (Debian packages containerd and runc: make deps)", b)
		}
	}
	cniBin, err = cniPluginDir()
	if err != nil {
		return "", "", err
	}
	return kubeBin, cniBin, nil
}

// cniPluginDir is where `make cni-tools` put the CNI reference plugins.
func cniPluginDir() (string, error) {
	if d := os.Getenv("ALLOT_CNI_BIN_DIR"); d != "" {
		return d, nil
	}
	cache := os.Getenv("ALLOT_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache", "allot")
	}
	matches, _ := filepath.Glob(filepath.Join(cache, "cni-v*", "loopback"))
	if len(matches) == 0 {
		return "", fmt.Errorf("realnode: no CNI plugins in %s/cni-v* (make cni-tools, or set ALLOT_CNI_BIN_DIR)", cache)
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}

// takeLock waits for the machine's one-cluster lock.
func takeLock(ctx context.Context, wait time.Duration) (*os.File, error) {
	if wait == 0 {
		wait = 20 * time.Minute
	}
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			holder, _ := os.ReadFile(lockPath + ".holder")
			f.Close()
			return nil, fmt.Errorf("realnode: another cluster runs on this machine (%s; make cluster-down removes a leftover one)", strings.TrimSpace(string(holder)))
		}
		time.Sleep(time.Second)
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// containerd 1.6's CRI configuration (version 2): restrict_oom_score_adj because runc cannot
// set a negative oom_score_adj without CAP_SYS_RESOURCE, which small VMs lack; cgroupfs
// because there may be no systemd.
const containerdConfig = `version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.10.1"
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %q
      conf_dir = %q
  [plugins."io.containerd.internal.v1.opt"]
    path = %q
`

const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
address: 127.0.0.1
port: %d
healthzPort: 0
readOnlyPort: 0
podLogsDir: %s
resolvConf: ""
clusterDomain: cluster.local
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 150
`

// proc is one component process.
type proc struct {
	name string
	pid  int
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

type launcher struct {
	dir    string
	log    io.Writer
	detach bool
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

// spawner starts children from one locked thread that never exits, so that Pdeathsig
// (sent when the forking *thread* exits) means "when this process dies".
func spawner() {
	runtime.LockOSThread()
	for r := range spawnCh {
		r.res <- r.cmd.Start()
	}
}

func (l *launcher) start(name, path string, args ...string) (*proc, error) {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go spawner()
	})
	logPath := filepath.Join(l.dir, "logs", name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	var out io.Writer = logf
	if l.log != nil && !l.detach {
		out = io.MultiWriter(logf, l.log)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = l.dir
	if l.detach {
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	res := make(chan error)
	spawnCh <- spawnReq{cmd: cmd, res: res}
	if err := <-res; err != nil {
		logf.Close()
		return nil, fmt.Errorf("realnode: start %s: %w", name, err)
	}
	p := &proc{name: name, pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// waitHTTP polls url (with a bearer token and CA, if given) until it answers 200.
func waitHTTP(ctx context.Context, p *proc, url, token string, caPEM []byte) error {
	deadline := time.Now().Add(90 * time.Second)
	hc := httpClient(caPEM)
	var last string
	for {
		req, err := newGet(ctx, url, token)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		} else {
			last = err.Error()
		}
		if p.exited() {
			return fmt.Errorf("realnode: %s exited (%v) before it was ready:\n%s", p.name, p.err, k8senv.TailFile(p.log, 30))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("realnode: %s not ready at %s: %s\n%s", p.name, url, last, k8senv.TailFile(p.log, 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitCmd runs a command until it succeeds.
func waitCmd(ctx context.Context, p *proc, name string, args ...string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("realnode: %s exited (%v) before it was ready:\n%s", p.name, p.err, k8senv.TailFile(p.log, 30))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("realnode: %s not ready: %v %s\n%s", p.name, err, out, k8senv.TailFile(p.log, 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// state is what Cleanup needs to undo a cluster from another process.
type state struct {
	Dir    string      `json:"dir"`
	Procs  []procState `json:"procs"`
	Before hostState   `json:"before"`
}

type procState struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
}

func (c *Cluster) saveState() error {
	c.mu.Lock()
	b, err := json.MarshalIndent(c.state, "", "  ")
	c.mu.Unlock()
	if err != nil {
		return err
	}
	_ = os.WriteFile(lockPath+".holder", []byte(fmt.Sprintf("pid %d, dir %s", os.Getpid(), c.Dir)), 0o644)
	return os.WriteFile(filepath.Join(c.Dir, "state.json"), b, 0o644)
}
