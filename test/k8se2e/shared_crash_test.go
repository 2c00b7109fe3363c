package k8se2e

// An agent killed (SIGKILL) in the middle of a burst of shared-pool ADDs: the real allotd
// binary in agent mode, next to an in-process agent racing for the same pool, the operator's
// garbage collector running. Afterwards no address is held twice, the runtime's retries get
// an address each (the same one when the first ADD had answered), and once the pods that
// were never retried are deleted, the collector leaves no claim behind.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api/client"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

// procAgent is allotd in agent mode as its own process.
type procAgent struct {
	t      *testing.T
	bin    string
	config string
	cmd    *exec.Cmd
	done   chan struct{}
	log    *os.File
}

func mustGoMod(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		t.Fatalf("cannot find the module root (go env GOMOD): %v", err)
	}
	return mod
}

// newProcAgent writes the agent's configuration file; start runs it.
func newProcAgent(t *testing.T, bin, nodeName, kubeconfig string) (*procAgent, *node) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "allotd.sock")
	cfg := fmt.Sprintf(`mode: agent
socket: %s
store:
  path: %s
  noSync: true
http:
  address: ""
log:
  level: info
cluster:
  nodeName: %s
  kubeconfig: %s
  sharedPools:
    networks: [%s, %s]
`, socket, filepath.Join(dir, "allot.db"), nodeName, kubeconfig, netUnderlay, netStorage)
	path := filepath.Join(dir, "allotd.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	lf, err := os.Create(filepath.Join(dir, "allotd.log"))
	if err != nil {
		t.Fatal(err)
	}
	pa := &procAgent{t: t, bin: bin, config: path, log: lf}
	t.Cleanup(func() {
		pa.kill()
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(lf.Name())
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("allotd (%s) log tail:\n%s", nodeName, strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
	})
	// The harness's node only carries what exec needs: the name and the socket.
	n := &node{t: t, name: nodeName}
	n.cfg = sharedConfig(t, nodeName, kubeconfig)
	n.cfg.Socket = socket
	return pa, n
}

func (pa *procAgent) start() {
	pa.t.Helper()
	cmd := exec.Command(pa.bin, "--config", pa.config)
	cmd.Stdout, cmd.Stderr = pa.log, pa.log
	// Its own process group, killed with the test binary if that dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		pa.t.Fatal(err)
	}
	pa.cmd, pa.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(pa.done) }()
}

// kill sends SIGKILL to the process this test started, and waits for it.
func (pa *procAgent) kill() {
	if pa.cmd == nil {
		return
	}
	_ = pa.cmd.Process.Kill()
	<-pa.done
	pa.cmd = nil
}

