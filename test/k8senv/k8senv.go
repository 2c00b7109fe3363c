// Package k8senv runs a real etcd and kube-apiserver for tests, installs allot's CRDs (and
// admission policies) from deploy/crds, and hands out a *rest.Config with admin rights.
//
// The binaries come from hack/build-kube.sh (make kube-binaries): $ALLOT_KUBE_DIR when set
// (and only there), else $KUBEBUILDER_ASSETS, else
// $ALLOT_CACHE (default ~/.cache/allot)/kube-v1.36.3-etcd-v3.6.6. Tests calling Start skip
// under -short; when the binaries are missing they fail under CI and make test and skip
// elsewhere (internal/testenv), with a message saying how to get them.
//
// Every process runs in its own process group with a parent-death signal, so nothing outlives
// a test binary that crashes or is killed; Stop kills them and removes the temp directory.
// kube-apiserver and etcd can each be stopped and started again (same ports, data and
// credentials) to test how clients ride out an outage.
package k8senv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/internal/testenv"
)

// Versions the default binary directory is keyed by (hack/build-kube.sh).
const (
	KubeVersion = "v1.36.3"
	EtcdVersion = "v3.6.6"
)

// ErrNoBinaries: kube-apiserver or etcd is not where the harness looks.
var ErrNoBinaries = errors.New("k8senv: kube-apiserver/etcd binaries not found")

// BinDir returns the directory holding kube-apiserver and etcd, or ErrNoBinaries naming the
// directories it looked in.
func BinDir() (string, error) {
	var tried []string
	if d := os.Getenv("ALLOT_KUBE_DIR"); d != "" {
		// An explicit choice: no fallback that would test against other binaries.
		if isExec(filepath.Join(d, "kube-apiserver")) && isExec(filepath.Join(d, "etcd")) {
			return d, nil
		}
		return "", fmt.Errorf("%w in ALLOT_KUBE_DIR=%s (build them with `make kube-binaries`)", ErrNoBinaries, d)
	}
	cands := []string{os.Getenv("KUBEBUILDER_ASSETS")}
	cache := os.Getenv("ALLOT_CACHE")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "allot")
		}
	}
	if cache != "" {
		cands = append(cands, filepath.Join(cache, "kube-"+KubeVersion+"-etcd-"+EtcdVersion))
	}
	for _, d := range cands {
		if d == "" {
			continue
		}
		tried = append(tried, d)
		if isExec(filepath.Join(d, "kube-apiserver")) && isExec(filepath.Join(d, "etcd")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w in %s (build them with `make kube-binaries`, or set ALLOT_KUBE_DIR)",
		ErrNoBinaries, strings.Join(tried, ", "))
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// Options tune an environment. The zero value is fine.
type Options struct {
	// BinDir overrides BinDir().
	BinDir string
	// CRDDir is the directory of manifests to install (every *.yaml: CRDs first, then the
	// rest, e.g. ValidatingAdmissionPolicies). Default: deploy/crds of the repository holding
	// the working directory. "-" installs nothing.
	CRDDir string
	// ExtraAPIServerFlags are appended to the kube-apiserver command line.
	ExtraAPIServerFlags []string
	// QPS and Burst of the returned rest.Config (default 500 and 1000: tests create objects in
	// bulk and must not wait on client-side throttling).
	QPS   float32
	Burst int
	// Log receives the processes' output lines (default: only kept in files in Dir, and shown
	// in errors).
	Log io.Writer
	// ServiceAccounts ("namespace/name") get a static token each that authenticates as that
	// ServiceAccount (user system:serviceaccount:NS:NAME, groups system:serviceaccounts and
	// system:serviceaccounts:NS), for ServiceAccountConfig. Unlike Config's system:masters,
	// which API Priority and Fairness exempts, these requests are queued as a cluster's
	// workloads' are, and RBAC authorizes them (bind the roles the test needs).
	ServiceAccounts []string
}

// Env is a running etcd + kube-apiserver.
type Env struct {
	// Config is an admin (system:masters) config for the API server.
	Config *rest.Config
	// Dir is the temp directory holding data, certificates and logs.
	Dir string

	opts      Options
	bin       string
	etcdURL   string
	etcdArgs  []string
	apiPort   int
	token     string
	saTokens  map[string]string // "namespace/name" -> token
	apiArgs   []string
	mu        sync.Mutex
	etcd      *proc
	apiserver *proc
}

// Start starts an environment for a test and stops it at the end of the test. It skips the
// test under -short; missing binaries end it by internal/testenv's rule (a failure under CI
// and make test, a skip elsewhere); binaries that do not start fail it.
func Start(t testing.TB, opts ...Options) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("k8senv: needs a real kube-apiserver and etcd; skipped with -short")
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.BinDir == "" {
		d, err := BinDir()
		if err != nil {
			testenv.Missing(t, err.Error())
		}
		o.BinDir = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := New(ctx, o)
	if err != nil {
		t.Fatalf("k8senv: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("k8senv: kube-apiserver log tail:\n%s", e.LogTail("kube-apiserver", 40))
		}
		e.Stop()
	})
	return e
}

