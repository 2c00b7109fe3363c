package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/client"
	"github.com/allot-ipam/allot/internal/testenv"
)

// Pool blocks for allotd's YAML config.
const (
	// defaultPools is a dual-stack pair (one pool per family, like conf/allotd.yaml), plus a
	// five-address pool that only a network naming it uses (exhaustion tests).
	defaultPools = `
  - {name: default-v4, cidrs: ["10.99.0.0/24"], gateway: 10.99.0.1, exclude: ["10.99.0.2-10.99.0.9"], routes: [{dst: 0.0.0.0/0}], default: true}
  - {name: default-v6, cidrs: ["fd00:99::/64"], gateway: "fd00:99::1", routes: [{dst: "::/0"}], default: true}
  - {name: tiny-v4, cidrs: ["10.98.0.0/29"], gateway: 10.98.0.1, routes: [{dst: 0.0.0.0/0}]}
`
)

// daemon is a real allotd process with its config, socket and store in a temp dir.
type daemon struct {
	t      *testing.T
	dir    string
	socket string
	store  string
	config string
	log    string
	cmd    *exec.Cmd
	done   chan error
	client *client.Client
}

// startDaemon writes a config with the given pools and starts allotd; it is stopped (and its
// log shown if the test failed) in t.Cleanup.
func startDaemon(t *testing.T, pools string) *daemon {
	t.Helper()
	dir := t.TempDir()
	d := &daemon{
		t:      t,
		dir:    dir,
		socket: filepath.Join(dir, "allotd.sock"),
		store:  filepath.Join(dir, "allot.db"),
		config: filepath.Join(dir, "allotd.yaml"),
		log:    filepath.Join(dir, "allotd.log"),
	}
	if len(d.socket) > 100 {
		t.Fatalf("socket path %s is too long for a unix socket; shorten the test name", d.socket)
	}
	cfg := fmt.Sprintf("socket: %s\nstore: {path: %s}\nhttp: {address: \"127.0.0.1:0\"}\nlog: {level: info, format: text}\npools:%s",
		d.socket, d.store, pools)
	if err := os.WriteFile(d.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.client = client.New(d.socket)
	t.Cleanup(func() {
		d.stop()
		d.client.Close()
		if t.Failed() {
			b, _ := os.ReadFile(d.log)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("allotd log (tail):\n%s", b)
		}
	})
	d.start()
	return d
}

// start runs allotd on the existing config and store and waits until it answers Status.
func (d *daemon) start() {
	d.t.Helper()
	logf, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== start %s\n", time.Now().Format(time.RFC3339Nano))
	d.cmd = exec.Command(env.allotd, "--config", d.config)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		d.t.Fatalf("start allotd: %v", err)
	}
	done := make(chan error, 1)
	d.done = done
	go func() { done <- d.cmd.Wait() }()

	testenv.Eventually(d.t, 30*time.Second, "allotd to be ready", func() (bool, string) {
		select {
		case err := <-done:
			done <- err
			b, _ := os.ReadFile(d.log)
			d.t.Fatalf("allotd exited during start: %v\n%s", err, b)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := d.client.Status(ctx)
		return err == nil, fmt.Sprint(err)
	})
}

// kill sends SIGKILL and waits for the process to go.
func (d *daemon) kill() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	d.cmd = nil
}

// stop sends SIGTERM, allowing 10 s for a graceful exit before SIGKILL.
func (d *daemon) stop() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		if err != nil {
			d.t.Logf("allotd exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		d.t.Errorf("allotd did not exit within 10s of SIGTERM")
		_ = d.cmd.Process.Signal(syscall.SIGKILL)
		<-d.done
	}
	d.cmd = nil
}

// allocations returns allotd's allocations keyed by owner.
func (d *daemon) allocations() map[api.Owner]api.Allocation {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := d.client.Allocations(ctx)
	if err != nil {
		d.t.Fatalf("Allocations: %v", err)
	}
	m := make(map[api.Owner]api.Allocation, len(list))
	for _, a := range list {
		if _, dup := m[a.Owner]; dup {
			d.t.Errorf("owner %s listed twice", a.Owner)
		}
		m[a.Owner] = a
	}
	return m
}

// allocAddrs is the sorted address list of an allocation, for comparisons.
func allocAddrs(a api.Allocation) []string {
	var out []string
	for _, ip := range a.IPs {
		out = append(out, ip.Address)
	}
	return sortStrings(out)
}

// netconf is an ipam-only network config for exec'ing allot-cni against this daemon.
func (d *daemon) netconf(network, ipamExtra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"ipam":{"type":"allot-cni","socket":%q,"timeout":"20s"%s}}`,
		network, d.socket, ipamExtra))
}
