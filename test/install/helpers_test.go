package install

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/realnode"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	agentSelector    = "app.kubernetes.io/name=allot-agent"
	operatorSelector = "app.kubernetes.io/name=allot-operator"
	agentSocket      = "/run/allot/allotd.sock"
)

// node drives the one-node cluster.
type node struct {
	t   *testing.T
	c   *realnode.Cluster
	ctx context.Context
}

// step waits until cond holds, failing with its last error after timeout.
func (n *node) step(what string, timeout time.Duration, cond func() error) {
	n.t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(n.ctx, timeout)
	defer cancel()
	if err := testenv.Poll(ctx, testenv.CondErr(cond)); err != nil {
		n.t.Fatalf("%s: not after %v: %v", what, timeout, err)
	}
	n.t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

func (n *node) run(name string, args ...string) string {
	n.t.Helper()
	out, err := exec.CommandContext(n.ctx, name, args...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (n *node) helm(args ...string) {
	n.t.Helper()
	start := time.Now()
	out, err := helmCmd(n.ctx, n.c, args...)
	if err != nil {
		n.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	n.t.Logf("helm %s (%v): %s", args[0], time.Since(start).Round(time.Millisecond), firstLine(string(out)))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// values writes the chart values for this node and image reference, and returns the file.
func (n *node) values(ref string) string {
	n.t.Helper()
	return valuesFile(n.t, n.c, ref)
}

func valuesFile(tb testing.TB, c *realnode.Cluster, ref string) string {
	tb.Helper()
	b, err := Values(c, ref)
	if err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(tb.TempDir(), "values.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	return p
}

// helmCmd runs helm against the cluster.
func helmCmd(ctx context.Context, c *realnode.Cluster, args ...string) ([]byte, error) {
	args = append(args, "--kubeconfig", c.Kubeconfig)
	return exec.CommandContext(ctx, env.helm, args...).CombinedOutput()
}

func (n *node) pods(namespace, selector string) []corev1.Pod {
	n.t.Helper()
	l, err := n.c.Client.CoreV1().Pods(namespace).List(n.ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		n.t.Fatal(err)
	}
	return l.Items
}

// podsRunning: exactly want pods of the selector, all Running and Ready, none terminating.
func (n *node) podsRunning(namespace, selector string, want int) error {
	ps := n.pods(namespace, selector)
	ready := 0
	var not []string
	for _, p := range ps {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && isReady(&p) {
			ready++
		} else {
			not = append(not, fmt.Sprintf("%s %s%s", p.Name, p.Status.Phase, waitingReason(&p)))
		}
	}
	if ready != want || len(ps) != want {
		return fmt.Errorf("%s: %d of %d Running and Ready (%d pods); not: %v", selector, ready, want, len(ps), not)
	}
	return nil
}

func (n *node) podsGone(namespace, selector string) error {
	if ps := n.pods(namespace, selector); len(ps) > 0 {
		return fmt.Errorf("%d pods of %s left", len(ps), selector)
	}
	return nil
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func waitingReason(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil {
			return " (" + s.State.Waiting.Reason + ")"
		}
	}
	return ""
}

func (n *node) appPods() []corev1.Pod { return n.pods(appNS, "app="+app) }

// waitApp waits until the app has exactly want pods, all Running with both addresses, and
// returns them sorted by name.
func (n *node) waitApp(want int, timeout time.Duration) []corev1.Pod {
	n.t.Helper()
	var ps []corev1.Pod
	n.step(fmt.Sprintf("%d %s pods Running", want, app), timeout, func() error {
		ps = n.appPods()
		var bad []string
		for _, p := range ps {
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || len(p.Status.PodIPs) != 2 {
				bad = append(bad, fmt.Sprintf("%s %s%s ips=%v", p.Name, p.Status.Phase, waitingReason(&p), p.Status.PodIPs))
			}
		}
		if len(ps) != want || len(bad) > 0 {
			if len(bad) > 5 {
				bad = append(bad[:5], fmt.Sprintf("and %d more", len(bad)-5))
			}
			return fmt.Errorf("%d pods; not Running: %v", len(ps), bad)
		}
		return nil
	})
	slices.SortFunc(ps, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return ps
}

// podIP is the pod's address of family fam (4 or 6).
func podIP(p corev1.Pod, fam int) netip.Addr {
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && (a.Is4() == (fam == 4)) {
			return a
		}
	}
	return netip.Addr{}
}

// checkAddresses: both families from the pool, no address twice.
func (n *node) checkAddresses(pods []corev1.Pod) {
	n.t.Helper()
	r4, r6 := netip.MustParsePrefix(PodCIDR4), netip.MustParsePrefix(PodCIDR6)
	seen := map[netip.Addr]string{}
	for _, p := range pods {
		for fam, r := range map[int]netip.Prefix{4: r4, 6: r6} {
			a := podIP(p, fam)
			if !a.IsValid() || !r.Contains(a) {
				n.t.Fatalf("pod %s: IPv%d address %v not in the pool's %s (podIPs %v)", p.Name, fam, a, r, p.Status.PodIPs)
			}
			if o, dup := seen[a]; dup {
				n.t.Fatalf("address %s given to %s and %s", a, o, p.Name)
			}
			seen[a] = p.Name
		}
	}
}

var httpc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

func get(u string) (string, error) {
	resp, err := httpc.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", u, resp.Status, b)
	}
	return string(b), nil
}

func podURL(a netip.Addr, path string) string {
	return "http://" + net.JoinHostPort(a.String(), "8080") + path
}

// checkTraffic: the host reaches every pod on both families (and the pod answers with its
// own address), and pods reach each other.
func (n *node) checkTraffic(pods []corev1.Pod) {
	n.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(pods))
	for _, p := range pods {
		for _, fam := range []int{4, 6} {
			wg.Go(func() {
				a := podIP(p, fam)
				var err error
				for range 10 { // a pod just Running may not listen yet
					var body string
					if body, err = get(podURL(a, "/")); err == nil {
						var who struct{ Addrs []string }
						if err = json.Unmarshal([]byte(body), &who); err == nil && !slices.ContainsFunc(who.Addrs, func(s string) bool { return strings.HasPrefix(s, a.String()+"/") || s == a.String() }) {
							err = fmt.Errorf("pod %s at %s answered with addresses %v", p.Name, a, who.Addrs)
						}
					}
					if err == nil {
						return
					}
					time.Sleep(300 * time.Millisecond) // sleep: bounded retries of a pod that may not listen yet
				}
				errs <- fmt.Errorf("host to pod %s (IPv%d %s): %w", p.Name, fam, a, err)
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		n.t.Error(err)
	}
	if n.t.Failed() {
		n.t.FailNow()
	}
	for i := range min(len(pods), 5) {
		from, to := pods[i], pods[(i+1)%len(pods)]
		for _, fam := range []int{4, 6} {
			n.fetchFrom(from, fam, podURL(podIP(to, fam), "/"))
		}
	}
}

// fetchFrom has pod p GET u (through the test server's /fetch) over family fam.
func (n *node) fetchFrom(p corev1.Pod, fam int, u string) string {
	n.t.Helper()
	body, err := get(podURL(podIP(p, fam), "/fetch?url="+url.QueryEscape(u)))
	if err != nil {
		n.t.Fatalf("pod %s fetching %s: %v", p.Name, u, err)
	}
	return body
}

func (n *node) scale(r int32) {
	n.t.Helper()
	s, err := n.c.Client.AppsV1().Deployments(appNS).GetScale(n.ctx, app, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	s.Spec.Replicas = r
	if _, err := n.c.Client.AppsV1().Deployments(appNS).UpdateScale(n.ctx, app, s, metav1.UpdateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) deleteDeployment() {
	n.t.Helper()
	fg := metav1.DeletePropagationForeground
	if err := n.c.Client.AppsV1().Deployments(appNS).Delete(n.ctx, app, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) deleteAgentPod() string {
	n.t.Helper()
	ps := n.pods(ns, agentSelector)
	if len(ps) != 1 {
		n.t.Fatalf("%d agent pods", len(ps))
	}
	zero := int64(0)
	if err := n.c.Client.CoreV1().Pods(ns).Delete(n.ctx, ps[0].Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		n.t.Fatal(err)
	}
	return ps[0].Name
}

// allocation is one allocation as allotctl prints it, reduced to what must not change.
type allocation struct {
	Pod   string
	Addrs string
}

// allocations asks the agent, through allotctl on the node, for its allocations.
func (n *node) allocations() []allocation {
	n.t.Helper()
	out, err := exec.CommandContext(n.ctx, env.allotctl, "--socket", agentSocket, "-o", "json", "allocations").CombinedOutput()
	if err != nil {
		n.t.Fatalf("allotctl allocations: %v\n%s", err, out)
	}
	var raw []struct {
		Pod struct{ Namespace, Name string }
		IPs []struct{ Address string }
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		n.t.Fatalf("allotctl allocations -o json: %v\n%s", err, out)
	}
	var as []allocation
	for _, r := range raw {
		var addrs []string
		for _, ip := range r.IPs {
			addrs = append(addrs, ip.Address)
		}
		slices.Sort(addrs)
		as = append(as, allocation{Pod: r.Pod.Namespace + "/" + r.Pod.Name, Addrs: strings.Join(addrs, ",")})
	}
	slices.SortFunc(as, func(a, b allocation) int { return strings.Compare(a.Pod, b.Pod) })
	return as
}

// allocationsMatch: the agent holds exactly one allocation per pod, with the pod's
// addresses, and the node object counts as many addresses in use.
func (n *node) allocationsMatch(pods []corev1.Pod) error {
	as := n.allocations()
	want := map[string][]string{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		var ips []string
		for _, ip := range p.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		want[appNS+"/"+p.Name] = ips
	}
	if len(as) != len(want) {
		return fmt.Errorf("agent holds %d allocations, %d pods exist", len(as), len(want))
	}
	for _, a := range as {
		ips, ok := want[a.Pod]
		if !ok {
			return fmt.Errorf("allocation for %s, which does not exist (leak)", a.Pod)
		}
		for _, ip := range ips {
			if !strings.Contains(a.Addrs, ip+"/") {
				return fmt.Errorf("pod %s has %v, its allocation %s", a.Pod, ips, a.Addrs)
			}
		}
	}
	out := n.run(n.c.KubectlPath(), "--kubeconfig", n.c.Kubeconfig, "get", "allotnodes", n.c.NodeName, "-o", "json")
	var an struct {
		Status struct {
			IPAM struct {
				Pools []struct {
					Pool       string
					IPv4, IPv6 *struct{ Used int64 }
				} `json:"pools"`
			} `json:"ipam"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &an); err != nil {
		return fmt.Errorf("AllotNode: %v", err)
	}
	var used4, used6 int64
	for _, p := range an.Status.IPAM.Pools {
		if p.IPv4 != nil {
			used4 += p.IPv4.Used
		}
		if p.IPv6 != nil {
			used6 += p.IPv6.Used
		}
	}
	if used4 != int64(len(want)) || used6 != int64(len(want)) {
		return fmt.Errorf("AllotNode status.ipam.pools counts %d IPv4 and %d IPv6 addresses in use, want %d each", used4, used6, len(want))
	}
	return nil
}

// retag gives the loaded image a second reference (a new tag of the same image).
func (n *node) retag(ref, tag string) string {
	n.t.Helper()
	i := strings.LastIndex(ref, ":")
	newRef := ref[:i+1] + tag
	n.run("ctr", "--address", n.c.ContainerdSocket, "-n", "k8s.io", "images", "tag", "--force", ref, newRef)
	return newRef
}

func (n *node) agentRunsImage(ref string) error {
	if err := n.podsRunning(ns, agentSelector, 1); err != nil {
		return err
	}
	p := n.pods(ns, agentSelector)[0]
	for _, c := range p.Spec.Containers {
		if c.Image != ref {
			return fmt.Errorf("agent pod %s runs %s", p.Name, c.Image)
		}
	}
	return nil
}

// dump logs what helps to understand a failure.
func (n *node) dump() {
	for _, sel := range []string{agentSelector, operatorSelector} {
		for _, p := range n.pods(ns, sel) {
			for _, c := range p.Spec.Containers {
				if l, err := n.c.PodLog(ns, p.Name, c.Name); err == nil {
					n.t.Logf("--- %s/%s log (tail):\n%s", p.Name, c.Name, tail(l, 60))
				}
			}
		}
	}
	for _, comp := range []string{"kubelet", "containerd"} {
		n.t.Logf("--- %s log (tail):\n%s", comp, n.c.LogTail(comp, 40))
	}
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// externalHost is a host outside the pod and non-masquerade ranges: a network namespace
// behind a veth, serving HTTP with the test server (which answers with the peer address it
// sees).
type externalHost struct {
	ns     string
	host   [2]netip.Prefix // node side, IPv4 and IPv6
	ext    [2]netip.Addr
	server *exec.Cmd
}

func newExternalHost(t *testing.T, server string) *externalHost {
	t.Helper()
	e := &externalHost{
		ns:   fmt.Sprintf("allot-ext-%d", os.Getpid()),
		host: [2]netip.Prefix{netip.MustParsePrefix("172.31.255.1/30"), netip.MustParsePrefix("fd99:a110::1/126")},
		ext:  [2]netip.Addr{netip.MustParseAddr("172.31.255.2"), netip.MustParseAddr("fd99:a110::2")},
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	hostIf := "xhost0" // not a pod interface name (allot+, veth+, ...): traffic out of it is masqueraded
	run("ip", "netns", "add", e.ns)
	t.Cleanup(func() {
		if e.server != nil && e.server.Process != nil {
			_ = e.server.Process.Kill()
			_ = e.server.Wait()
		}
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", e.ns).Run()
	})
	run("ip", "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", e.ns)
	run("ip", "addr", "add", e.host[0].String(), "dev", hostIf)
	run("ip", "-6", "addr", "add", e.host[1].String(), "dev", hostIf, "nodad")
	run("ip", "link", "set", hostIf, "up")
	run("ip", "netns", "exec", e.ns, "ip", "addr", "add", netip.PrefixFrom(e.ext[0], 30).String(), "dev", "eth0")
	run("ip", "netns", "exec", e.ns, "ip", "-6", "addr", "add", netip.PrefixFrom(e.ext[1], 126).String(), "dev", "eth0", "nodad")
	run("ip", "netns", "exec", e.ns, "ip", "link", "set", "eth0", "up")
	run("ip", "netns", "exec", e.ns, "ip", "link", "set", "lo", "up")
	// No route back to the pods: only masqueraded traffic can be answered.
	e.server = exec.Command("ip", "netns", "exec", e.ns, server, "serve")
	e.server.Stdout, e.server.Stderr = io.Discard, io.Discard
	if err := e.server.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the external host's server", func() (bool, string) {
		_, err := get(e.url(4))
		return err == nil, fmt.Sprint(err)
	})
	return e
}

func (e *externalHost) url(fam int) string {
	return podURL(e.ext[fam/6], "/")
}

func (e *externalHost) nodeAddr(fam int) netip.Addr { return e.host[fam/6].Addr() }

// sweepAllot removes whatever of allot's a failed run left on the node: the masquerade chains
// and their jumps, pinned eBPF objects, the pods' bridge. A passing run leaves nothing
// (checkUninstalled proves it), so this does nothing then.
func sweepAllot(t *testing.T) {
	for _, bin := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command(bin+"-save", "-t", "nat").Output()
		if err != nil {
			continue
		}
		var chains []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, ":ALLOT-") {
				chains = append(chains, strings.Fields(line[1:])[0])
			}
			if strings.HasPrefix(line, "-A POSTROUTING ") && strings.Contains(line, "-j ALLOT-") {
				args := strings.Fields(strings.Replace(line, "-A POSTROUTING", "-D POSTROUTING", 1))
				_ = exec.Command(bin, append([]string{"-w", "-t", "nat"}, args...)...).Run()
			}
		}
		for _, ch := range chains {
			_ = exec.Command(bin, "-w", "-t", "nat", "-F", ch).Run()
			_ = exec.Command(bin, "-w", "-t", "nat", "-X", ch).Run()
			t.Logf("removed %s chain %s left by the failed run", bin, ch)
		}
	}
	_ = os.RemoveAll("/sys/fs/bpf/allot")
	_ = exec.Command("ip", "link", "del", "allot0").Run()
}

// startNode starts a one-node cluster with allot's image and the test images loaded, its
// components' output in work/cluster.log. The caller stops it (after reading what it needs
// for a failure's report).
func startNode(ctx context.Context, tb testing.TB, work string) *realnode.Cluster {
	tb.Helper()
	testImages, err := realnode.BuildImages(ctx, work)
	if err != nil {
		tb.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(work, "cluster.log"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { logf.Close() })
	c, err := realnode.Start(ctx, realnode.Options{Images: []string{env.imageTar, testImages}, Log: logf})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
