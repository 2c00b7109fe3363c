package chart

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/k8senv"
)

// The live tests run the real allotd binary, as the chart configures it and with the chart's
// ServiceAccounts' tokens, against a real API server that authorizes with RBAC and writes an
// audit log. Any request RBAC refuses (403) fails the test: the chart's rules must cover every
// call the agent and the operator make. The log of what they did is printed (-v), which is how
// the rules in templates/rbac.yaml were derived and are kept current.

var auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts:` + Namespace + `"]
  - level: None
`

// liveEnv is a real API server with the chart installed.
type liveEnv struct {
	t        *testing.T
	env      *k8senv.Env
	c        client.Client
	cs       kubernetes.Interface
	helmEnv  []string
	audit    string
	allotd   string
	manifest []byte
	// uninstalled is when the test ran helm uninstall: later refusals are expected.
	uninstalled time.Time
}

var (
	allotdOnce sync.Once
	allotdPath string
	allotdErr  error
)

// buildAllotd builds cmd/allotd once per test binary.
func buildAllotd(t *testing.T) string {
	t.Helper()
	allotdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "allot-chart-bin-")
		if err != nil {
			allotdErr = err
			return
		}
		allotdPath = filepath.Join(dir, "allotd")
		cmd := exec.Command("go", "build", "-o", allotdPath, "./cmd/allotd")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			allotdErr = fmt.Errorf("go build ./cmd/allotd: %v\n%s", err, out)
		}
	})
	if allotdErr != nil {
		t.Fatal(allotdErr)
	}
	return allotdPath
}

// startLive starts an API server (RBAC, audit log, webhooks reached through endpoints) and
// installs the chart with values.
func startLive(t *testing.T, values string) *liveEnv {
	t.Helper()
	requireKube(t)
	allotd := buildAllotd(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(pol, []byte(auditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(dir, "audit.log")
	env := k8senv.Start(t, k8senv.Options{CRDDir: "-", ExtraAPIServerFlags: []string{
		"--audit-policy-file=" + pol, "--audit-log-path=" + audit,
		// The webhook Service has no ClusterIP routing here: dial its endpoints.
		"--enable-aggregator-routing=true",
	}})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	l := &liveEnv{t: t, env: env, c: adminClient(t, env.Config), cs: cs, audit: audit, allotd: allotd,
		helmEnv: []string{"KUBECONFIG=" + writeKubeconfig(t, env.Config)}}
	vc := valuesCase{name: t.Name(), values: values}
	runHelm(t, l.helmEnv, append([]string{"install", ReleaseName, chartDir(t), "--namespace", Namespace}, vc.args(t)...)...)
	l.manifest = runHelm(t, l.helmEnv, "get", "manifest", ReleaseName, "--namespace", Namespace)
	t.Cleanup(func() { l.checkAudit() })
	return l
}

// saKubeconfig writes a kubeconfig with a token of the ServiceAccount, as the pod would get.
func (l *liveEnv) saKubeconfig(sa string) string {
	t := l.t
	tr, err := l.cs.CoreV1().ServiceAccounts(Namespace).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	cfg := *l.env.Config
	cfg.BearerToken = tr.Status.Token
	return writeKubeconfig(t, &cfg)
}

// renderedConfig reads a component's allotd.yaml from the installed ConfigMap.
func (l *liveEnv) renderedConfig(cm string) map[string]any {
	var o corev1.ConfigMap
	if err := l.c.Get(context.Background(), client.ObjectKey{Namespace: Namespace, Name: cm}, &o); err != nil {
		l.t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(o.Data["allotd.yaml"]), &m); err != nil {
		l.t.Fatal(err)
	}
	return m
}

// set writes v at the dotted path of m, creating maps on the way.
func set(m map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	if v == nil {
		delete(m, keys[len(keys)-1])
		return
	}
	m[keys[len(keys)-1]] = v
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proc is a running allotd.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	log  string
	http string
	done chan struct{}
	err  error
}

// startAllotd runs allotd with cfg and env, and waits until /readyz answers.
func (l *liveEnv) startAllotd(name string, cfg map[string]any, env ...string) *proc {
	t := l.t
	dir := t.TempDir()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	set(cfg, "http.address", httpAddr)
	set(cfg, "log.format", "text")
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "allotd.yaml")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(l.allotd, "--config", p)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pr := &proc{t: t, name: name, cmd: cmd, log: logf.Name(), http: httpAddr, done: make(chan struct{})}
	go func() {
		pr.err = cmd.Wait()
		logf.Close()
		close(pr.done)
	}()
	t.Cleanup(func() {
		pr.stop(20 * time.Second)
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", name, tail(pr.log, 40))
		}
	})
	testenv.Eventually(t, 90*time.Second, name+" to be ready", func() (bool, string) {
		select {
		case <-pr.done:
			t.Fatalf("%s exited before it was ready: %v\n%s\nconfig:\n%s", name, pr.err, tail(pr.log, 40), b)
		default:
		}
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false, err.Error() + "\n" + tail(pr.log, 40)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status + "\n" + tail(pr.log, 40)
	})
	return pr
}

// stop sends SIGTERM and waits (SIGKILL after grace); an error (exit status, or no exit in
// time) carries the end of the process's log.
func (p *proc) stop(grace time.Duration) error {
	err := p.term(grace)
	if err != nil {
		return fmt.Errorf("%s: %w; log:\n%s", p.name, err, tail(p.log, 30))
	}
	return nil
}

func (p *proc) term(grace time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("no exit within %s of SIGTERM", grace)
	}
}

func tail(p string, n int) string {
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

// auditEvent is the part of an audit.k8s.io/v1 Event the check reads.
type auditEvent struct {
	Stage          string    `json:"stage"`
	StageTimestamp time.Time `json:"stageTimestamp"`
	Verb           string    `json:"verb"`
	User           struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	RequestURI     string `json:"requestURI"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
}

