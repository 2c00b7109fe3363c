package daemonset

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/datapath/topo"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// node is a network namespace standing for the node. Loopback is enough: the iptables
// datapath's rules name interfaces by pattern, and the test reads them back.
type node struct {
	name string
	ns   netns.NsHandle
}

func newNode(t *testing.T) *node {
	t.Helper()
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	n := &node{name: fmt.Sprintf("allotds-%d-%s", os.Getpid(), hex.EncodeToString(rnd[:]))}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	h, err := netns.NewNamed(n.name)
	if err != nil {
		_ = netns.Set(orig)
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatalf("create netns %s: %v", n.name, err)
	}
	err = func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}()
	if rerr := netns.Set(orig); rerr != nil {
		t.Fatalf("restore netns: %v", rerr) // the thread stays locked and dies with the goroutine
	}
	orig.Close()
	runtime.UnlockOSThread()
	n.ns = h
	t.Cleanup(func() {
		h.Close()
		_ = netns.DeleteNamed(n.name)
	})
	if err != nil {
		t.Fatalf("set up netns %s: %v", n.name, err)
	}
	return n
}

// in runs fn in the node's namespace (processes started there are born in it).
func (n *node) in(fn func() error) error { return topo.In(n.ns, fn) }

// nat returns allot's part of the nat table: per family, the ALLOT-MASQ chains, the number
// of jumps to one from POSTROUTING, and every chain's rules.
type nat struct {
	chains map[string][]string
	jumps  map[string]int
	rules  map[string][]string
}

func (n *node) nat(t *testing.T) nat {
	t.Helper()
	st := nat{chains: map[string][]string{}, jumps: map[string]int{}, rules: map[string][]string{}}
	for fam, bin := range map[string]string{"ipv4": "iptables-save", "ipv6": "ip6tables-save"} {
		var out []byte
		err := n.in(func() error {
			var err error
			out, err = exec.Command(bin, "-t", "nat").CombinedOutput()
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v\n%s", bin, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) > 0 && strings.HasPrefix(f[0], ":ALLOT-MASQ-"):
				st.chains[fam] = append(st.chains[fam], strings.TrimPrefix(f[0], ":"))
			case len(f) > 2 && f[0] == "-A" && f[1] == "POSTROUTING" && strings.Contains(line, "-j ALLOT-MASQ-"):
				st.jumps[fam]++
			case len(f) > 2 && f[0] == "-A" && strings.HasPrefix(f[1], "ALLOT-MASQ-"):
				st.rules[f[1]] = append(st.rules[f[1]], strings.Join(f[2:], " "))
			}
		}
	}
	return st
}

// masqueraded returns the sources the single chain of fam masquerades ("" when there is
// not exactly one chain and one jump).
func (s nat) masqueraded(fam string) []string {
	if len(s.chains[fam]) != 1 || s.jumps[fam] != 1 {
		return nil
	}
	var out []string
	for _, r := range s.rules[s.chains[fam][0]] {
		f := strings.Fields(r)
		if len(f) >= 4 && f[0] == "-s" && strings.Contains(r, "-j MASQUERADE") {
			out = append(out, f[1])
		}
	}
	return out
}

func (s nat) String() string {
	return fmt.Sprintf("chains %v, jumps %v, rules %v", s.chains, s.jumps, s.rules)
}

// proxy forwards TCP connections accepted in the node's namespace to the API server on the
// host's loopback: the agent in the namespace reaches the API server only through it.
type proxy struct {
	ln     net.Listener
	target string
}