func TestSharedAgentKilledMidAllocation(t *testing.T) {
	se := newSharedEnv(t, map[string]map[string]string{"node-k": nil, "node-b": nil})
	ctx := context.Background()
	bin := buildCmd(t, t.TempDir(), "allotd")
	se.namespace("burst", nil, nil)
	se.create(sharedPool("crash", &allotv1.SharedPoolFamily{Subnet: "10.50.0.0/24", IPs: []string{"10.50.0.10-10.50.0.109"}},
		nil, allotv1.PoolSelection{Default: true}))
	se.startOperator(gcGrace)
	nb := se.startAgent("node-b")
	pa, nk := newProcAgent(t, bin, "node-k", se.kc)
	pa.start()

	// Up: a first pod served by the process agent (retried until its informers synced).
	warm := se.pod("burst", "warm", "node-k", nil, nil)
	eventually(t, "the allotd process serves ADD", 30*time.Second, func() (bool, string) {
		out, err := se.execRaw(ctx, cniCall{cmd: "ADD", node: nk, pod: warm})
		if err != nil {
			return false, err.Error()
		}
		return out.err == nil, out.String()
	})

	const nK, nB = 60, 30
	type attempt struct {
		pod *corev1.Pod
		nd  *node
		out cniOut
		err error
	}
	var atts []*attempt
	for i := range nK {
		atts = append(atts, &attempt{pod: se.pod("burst", fmt.Sprintf("k-%02d", i), "node-k", nil, nil), nd: nk})
	}
	for i := range nB {
		atts = append(atts, &attempt{pod: se.pod("burst", fmt.Sprintf("b-%02d", i), "node-b", nil, nil), nd: nb})
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 24)
	for _, a := range atts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			a.out, a.err = se.execRaw(ctx, cniCall{cmd: "ADD", node: a.nd, pod: a.pod})
		}()
	}
	// Kill the process agent once it has answered some of the burst, in the middle of the rest.
	eventually(t, "some of node-k's burst claimed", 30*time.Second, func() (bool, string) {
		n := 0
		for _, c := range se.claims() {
			if c.Spec.Holder.Node == "node-k" {
				n++
			}
		}
		return n >= 15, fmt.Sprint(n)
	})
	pa.kill()
	wg.Wait()
	var okK, failedK int
	for _, a := range atts {
		if a.err != nil {
			t.Fatalf("%s: %v", a.pod.Name, a.err)
		}
		switch {
		case a.out.err == nil:
			if a.nd == nk {
				okK++
			}
		case a.nd == nb:
			t.Errorf("%s on the live node failed: %s", a.pod.Name, a.out)
		default:
			failedK++
		}
	}
	t.Logf("node-k killed mid-burst: %d ADDs answered, %d failed; %d claims exist", okK, failedK, len(se.claims()))
	if failedK == 0 {
		t.Log("every ADD of node-k finished before the kill (nothing was interrupted this run)")
	}

	// Duplicates: none, neither among claims (one per address by construction) nor among
	// what the runtime was told.
	told := map[string]string{}
	for _, a := range atts {
		for _, ad := range a.out.addrs() {
			if who, dup := told[ad]; dup {
				t.Errorf("%s told to %s and %s", ad, who, a.pod.Name)
			}
			told[ad] = a.pod.Name
		}
	}

	// The agent comes back. The runtime retries the even pods of node-k; the odd ones are
	// deleted without a retry (the user gave up), so only the collector can free them.
	pa.start()
	for i, a := range atts {
		if a.nd != nk || i%2 == 1 {
			continue
		}
		var got []string
		eventually(t, a.pod.Name+" retried after the restart", 30*time.Second, func() (bool, string) {
			out, err := se.execRaw(ctx, cniCall{cmd: "ADD", node: nk, pod: a.pod})
			if err != nil {
				return false, err.Error()
			}
			got = out.addrs()
			return out.err == nil, out.String()
		})
		if first := a.out.addrs(); first != nil && (len(got) != 1 || got[0] != first[0]) {
			t.Errorf("%s: retry got %v, the first ADD had answered %v", a.pod.Name, got, first)
		}
	}
	for i, a := range atts {
		if a.nd == nk && i%2 == 1 {
			if err := se.c.Delete(ctx, a.pod, ctrlclient.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
		}
	}

	// After GC: every claim is held by a live pod, one per pod, and matches its endpoint.
	live := map[string]bool{"warm": true}
	for i, a := range atts {
		if a.nd == nb || i%2 == 0 {
			live[a.pod.Name] = true
		}
	}
	eventually(t, "claims of the deleted pods collected", 30*gcGrace, func() (bool, string) {
		var extra []string
		for _, c := range se.claims() {
			if !live[c.Spec.Holder.Pod] {
				extra = append(extra, c.Spec.Holder.Pod+"="+c.Spec.IP)
			}
		}
		var eps allotv1.AllotEndpointList
		if err := se.c.List(ctx, &eps, ctrlclient.InNamespace("burst")); err != nil {
			return false, err.Error()
		}
		for _, ep := range eps.Items {
			if !live[ep.Name] {
				extra = append(extra, "endpoint "+ep.Name)
			}
		}
		return len(extra) == 0, fmt.Sprint(extra)
	})
	perPod := map[string][]string{}
	for _, c := range se.claims() {
		perPod[c.Spec.Holder.Pod] = append(perPod[c.Spec.Holder.Pod], c.Spec.IP)
	}
	for name := range live {
		if len(perPod[name]) != 1 {
			t.Errorf("%s holds %v, want exactly one address", name, perPod[name])
			continue
		}
		ep := se.endpoint("burst", name)
		if ep == nil || len(ep.Spec.Interfaces) != 1 || len(ep.Spec.Interfaces[0].IPs) != 1 ||
			!strings.HasPrefix(ep.Spec.Interfaces[0].IPs[0].Address, perPod[name][0]+"/") {
			t.Errorf("%s: endpoint %+v, claim %v", name, ep, perPod[name])
		}
	}
	// The restarted agent's own view agrees.
	cli := client.New(nk.cfg.Socket)
	defer cli.Close()
	eventually(t, "node-k's view without the deleted pods", 10*time.Second, func() (bool, string) {
		allocs, err := cli.Allocations(ctx)
		if err != nil {
			return false, err.Error()
		}
		var stale []string
		for _, al := range allocs {
			if al.Pod.Name != "" && !live[al.Pod.Name] {
				stale = append(stale, al.Pod.Name)
			}
		}
		return len(stale) == 0, fmt.Sprint(stale)
	})
}
