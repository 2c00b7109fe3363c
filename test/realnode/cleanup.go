package realnode

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// hostState is what existed on the host before Start: Stop removes only what the cluster
// added.
type hostState struct {
	Paths    map[string]bool `json:"paths"`
	Links    []string        `json:"links"`
	NetnsMnt bool            `json:"netnsMounted"`
}

// hostPaths are created by the kubelet, containerd or CNI plugins outside the scratch dir.
var hostPaths = []string{
	"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/usr/libexec/kubernetes",
	"/var/lib/cni", "/etc/kubernetes", "/run/netns",
}

func snapshotHost() hostState {
	s := hostState{Paths: map[string]bool{}}
	for _, p := range hostPaths {
		_, err := os.Stat(p)
		s.Paths[p] = err == nil
	}
	s.Links = linkNames()
	s.NetnsMnt = isMountPoint("/run/netns")
	return s
}

func linkNames() []string {
	es, _ := os.ReadDir("/sys/class/net")
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func isMountPoint(p string) bool {
	for _, m := range mounts() {
		if m == p {
			return true
		}
	}
	return false
}

// mounts lists mount points (from /proc/self/mountinfo).
func mounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 4 {
			out = append(out, unescapeMount(fs[4]))
		}
	}
	return out
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// Stop deletes every pod (the kubelet tears down their sandboxes, network namespaces and
// CNI state), stops the components and removes every trace of the cluster. It may be called
// after a failed Start and more than once.
func (c *Cluster) Stop(ctx context.Context) error {
	if c.state == nil {
		return nil
	}
	var errs []error
	if c.Client != nil && c.running("kubelet") {
		errs = append(errs, drain(ctx, c.Client, c.stopProc))
	}
	for _, name := range []string{"kubelet", "kube-scheduler", "kube-controller-manager"} {
		c.stopProc(name)
	}
	errs = append(errs, cleanupRuntime(ctx, c.ContainerdSocket))
	for _, name := range []string{"containerd", "kube-apiserver", "etcd"} {
		c.stopProc(name)
	}
	errs = append(errs, cleanupHost(c.state))
	if c.lock != nil {
		_ = os.Remove(lockPath + ".holder")
		c.lock.Close()
		c.lock = nil
	}
	c.state = nil
	return errors.Join(errs...)
}

func (c *Cluster) running(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name && !p.exited() {
			return true
		}
	}
	return false
}

// stopProc stops a component of this process: SIGTERM to its group, SIGKILL after 20 s.
func (c *Cluster) stopProc(name string) {
	c.mu.Lock()
	var ps []*proc
	for _, p := range c.procs {
		if p.name == name {
			ps = append(ps, p)
		}
	}
	c.mu.Unlock()
	for _, p := range ps {
		if p.exited() {
			continue
		}
		_ = syscall.Kill(-p.pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			<-p.done
		}
	}
}