// New starts etcd and kube-apiserver, waits for /readyz and installs the manifests. Callers
// must call Stop.
func New(ctx context.Context, o Options) (_ *Env, err error) {
	if o.BinDir == "" {
		d, err := BinDir()
		if err != nil {
			return nil, err
		}
		o.BinDir = d
	}
	if o.QPS == 0 {
		o.QPS = 500
	}
	if o.Burst == 0 {
		o.Burst = 1000
	}
	dir, err := os.MkdirTemp("", "allot-k8senv-")
	if err != nil {
		return nil, fmt.Errorf("k8senv: %w", err)
	}
	e := &Env{Dir: dir, opts: o, bin: o.BinDir}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()
	// Free ports are picked by binding :0 and closing; another process may take one before
	// etcd or kube-apiserver binds it, so a start that fails early is retried on new ports.
	for attempt := 1; ; attempt++ {
		err := e.startEtcd(ctx)
		if err == nil {
			break
		}
		if attempt == 3 || ctx.Err() != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		if err := e.prepareAPIServer(); err != nil {
			return nil, err
		}
		err := e.StartAPIServer(ctx)
		if err == nil {
			break
		}
		if attempt == 3 || ctx.Err() != nil {
			return nil, err
		}
		e.StopAPIServer()
	}
	if o.CRDDir != "-" {
		crdDir := o.CRDDir
		if crdDir == "" {
			if crdDir, err = FindCRDDir(); err != nil {
				return nil, err
			}
		}
		if err := InstallManifests(ctx, e.Config, crdDir); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (e *Env) startEtcd(ctx context.Context) error {
	cport, err := freePort()
	if err != nil {
		return fmt.Errorf("k8senv: etcd port: %w", err)
	}
	pport, err := freePort()
	if err != nil {
		return fmt.Errorf("k8senv: etcd peer port: %w", err)
	}
	e.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", cport)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pport)
	args := []string{
		"--name=default",
		"--data-dir=" + filepath.Join(e.Dir, "etcd"),
		"--listen-client-urls=" + e.etcdURL,
		"--advertise-client-urls=" + e.etcdURL,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		// Test data: durability across host crashes is not needed, speed is.
		"--unsafe-no-fsync",
		"--log-level=error",
	}
	_ = os.RemoveAll(filepath.Join(e.Dir, "etcd")) // a failed attempt's data
	e.etcdArgs = args
	if err := e.StartEtcd(ctx); err != nil {
		e.StopEtcd()
		return err
	}
	return nil
}

// StartEtcd starts etcd (again, after StopEtcd) on the same ports with the same data, and
// waits until /health answers OK. kube-apiserver reconnects by itself.
func (e *Env) StartEtcd(ctx context.Context) error {
	p, err := e.startChild(&e.etcd, "etcd", e.etcdArgs)
	if err != nil {
		return err
	}
	return waitHTTP(ctx, p, nil, e.etcdURL+"/health", "")
}

// StopEtcd stops etcd (SIGTERM, then SIGKILL after 10 s); kube-apiserver keeps running and
// fails what needs storage until etcd is back.
func (e *Env) StopEtcd() { e.stopChild(&e.etcd) }

// RestartEtcd stops and starts etcd.
func (e *Env) RestartEtcd(ctx context.Context) error {
	e.StopEtcd()
	return e.StartEtcd(ctx)
}

func (e *Env) prepareAPIServer() error {
	port, err := freePort()
	if err != nil {
		return fmt.Errorf("k8senv: apiserver port: %w", err)
	}
	e.apiPort = port
	certFile, keyFile, err := writeServingCert(filepath.Join(e.Dir, "certs"))
	if err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("k8senv: service account key: %w", err)
	}
	saKey := filepath.Join(e.Dir, "sa.key")
	saPub := filepath.Join(e.Dir, "sa.pub")
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("k8senv: service account key: %w", err)
	}
	if err := os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return fmt.Errorf("k8senv: %w", err)
	}
	if err := os.WriteFile(saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return fmt.Errorf("k8senv: %w", err)
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return fmt.Errorf("k8senv: %w", err)
	}
	e.token = hex.EncodeToString(tok)
	lines, err := e.serviceAccountTokens()
	if err != nil {
		return err
	}
	tokens := filepath.Join(e.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(e.token+`,admin,admin-uid,"system:masters"`+"\n"+lines), 0o600); err != nil {
		return fmt.Errorf("k8senv: %w", err)
	}
	e.apiArgs = append([]string{
		"--etcd-servers=" + e.etcdURL,
		"--tls-cert-file=" + certFile,
		"--tls-private-key-file=" + keyFile,
		"--secure-port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--service-cluster-ip-range=10.96.0.0/12",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
		"--disable-admission-plugins=ServiceAccount",
		// Each test runs its own server: keep it quiet and lean.
		"--v=0",
		"--endpoint-reconciler-type=none",
	}, e.opts.ExtraAPIServerFlags...)
	e.Config = &rest.Config{
		Host:            fmt.Sprintf("https://127.0.0.1:%d", port),
		BearerToken:     e.token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, // self-signed serving cert of a throwaway server
		QPS:             e.opts.QPS,
		Burst:           e.opts.Burst,
	}
	return nil
}