// checkAudit fails the test for every request of allot's ServiceAccounts that RBAC refused,
// and logs what each of them did (the evidence behind templates/rbac.yaml).
func (l *liveEnv) checkAudit() {
	t := l.t
	f, err := os.Open(l.audit)
	if err != nil {
		t.Errorf("audit log: %v", err)
		return
	}
	defer f.Close()
	used := map[string]map[string]bool{} // user -> "verb group/resource[/sub] (ns)"
	var denied []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.ObjectRef == nil {
			continue
		}
		user := strings.TrimPrefix(e.User.Username, "system:serviceaccount:"+Namespace+":")
		if user == e.User.Username {
			continue
		}
		res := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			res += "/" + e.ObjectRef.Subresource
		}
		key := accessKey(e.Verb, e.ObjectRef.APIGroup, res)
		if e.ResponseStatus != nil && e.ResponseStatus.Code == http.StatusForbidden {
			if !l.uninstalled.IsZero() && e.StageTimestamp.After(l.uninstalled) {
				continue // the RBAC objects are being deleted
			}
			denied = append(denied, fmt.Sprintf("%s: %s (namespace %q, name %q): %s", user, key, e.ObjectRef.Namespace, e.ObjectRef.Name, e.ResponseStatus.Message))
			continue
		}
		if used[user] == nil {
			used[user] = map[string]bool{}
		}
		used[user][key] = true
	}
	slices.Sort(denied)
	denied = slices.Compact(denied)
	for _, d := range denied {
		t.Errorf("RBAC refused %s", d)
	}
	docs := decodeStrict(t, l.manifest)
	for _, u := range sortedKeys(used) {
		var unused []string
		for g := range grants(docs, u) {
			// An informer's list is a watch with initial events (client-go's watch-list).
			f := strings.Fields(g)
			if !used[u][g] && !(f[0] == "list" && used[u][accessKey("watch", "", strings.Join(f[1:], " "))]) {
				unused = append(unused, g)
			}
		}
		sort.Strings(unused)
		t.Logf("%s used:\n  %s\ngranted, not exercised by this scenario:\n  %s", u,
			strings.Join(sortedKeys(used[u]), "\n  "), strings.Join(unused, "\n  "))
	}
	if len(used) == 0 && !t.Failed() {
		t.Errorf("the audit log %s holds no request of allot's ServiceAccounts: the check saw nothing", l.audit)
	}
}

// agentPod creates the Pod object the agent runs as (owned by its DaemonSet), so it can read
// its owner as in a cluster.
func (l *liveEnv) agentPod(node string) string {
	ctx := context.Background()
	var ds appsv1.DaemonSet
	if err := l.c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "allot-agent"}, &ds); err != nil {
		l.t.Fatal(err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "allot-agent-" + node, Labels: ds.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}},
		Spec: ds.Spec.Template.Spec,
	}
	p.Spec.NodeName = node
	if err := l.c.Create(ctx, p); err != nil {
		l.t.Fatal(err)
	}
	return p.Name
}

