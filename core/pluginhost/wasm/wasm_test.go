package wasm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
)

const faultyDir = "testdata/faulty"

func TestConfigErrors(t *testing.T) {
	path := buildGuest(t, faultyDir, true)
	sum := fileSHA256(t, path)
	wrong := strings.Repeat("ab", 32)
	tests := []struct {
		name string
		cfg  Config
		is   error
		want []string
	}{
		{"no name", Config{Path: path, SHA256: sum}, ErrConfig, []string{"name: empty"}},
		{"no path", Config{Name: "x", SHA256: sum}, ErrConfig, []string{"path: empty"}},
		{"negative instances", Config{Name: "x", Path: path, SHA256: sum, Instances: -1}, ErrConfig, []string{"instances"}},
		{"huge memory", Config{Name: "x", Path: path, SHA256: sum, MemoryLimitMiB: 5000}, ErrConfig, []string{"memory_limit_mib"}},
		{"memory below module minimum", Config{Name: "x", Path: path, SHA256: sum, MemoryLimitMiB: 1}, ErrConfig, []string{"memory_limit_mib: 1 MiB is below"}},
		{"negative timeout", Config{Name: "x", Path: path, SHA256: sum, Timeout: -time.Second}, ErrConfig, []string{"timeout"}},
		{"missing file", Config{Name: "x", Path: filepath.Join(t.TempDir(), "nope.wasm"), SHA256: sum}, os.ErrNotExist, []string{"path:"}},
		{"no pin", Config{Name: "x", Path: path}, ErrConfig, []string{"sha256: empty", sum}},
		{"pin mismatch", Config{Name: "x", Path: path, SHA256: wrong}, ErrChecksum, []string{"expected " + wrong, "actual " + sum}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Open(context.Background(), tt.cfg, nil)
			if err == nil {
				p.Close(context.Background())
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			mustContain(t, err.Error(), tt.want...)
		})
	}
}

func TestPinAcceptsPrefixAndCase(t *testing.T) {
	path := buildGuest(t, faultyDir, true)
	openGuest(t, path, func(c *Config) { c.SHA256 = "sha256:" + strings.ToUpper(c.SHA256) })
}

func TestContractVersionRefused(t *testing.T) {
	path := buildGuest(t, "testdata/rawversion", true)
	_, err := Open(context.Background(), Config{Name: "old", Path: path, SHA256: fileSHA256(t, path)}, nil)
	if !errors.Is(err, ErrContractVersion) {
		t.Fatalf("got %v, want ErrContractVersion", err)
	}
	mustContain(t, err.Error(), `plugin "old"`, "2.0.0", policy.ContractVersion)
}

func TestCommandModuleRefused(t *testing.T) {
	path := buildGuest(t, "testdata/rawversion", false)
	_, err := Open(context.Background(), Config{Name: "cmd", Path: path, SHA256: fileSHA256(t, path)}, nil)
	if !errors.Is(err, ErrABI) {
		t.Fatalf("got %v, want ErrABI", err)
	}
	mustContain(t, err.Error(), "-buildmode=c-shared")
}