// serviceAccountTokens makes a token for each of Options.ServiceAccounts and returns their
// lines of the static token file (token,user,uid,"groups").
func (e *Env) serviceAccountTokens() (string, error) {
	e.saTokens = map[string]string{}
	var b strings.Builder
	for _, sa := range e.opts.ServiceAccounts {
		ns, name, ok := strings.Cut(sa, "/")
		if !ok || ns == "" || name == "" || strings.ContainsAny(sa, ",\"\n") {
			return "", fmt.Errorf("k8senv: ServiceAccounts: %q is not namespace/name", sa)
		}
		tok := make([]byte, 16)
		if _, err := rand.Read(tok); err != nil {
			return "", fmt.Errorf("k8senv: %w", err)
		}
		e.saTokens[sa] = hex.EncodeToString(tok)
		fmt.Fprintf(&b, "%s,system:serviceaccount:%s:%s,sa-%s-%s,\"system:serviceaccounts,system:serviceaccounts:%s\"\n",
			e.saTokens[sa], ns, name, ns, name, ns)
	}
	return b.String(), nil
}

// ServiceAccountConfig is Config authenticated as sa ("namespace/name", one of
// Options.ServiceAccounts) instead of as an admin.
func (e *Env) ServiceAccountConfig(sa string) (*rest.Config, error) {
	tok, ok := e.saTokens[sa]
	if !ok {
		return nil, fmt.Errorf("k8senv: no token for ServiceAccount %q (list it in Options.ServiceAccounts)", sa)
	}
	out := rest.CopyConfig(e.Config)
	out.BearerToken = tok
	return out, nil
}

// StartAPIServer starts kube-apiserver (again, after StopAPIServer) on the same port with the
// same certificates and etcd, and waits until /readyz answers OK.
func (e *Env) StartAPIServer(ctx context.Context) error {
	p, err := e.startChild(&e.apiserver, "kube-apiserver", e.apiArgs)
	if err != nil {
		return err
	}
	return waitHTTP(ctx, p, &tls.Config{InsecureSkipVerify: true}, e.Config.Host+"/readyz", e.token) //nolint:gosec // test server
}

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 10 s); etcd keeps running.
func (e *Env) StopAPIServer() { e.stopChild(&e.apiserver) }

// startChild starts the process of slot (e.etcd or e.apiserver) unless it runs.
func (e *Env) startChild(slot **proc, name string, args []string) (*proc, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if *slot != nil && !(*slot).exited() {
		return nil, fmt.Errorf("k8senv: %s is already running", name)
	}
	p, err := e.spawn(name, args)
	if err != nil {
		return nil, err
	}
	*slot = p
	return p, nil
}

// stopChild stops the process of slot, if any (SIGTERM, then SIGKILL after 10 s).
func (e *Env) stopChild(slot **proc) {
	e.mu.Lock()
	p := *slot
	e.mu.Unlock()
	if p != nil {
		p.stop(10 * time.Second)
	}
}

// RestartAPIServer stops and starts kube-apiserver.
func (e *Env) RestartAPIServer(ctx context.Context) error {
	e.StopAPIServer()
	return e.StartAPIServer(ctx)
}

// Stop kills both processes and removes Dir. It is safe to call more than once.
func (e *Env) Stop() {
	e.mu.Lock()
	api, etcd := e.apiserver, e.etcd
	e.mu.Unlock()
	if api != nil {
		api.stop(5 * time.Second)
	}
	if etcd != nil {
		etcd.stop(5 * time.Second)
	}
	if e.Dir != "" {
		_ = os.RemoveAll(e.Dir)
	}
}

// WriteKubeconfig writes a kubeconfig for Config (admin token, the server's self-signed
// certificate accepted) to path, for processes such as allotd that read one. It stays valid
// across restarts of kube-apiserver, which keeps its port, certificates and token.
func (e *Env) WriteKubeconfig(path string) error {
	c := e.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["k8senv"] = &clientcmdapi.Cluster{Server: c.Host, InsecureSkipTLSVerify: c.Insecure, CertificateAuthorityData: c.CAData}
	kc.AuthInfos["k8senv"] = &clientcmdapi.AuthInfo{Token: c.BearerToken, ClientCertificateData: c.CertData, ClientKeyData: c.KeyData}
	kc.Contexts["k8senv"] = &clientcmdapi.Context{Cluster: "k8senv", AuthInfo: "k8senv"}
	kc.CurrentContext = "k8senv"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("k8senv: write kubeconfig: %w", err)
	}
	return nil
}