func newProxy(t *testing.T, n *node, target string) *proxy {
	t.Helper()
	p := &proxy{target: target}
	if err := n.in(func() error {
		var err error
		p.ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.ln.Close() })
	go func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// kubeconfig writes a kubeconfig for cfg whose server is addr.
func kubeconfig(t *testing.T, c *rest.Config, addr string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: "https://" + addr, InsecureSkipTLSVerify: c.Insecure, CertificateAuthorityData: c.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: c.BearerToken, ClientCertificateData: c.CertData, ClientKeyData: c.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// agent is one allotd process in the node's namespace.
type agent struct {
	t    *testing.T
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan error
}

// syncBuffer is the agent's log, read while the agent writes it.
type syncBuffer struct{ testenv.Buffer }

// lines returns the log lines whose msg is one of msgs, in order.
func (s *syncBuffer) lines(msgs ...string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, m := range msgs {
			if strings.Contains(sc.Text(), `msg="`+m+`"`) {
				out = append(out, m)
			}
		}
	}
	return out
}

func startAgent(t *testing.T, n *node, config string, env ...string) *agent {
	t.Helper()
	a := &agent{t: t, log: &syncBuffer{}, done: make(chan error, 1)}
	a.cmd = exec.Command(envAllotd(), "--config", config)
	a.cmd.Env = append(os.Environ(), env...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.in(a.cmd.Start); err != nil {
		t.Fatalf("start allotd: %v", err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	t.Cleanup(func() {
		if a.cmd.ProcessState == nil {
			_ = a.cmd.Process.Kill()
			<-a.done
		}
		if t.Failed() {
			t.Logf("allotd log:\n%s", a.log.String())
		}
	})
	return a
}

func envAllotd() string { return env.allotd }

// stop sends SIGTERM and waits for a clean exit.
func (a *agent) stop() {
	a.t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		a.t.Fatal(err)
	}
	select {
	case err := <-a.done:
		if err != nil {
			a.t.Fatalf("allotd exited with %v\n%s", err, a.log.String())
		}
	case <-time.After(30 * time.Second):
		a.t.Fatalf("allotd did not stop within 30 s of SIGTERM\n%s", a.log.String())
	}
}

// readyz asks the agent's health listener in the node's namespace.
func (n *node) readyz(addr string) (int, string, error) {
	var c net.Conn
	if err := n.in(func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	}); err != nil {
		return 0, "", err
	}
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return c, nil }}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// watcher reports inotify events of directories, in order.
type watcher struct {
	fd    int
	dirs  map[int32]string
	mu    sync.Mutex
	evs   []event
	added chan struct{}
}

type event struct {
	dir, name string
	mask      uint32
}

func (e event) String() string {
	var ops []string
	for _, m := range []struct {
		bit  uint32
		name string
	}{{unix.IN_CREATE, "create"}, {unix.IN_MODIFY, "modify"}, {unix.IN_CLOSE_WRITE, "close_write"},
		{unix.IN_MOVED_TO, "moved_to"}, {unix.IN_MOVED_FROM, "moved_from"}, {unix.IN_DELETE, "delete"}, {unix.IN_ATTRIB, "attrib"}} {
		if e.mask&m.bit != 0 {
			ops = append(ops, m.name)
		}
	}
	return filepath.Join(e.dir, e.name) + " " + strings.Join(ops, "|")
}

func newWatcher(t *testing.T, dirs ...string) *watcher {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{fd: fd, dirs: map[int32]string{}, added: make(chan struct{}, 1)}
	for _, d := range dirs {
		wd, err := unix.InotifyAddWatch(fd, d, unix.IN_CREATE|unix.IN_MODIFY|unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO|unix.IN_MOVED_FROM|unix.IN_DELETE|unix.IN_ATTRIB)
		if err != nil {
			t.Fatalf("inotify %s: %v", d, err)
		}
		w.dirs[int32(wd)] = d
	}
	go w.read()
	t.Cleanup(func() { unix.Close(fd) })
	return w
}

func (w *watcher) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if err != nil || n <= 0 {
			return
		}
		var got []event
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if raw.Len > 0 {
				b := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(raw.Len)]
				name = string(bytes.TrimRight(b, "\x00"))
			}
			got = append(got, event{dir: w.dirs[raw.Wd], name: name, mask: raw.Mask})
			off += unix.SizeofInotifyEvent + int(raw.Len)
		}
		w.mu.Lock()
		w.evs = append(w.evs, got...)
		w.mu.Unlock()
		select {
		case w.added <- struct{}{}:
		default:
		}
	}
}

func (w *watcher) events() []event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]event(nil), w.evs...)
}

// waitFor waits until an event matches, then calls fn at once (as close to the moment as
// the test can get) and returns the events seen so far.
func (w *watcher) waitFor(t *testing.T, timeout time.Duration, match func(event) bool, fn func()) []event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		evs := w.events()
		for _, e := range evs {
			if match(e) {
				if fn != nil {
					fn()
				}
				return evs
			}
		}
		select {
		case <-w.added:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for a file event; seen: %v", timeout, evs)
		}
	}
}

func eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}