func TestDecisions(t *testing.T) {
	p := openGuest(t, buildGuest(t, faultyDir, true), nil)
	ctx := context.Background()

	d, err := p.PoolPolicy().SelectPodPools(ctx, podRequest("web-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	if d.Code != policy.Decided || d.Source != "pod web-1" || len(d.IPv4) != 1 || d.IPv4[0].Pool != "pool-v4-00" ||
		len(d.IPv6) != 1 || d.IPv6[0].Pool != "pool-v6-00" {
		t.Errorf("pod decision = %+v", d)
	}

	nd, err := p.SelectNodeCIDRConfig(ctx, &policy.NodeRequest{
		Node:    policy.Node{Name: "n1"},
		Configs: []policy.CIDRConfigView{{Name: "a"}, {Name: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if nd.Code != policy.Decided || strings.Join(nd.Configs, ",") != "a,b" {
		t.Errorf("node decision = %+v", nd)
	}

	st := p.Status()
	if st.Kind != Kind || st.Transport != Transport || st.Name != "test" || st.PluginVersion != "0.0.1-test" ||
		st.ContractVersion != policy.ContractVersion || st.Health != HealthOK || st.Calls != 2 || st.Failures != 0 {
		t.Errorf("status = %+v", st)
	}
}

// TestRejectedDetail: a guest's Cause and per-pool Rejected detail (contract 1.2) reach the
// host as the go-plugin transport carries them.
func TestRejectedDetail(t *testing.T) {
	p := openGuest(t, buildGuest(t, faultyDir, true), nil)
	d, err := p.SelectPodPools(context.Background(), podRequest("rejected", nil))
	if err != nil {
		t.Fatal(err)
	}
	want := policy.PodDecision{Code: policy.NoFit, Reason: "no pool fits", Cause: policy.CauseNoMatch,
		Rejected: []policy.Rejection{
			{Pool: "pool-v4-00", Family: policy.IPv4, Cause: policy.CauseInvalid, Reason: "annotation names no pool"},
			{Pool: "pool-v6-00", Cause: policy.CauseUnavailable, Reason: "disabled"},
		}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("decision = %+v\nwant       %+v", d, want)
	}
}

// TestFaultContainment: each fault gives a clear error on that request only; the host stays
// healthy, the instance is replaced, and the next call succeeds.
func TestFaultContainment(t *testing.T) {
	path := buildGuest(t, faultyDir, true)
	tests := []struct {
		pod      string
		timeout  time.Duration
		is       error
		want     []string
		traps    int64
		timeouts int64
	}{
		{"panic", 2 * time.Second, ErrTrap, []string{"guest trapped", "wasm error: unreachable", "panic: boom", "instance replaced"}, 1, 0},
		{"loop", 100 * time.Millisecond, ErrTimeout, []string{"deadline exceeded", "100ms", "instance replaced"}, 0, 1},
		{"grow", 10 * time.Second, ErrTrap, []string{"guest trapped", "out of memory", "instance replaced"}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.pod, func(t *testing.T) {
			for _, instances := range []int{1, 3} {
				p := openGuest(t, path, func(c *Config) {
					c.Timeout, c.MemoryLimitMiB, c.Instances = tt.timeout, 32, instances
				})
				ctx := context.Background()
				start := time.Now()
				_, err := p.SelectPodPools(ctx, podRequest(tt.pod, nil))
				if !errors.Is(err, tt.is) {
					t.Fatalf("instances=%d: got %v, want %v", instances, err, tt.is)
				}
				t.Logf("instances=%d: %v after %s", instances, err, time.Since(start).Round(time.Millisecond))
				mustContain(t, err.Error(), append([]string{`plugin "test"`, "select pod pools"}, tt.want...)...)

				for i := range 3 { // the next calls are served by a fresh or another instance
					d, err := p.SelectPodPools(ctx, podRequest(fmt.Sprintf("ok-%d", i), nil))
					if err != nil || d.Code != policy.Decided {
						t.Fatalf("call after %s: %+v, %v", tt.pod, d, err)
					}
				}
				waitFullPool(t, p)
				st := p.Status()
				if st.Health != HealthOK || st.Traps != tt.traps || st.Timeouts != tt.timeouts || st.Failures != 1 ||
					!strings.Contains(st.LastError, tt.want[0]) {
					t.Errorf("status = %+v", st)
				}
			}
		})
	}
}

func TestNodeTrap(t *testing.T) {
	p := openGuest(t, buildGuest(t, faultyDir, true), nil)
	_, err := p.SelectNodeCIDRConfig(context.Background(), &policy.NodeRequest{Node: policy.Node{Name: "panic"}})
	if !errors.Is(err, ErrTrap) {
		t.Fatalf("got %v, want ErrTrap", err)
	}
	mustContain(t, err.Error(), "select node cidr config", "panic: boom")
	if _, err := p.SelectNodeCIDRConfig(context.Background(), &policy.NodeRequest{Node: policy.Node{Name: "n"}}); err != nil {
		t.Fatal(err)
	}
}

func TestPolicyErrorKeepsInstance(t *testing.T) {
	p := openGuest(t, buildGuest(t, faultyDir, true), func(c *Config) { c.Instances = 1 })
	_, err := p.SelectPodPools(context.Background(), podRequest("error", nil))
	if !errors.Is(err, ErrPolicy) {
		t.Fatalf("got %v, want ErrPolicy", err)
	}
	mustContain(t, err.Error(), "policy failed on purpose")
	_, err = p.SelectPodPools(context.Background(), podRequest("badpool", nil))
	if !errors.Is(err, ErrABI) || !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("got %v, want ErrABI wrapping wire.ErrInvalid", err)
	}
	mustContain(t, err.Error(), "ipv4[0].pool")
	if st := p.Status(); st.Traps != 0 || st.Instances != 1 || st.Failures != 2 {
		t.Errorf("status = %+v", st)
	}
	if _, err := p.SelectPodPools(context.Background(), podRequest("ok", nil)); err != nil {
		t.Fatal(err)
	}
}

// TestSandbox: the guest sees a virtual clock, seeded randomness, and no filesystem or
// environment (wasip1 has no way to open a socket unless the host grants one; it never does).
func TestSandbox(t *testing.T) {
	path := buildGuest(t, faultyDir, true)
	var seen []string
	for range 2 {
		p := openGuest(t, path, func(c *Config) { c.Instances = 1 })
		d, err := p.SelectPodPools(context.Background(), podRequest("env", nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Log(d.Reason)
		mustContain(t, d.Reason, "time=2000-01-01T", "file=true", "dir=true", "env=0")
		seen = append(seen, d.Reason)

		// Sleeping advances virtual time only: an hour passes at once.
		start := time.Now()
		d, err = p.SelectPodPools(context.Background(), podRequest("sleep", nil))
		if err != nil {
			t.Fatal(err)
		}
		if d.Reason != "slept 1h0m0s" || time.Since(start) > time.Second {
			t.Errorf("sleep: %q after %s", d.Reason, time.Since(start))
		}
	}
	if seen[0] != seen[1] {
		t.Errorf("two fresh instances saw different worlds:\n%s\n%s", seen[0], seen[1])
	}
}

// TestConcurrent: 16 goroutines share a pool of 4 instances; some of them make instances
// trap along the way. Every good call gets its own answer.
func TestConcurrent(t *testing.T) {
	p := openGuest(t, buildGuest(t, faultyDir, true), func(c *Config) { c.Instances = 4 })
	const workers, calls = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*calls)
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				name := fmt.Sprintf("w%d-c%d", w, i)
				if w%8 == 7 && i%10 == 5 {
					if _, err := p.SelectPodPools(context.Background(), podRequest("panic", nil)); !errors.Is(err, ErrTrap) {
						errs <- fmt.Errorf("%s: panic call: %v", name, err)
					}
					continue
				}
				d, err := p.SelectPodPools(context.Background(), podRequest(name, nil))
				if err != nil {
					errs <- fmt.Errorf("%s: %v", name, err)
				} else if d.Source != "pod "+name {
					errs <- fmt.Errorf("%s: got answer for %q", name, d.Source)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFullPool(t, p)
	if st := p.Status(); st.Traps != 8 || st.Calls != workers*calls || st.Health != HealthOK {
		t.Errorf("status = %+v", st)
	}
}

func TestClose(t *testing.T) {
	p := openGuest(t, buildGuest(t, faultyDir, true), nil)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err := p.SelectPodPools(context.Background(), podRequest("x", nil))
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	if st := p.Status(); st.Health != HealthClosed || st.Instances != 0 {
		t.Errorf("status = %+v", st)
	}
}

func TestCallerContext(t *testing.T) {
	p := openGuest(t, buildGuest(t, faultyDir, true), func(c *Config) { c.Instances = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.SelectPodPools(ctx, podRequest("loop", nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	if _, err := p.SelectPodPools(context.Background(), podRequest("ok", nil)); err != nil {
		t.Fatal(err)
	}
}