// Client returns a controller-runtime client (built-in types and allot.io) for Config.
func (e *Env) Client() (client.Client, error) {
	return client.New(e.Config, client.Options{Scheme: allotk8s.NewScheme()})
}

// LogTail returns the last n lines of a process's log ("etcd" or "kube-apiserver").
func (e *Env) LogTail(name string, n int) string {
	return TailFile(filepath.Join(e.Dir, name+".log"), n)
}

// TailFile returns the last n lines of a file ("" when it cannot be read): a component's
// log for a test failure's message.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// proc is one child process.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	// Signal the whole process group: the child may have started helpers.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// spawnReq asks the spawner thread to start a process.
type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

// spawner starts every child from one OS thread that never exits: Linux sends the
// parent-death signal when the *thread* that forked the child exits, and Go may retire
// threads; a locked, never-ending thread makes Pdeathsig mean "when the test binary dies".
func spawner() {
	runtime.LockOSThread()
	for r := range spawnCh {
		r.res <- r.cmd.Start()
	}
}

// Spawn starts cmd from the harness's spawner thread, in its own process group and with
// SIGKILL as its parent-death signal (unless cmd.SysProcAttr is set), so it dies with the
// test binary even if that is killed: for tests that start and kill their own processes
// (allotd) many times.
func Spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go spawner()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	res := make(chan error)
	spawnCh <- spawnReq{cmd: cmd, res: res}
	return <-res
}

func (e *Env) spawn(name string, args []string) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(e.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("k8senv: %s log: %w", name, err)
	}
	cmd := exec.Command(filepath.Join(e.bin, name), args...)
	var out io.Writer = logf
	if e.opts.Log != nil {
		out = io.MultiWriter(logf, e.opts.Log)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = e.Dir
	if err := Spawn(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("k8senv: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logf}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// waitHTTP polls url until it answers 200, the process exits, or ctx ends.
func waitHTTP(ctx context.Context, p *proc, tlsConf *tls.Config, url, token string) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf}}
	defer hc.CloseIdleConnections()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, lastLines(string(b), 5))
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return fmt.Errorf("k8senv: %s exited (%v) before it was ready; log:\n%s", p.name, p.err, tailFile(p.log.Name(), 30))
		case <-ctx.Done():
			return fmt.Errorf("k8senv: %s not ready at %s: %s: %w", p.name, url, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return lastLines(string(b), n)
}

// FindCRDDir returns $ALLOT_CRD_DIR, else deploy/crds in the first ancestor of the working
// directory that has one (tests run in their package directory).
func FindCRDDir() (string, error) {
	if d := os.Getenv("ALLOT_CRD_DIR"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("k8senv: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		c := filepath.Join(d, "deploy", "crds")
		if st, err := os.Stat(c); err == nil && st.IsDir() {
			return c, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("k8senv: no deploy/crds above %s (set ALLOT_CRD_DIR)", wd)
		}
	}
}

// InstallManifests creates every object of every *.yaml file in dir (CRDs first, waiting until
// they are Established, then the rest in file order). Existing objects are left alone.
func InstallManifests(ctx context.Context, cfg *rest.Config, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return fmt.Errorf("k8senv: %w", err)
	}
	slices.Sort(files)
	var crds, rest []*unstructured.Unstructured
	for _, f := range files {
		objs, err := ReadManifests(f)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if o.GetKind() == "CustomResourceDefinition" {
				crds = append(crds, o)
			} else {
				rest = append(rest, o)
			}
		}
	}
	s := allotk8s.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return fmt.Errorf("k8senv: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return fmt.Errorf("k8senv: client: %w", err)
	}
	for _, o := range crds {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("k8senv: create CRD %s: %w", o.GetName(), err)
		}
	}
	for _, o := range crds {
		if err := waitEstablished(ctx, c, o.GetName()); err != nil {
			return err
		}
	}
	// A fresh client: its REST mapper must see the kinds just installed.
	c, err = client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return fmt.Errorf("k8senv: client: %w", err)
	}
	for _, o := range rest {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("k8senv: create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, c client.Client, name string) error {
	for {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err == nil {
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("k8senv: CRD %s not Established: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ReadManifests reads every object of a multi-document YAML file (deploy/manifests/allot.yaml:
// tests take the chart's RBAC from it).
func ReadManifests(path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("k8senv: %w", err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("k8senv: %s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("k8senv: %s: %w", path, err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}