// drain stops the controllers (so nothing is recreated), then deletes every pod and waits
// for the kubelet to report them gone.
func drain(ctx context.Context, cs kubernetes.Interface, stop func(string)) error {
	stop("kube-controller-manager")
	stop("kube-scheduler")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("realnode: drain: %w", err)
	}
	// Workload pods first, while the node's CNI plugins (which may need a daemon running in
	// kube-system, as allot's agent is) can still tear down their networks; then the rest.
	grace := int64(1)
	for _, phase := range []func(ns string) bool{
		func(ns string) bool { return ns != metav1.NamespaceSystem },
		func(string) bool { return true },
	} {
		for _, ns := range nss.Items {
			if phase(ns.Name) {
				_ = cs.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
			}
		}
		left := -1
		for {
			l, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err == nil {
				left = 0
				for _, p := range l.Items {
					if phase(p.Namespace) {
						left++
					}
				}
				if left == 0 {
					break
				}
			}
			if ctx.Err() != nil {
				return fmt.Errorf("realnode: drain: %d pods not gone after 2 minutes", left)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return nil
}

// cleanupRuntime removes what containerd still runs (after the kubelet stopped).
func cleanupRuntime(ctx context.Context, sock string) error {
	if _, err := os.Stat(sock); err != nil {
		return nil
	}
	ctr := func(args ...string) string {
		out, _ := exec.CommandContext(ctx, "ctr", append([]string{"--address", sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
		return string(out)
	}
	for _, id := range strings.Fields(ctr("tasks", "ls", "-q")) {
		ctr("tasks", "kill", "-s", "SIGKILL", id)
		for range 50 {
			if !strings.Contains(ctr("tasks", "ls", "-q"), id) {
				break
			}
			ctr("tasks", "delete", id)
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, id := range strings.Fields(ctr("containers", "ls", "-q")) {
		ctr("containers", "delete", id)
	}
	return nil
}

// cleanupHost removes the host state the cluster added: mounts under its directory, the
// kubelet's cgroups and iptables chains, new bridges, host directories, the scratch dir.
func cleanupHost(s *state) error {
	var errs []error
	// Mounts under the scratch dir (the kubelet bind-mounts its root dir onto itself, pods'
	// volumes, containerd's rootfs), deepest first.
	var ms []string
	for _, m := range mounts() {
		if s.Dir != "" && (m == s.Dir || strings.HasPrefix(m, s.Dir+"/")) || strings.HasPrefix(m, RunDir+"/") {
			ms = append(ms, m)
		}
	}
	sort.Slice(ms, func(i, j int) bool { return len(ms[i]) > len(ms[j]) })
	for _, m := range ms {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("realnode: unmount %s: %w", m, err))
		}
	}
	// Network namespaces the runtime left (named cni-*), then /run/netns if we mounted it.
	if es, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range es {
			if strings.HasPrefix(e.Name(), "cni-") {
				p := filepath.Join("/run/netns", e.Name())
				_ = syscall.Unmount(p, syscall.MNT_DETACH)
				_ = os.Remove(p)
			}
		}
	}
	if !s.Before.NetnsMnt && isMountPoint("/run/netns") {
		if es, _ := os.ReadDir("/run/netns"); len(es) == 0 {
			_ = syscall.Unmount("/run/netns", syscall.MNT_DETACH)
		}
	}
	// Links that appeared (the CNI bridges; veths went with their namespaces).
	before := map[string]bool{}
	for _, l := range s.Before.Links {
		before[l] = true
	}
	for _, l := range linkNames() {
		if before[l] {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/class/net", l, "bridge")); err == nil {
			if out, err := exec.Command("ip", "link", "del", l).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("realnode: ip link del %s: %v %s", l, err, out))
			}
		}
	}
	errs = append(errs, removeCgroups())
	removeKubeChains()
	for _, p := range hostPaths {
		if !s.Before.Paths[p] && p != "/run/netns" {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if s.Before.Paths["/var/lib/kubelet"] {
		_ = os.RemoveAll("/var/lib/kubelet/device-plugins")
	}
	if err := os.RemoveAll(RunDir); err != nil {
		errs = append(errs, err)
	}
	if s.Dir != "" {
		if err := os.RemoveAll(s.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeCgroups removes the kubelet's and containerd's cgroups (kubepods, k8s.io) in every
// hierarchy, deepest first (a cgroup directory goes with rmdir once empty).
func removeCgroups() error {
	var errs []error
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, root := range roots {
		for _, name := range []string{"kubepods", "kubepods.slice", "k8s.io"} {
			top := filepath.Join(root, name)
			if _, err := os.Stat(top); err != nil {
				continue
			}
			var dirs []string
			_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
			for _, d := range dirs {
				var err error
				for range 20 { // a cgroup empties a moment after its last process exits
					if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
						err = nil
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("realnode: rmdir %s: %w", d, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// removeKubeChains deletes the kubelet's iptables chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY,
// KUBE-IPTABLES-HINT, ...: without kube-proxy every KUBE- chain is the kubelet's) and the
// rules that jump to them, in both families and both backends.
func removeKubeChains() {
	for _, bin := range []string{"iptables", "ip6tables", "iptables-legacy", "ip6tables-legacy"} {
		if _, err := exec.LookPath(bin); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle"} {
			out, err := exec.Command(bin, "-w", "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			var chains []string
			for _, line := range strings.Split(string(out), "\n") {
				f := strings.Fields(line)
				switch {
				case len(f) >= 2 && f[0] == "-N" && strings.HasPrefix(f[1], "KUBE-"):
					chains = append(chains, f[1])
				case len(f) >= 2 && f[0] == "-A" && !strings.HasPrefix(f[1], "KUBE-") && strings.Contains(line, "-j KUBE-"):
					_ = exec.Command(bin, append([]string{"-w", "-t", table, "-D"}, f[1:]...)...).Run()
				}
			}
			for _, ch := range chains {
				_ = exec.Command(bin, "-w", "-t", table, "-F", ch).Run()
			}
			for _, ch := range chains {
				_ = exec.Command(bin, "-w", "-t", table, "-X", ch).Run()
			}
		}
	}
}

// Cleanup undoes a cluster started by another process (make cluster-down): it stops the
// processes recorded in dir/state.json and removes every trace.
func Cleanup(ctx context.Context, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("realnode: %s/state.json: %w", dir, err)
	}
	kill := func(name string) {
		for _, p := range s.Procs {
			if p.Name != name || syscall.Kill(p.PID, 0) != nil {
				continue
			}
			_ = syscall.Kill(-p.PID, syscall.SIGTERM)
			_ = syscall.Kill(p.PID, syscall.SIGTERM)
			for range 200 {
				if syscall.Kill(p.PID, 0) != nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	var errs []error
	if cs, err := adminClient(dir); err == nil {
		errs = append(errs, drain(ctx, cs, kill))
	}
	for _, name := range []string{"kubelet", "kube-scheduler", "kube-controller-manager"} {
		kill(name)
	}
	errs = append(errs, cleanupRuntime(ctx, filepath.Join(RunDir, "containerd.sock")))
	for _, name := range []string{"containerd", "kube-apiserver", "etcd"} {
		kill(name)
	}
	errs = append(errs, cleanupHost(&s))
	_ = os.Remove(lockPath + ".holder")
	return errors.Join(errs...)
}

func httpClient(caPEM []byte) *http.Client {
	tc := &tls.Config{}
	if caPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		tc.RootCAs = pool
	}
	return &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, Proxy: nil}}
}

func newGet(ctx context.Context, url, token string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req, nil
}

func adminClient(dir string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "pki", "admin.kubeconfig"))
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
