package soak

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/test/k8senv"
)

// proc is one allotd process of a scenario, started, SIGKILLed and started again many times.
// An exit the soak did not cause is a crash: counted, its log tail shown, and the process
// started again after a second, as the kubelet would.
type proc struct {
	t    *testing.T
	name string
	bin  string
	args []string
	log  string
	// beforeStart, if set, runs before every start with the start's number (from 1): the
	// operators get a new Lease identity each time, as a new pod would.
	beforeStart func(gen int) error
	// onCrash, if set, is told of every exit the soak did not cause.
	onCrash func(p *proc, err error)

	mu       sync.Mutex
	gen      int
	cmd      *exec.Cmd
	done     chan struct{}
	stopping bool
	closed   bool // the scenario is over: no restart after a crash
}

func newProc(t *testing.T, name, bin, logPath string, args ...string) *proc {
	p := &proc{t: t, name: name, bin: bin, args: args, log: logPath}
	t.Cleanup(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.stop()
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", p.name, p.tail(40))
		}
	})
	return p
}

// start starts the process; it does not wait for it to serve.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.name)
	}
	p.gen++
	if p.beforeStart != nil {
		if err := p.beforeStart(p.gen); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log: %w", p.name, err)
	}
	fmt.Fprintf(logf, "=== start %d at %s\n", p.gen, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = childEnv()
	// From k8senv's spawner thread, in its own process group, killed with the test binary.
	if err := k8senv.Spawn(cmd); err != nil {
		logf.Close()
		return fmt.Errorf("%s: start: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go p.wait(cmd, done, logf)
	return nil
}

func (p *proc) wait(cmd *exec.Cmd, done chan struct{}, logf *os.File) {
	err := cmd.Wait()
	fmt.Fprintf(logf, "=== exit at %s: %v\n", time.Now().Format(time.RFC3339Nano), err)
	logf.Close()
	p.mu.Lock()
	crashed := !p.stopping && p.cmd == cmd
	if crashed {
		p.cmd = nil
	}
	closed := p.closed
	p.mu.Unlock()
	close(done)
	if !crashed || closed {
		return
	}
	if p.onCrash != nil {
		p.onCrash(p, err)
	}
	time.Sleep(time.Second) // sleep: a crashed process restarts after a pause, as a supervisor's would
	p.mu.Lock()
	closed = p.closed || p.cmd != nil
	p.mu.Unlock()
	if !closed {
		if err := p.start(); err != nil {
			p.t.Errorf("restart after crash: %v", err)
		}
	}
}

// kill sends SIGKILL to the process group and waits for the process to be gone.
func (p *proc) kill() { p.signal(syscall.SIGKILL, 0) }

// stop asks the process to stop (SIGTERM) and kills it after 10 s.
func (p *proc) stop() { p.signal(syscall.SIGTERM, 10*time.Second) }

func (p *proc) signal(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		return
	}
	p.stopping = true
	p.mu.Unlock()
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	if grace > 0 {
		select {
		case <-done:
		case <-time.After(grace):
			p.t.Errorf("%s did not stop within %s of %s", p.name, grace, sig)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	<-done
	p.mu.Lock()
	p.cmd, p.stopping = nil, false
	p.mu.Unlock()
}

// tail is the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// childEnv is this process's environment without ALLOT_* variables: allotd reads those as
// settings (ALLOT_SOCKET would override the configuration file) or warns about them.
func childEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ALLOT_") {
			out = append(out, kv)
		}
	}
	return out
}

// waitFor waits until cond holds or ctx ends; its error carries the last reason.
func waitFor(ctx context.Context, cond func() (bool, string)) error {
	return testenv.Poll(ctx, cond)
}