func (l *liveEnv) node(name string, lbls map[string]string, providerID string) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	if err := l.c.Create(context.Background(), n); err != nil {
		l.t.Fatal(err)
	}
}

func (l *liveEnv) pod(ns, name, node string, owner *metav1.OwnerReference) *corev1.Pod {
	ctx := context.Background()
	if ns != "default" {
		_ = l.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10.1"}}},
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if err := l.c.Create(ctx, p); err != nil {
		l.t.Fatal(err)
	}
	return p
}

// agentConfig is the chart's agent configuration made to run on this machine: files in a
// temporary directory, no datapath (the test must not change the host's firewall).
func (l *liveEnv) agentConfig(kubeconfig string) (map[string]any, string) {
	cfg := l.renderedConfig("allot-agent-config")
	dir := t2dir(l.t)
	set(cfg, "cluster.kubeconfig", kubeconfig)
	set(cfg, "socket", filepath.Join(dir, "allotd.sock"))
	set(cfg, "store.path", filepath.Join(dir, "allot.db"))
	set(cfg, "datapath", map[string]any{"type": "none"})
	if _, ok := cfg["cni"]; ok {
		for _, k := range []string{"confDir", "binDir"} {
			p := filepath.Join(dir, k)
			if err := os.MkdirAll(p, 0o755); err != nil {
				l.t.Fatal(err)
			}
			set(cfg, "cni."+k, p)
		}
	}
	return cfg, dir
}

// t2dir is a temporary directory with a short path (unix socket paths are limited to 107 bytes).
func t2dir(t *testing.T) string {
	d, err := os.MkdirTemp("", "allot-live-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func (l *liveEnv) operatorConfig(kubeconfig string) map[string]any {
	cfg := l.renderedConfig("allot-operator-config")
	set(cfg, "cluster.kubeconfig", kubeconfig)
	return cfg
}

// webhookEndpoint makes the webhook Service lead to addr:port, as the endpoints of the operator
// pods would: the API server then calls the operator with the chart's certificate and
// configuration. Endpoints must not be loopback, so this is the host's first global IPv4.
func (l *liveEnv) webhookEndpoint(port int) {
	t := l.t
	ip := hostIPv4(t)
	ctx := context.Background()
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: Namespace, Name: "allot-operator-webhook-test", Labels: map[string]string{discoveryv1.LabelServiceName: "allot-operator-webhook"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("webhook"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if err := l.c.Create(ctx, es); err != nil {
		t.Fatal(err)
	}
}

func hostIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	testenv.Missing(t, "no global IPv4 address on this host for the webhook's endpoint")
	return ""
}

// webhookCerts writes the chart's webhook Secret to a directory for the operator's certDir.
func (l *liveEnv) webhookCerts() string {
	var s corev1.Secret
	if err := l.c.Get(context.Background(), client.ObjectKey{Namespace: Namespace, Name: "allot-operator-webhook-tls"}, &s); err != nil {
		l.t.Fatal(err)
	}
	dir := l.t.TempDir()
	for k, v := range s.Data {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			l.t.Fatal(err)
		}
	}
	return dir
}

// grants expands the rules of a component's ClusterRole and Role into "verb group resource"
// keys, as checkAudit writes them (without the namespace).
func grants(docs []doc, name string) map[string]bool {
	out := map[string]bool{}
	for _, d := range docs {
		var rules []rbacv1.PolicyRule
		switch o := d.obj.(type) {
		case *rbacv1.ClusterRole:
			rules = o.Rules
		case *rbacv1.Role:
			rules = o.Rules
		}
		if d.name != name {
			continue
		}
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out[accessKey(v, g, res)] = true
					}
				}
			}
		}
	}
	return out
}

func accessKey(verb, group, resource string) string {
	if group != "" {
		resource = group + " " + resource
	}
	return fmt.Sprintf("%-6s %s", verb, resource)
}

// waitAllotNode waits for the agent's AllotNode: the agent creates it once its informer
// caches have synced (its /readyz answers before).
func (l *liveEnv) waitAllotNode(name string) {
	eventually(l.t, "the agent's AllotNode", 60*time.Second, func() (bool, string) {
		var n allotv1.AllotNode
		err := l.c.Get(context.Background(), client.ObjectKey{Name: name}, &n)
		return err == nil, fmt.Sprint(err)
	})
}
