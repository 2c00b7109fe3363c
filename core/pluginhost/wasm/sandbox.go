package wasm

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"
)

// The sandbox a guest instance runs in. wasip1 is imported (the Go toolchain's wasip1 port
// needs it), but every capability it could reach is replaced by something inert:
//
//   - no preopened directories, so path_open has nothing to open (no filesystem);
//   - no sockets (wazero only offers them through an experimental option we never set);
//   - no args and no environment;
//   - a virtual clock: wall time starts at fakeEpoch and both clocks advance only by a
//     fixed step per reading and by whatever the guest sleeps, so a policy cannot observe
//     real time and answers the same input the same way on every run;
//   - random bytes from a ChaCha8 stream seeded with the module's sha256: deterministic
//     per plugin, different between plugins;
//   - stdout and stderr captured (bounded) so a panic message can be put in the error.

// fakeEpoch is the wall clock a fresh instance sees: far enough from today that nobody
// mistakes it for real time.
var fakeEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// clockStep is how far the virtual clocks move per reading. It must be non-zero: the Go
// runtime in the guest spins on nanotime in places and would never see time pass.
const clockStep = int64(time.Microsecond)

// virtualClock is one instance's clock. Instances are used by one goroutine at a time, but
// wazero may read the clock from the goroutine that enforces the deadline, so it is atomic.
type virtualClock struct{ elapsed atomic.Int64 }

func (c *virtualClock) walltime() (sec int64, nsec int32) {
	t := fakeEpoch + c.elapsed.Add(clockStep)
	return t / int64(time.Second), int32(t % int64(time.Second))
}

func (c *virtualClock) nanotime() int64 { return c.elapsed.Add(clockStep) }

// sleep advances virtual time instead of blocking: a guest that sleeps wakes up at once
// having "slept", and a guest that sleeps forever is stopped by the call deadline.
func (c *virtualClock) sleep(ns int64) {
	if ns > 0 {
		c.elapsed.Add(ns)
	}
}

// moduleConfig is the wazero module config for one new instance.
func moduleConfig(seed [32]byte, out *captureBuffer) wazero.ModuleConfig {
	clk := &virtualClock{}
	res := sys.ClockResolution(clockStep)
	return wazero.NewModuleConfig().
		WithName("").         // anonymous: many instances of one compiled module in one runtime
		WithStartFunctions(). // newInstance runs _initialize itself, under the watchdog
		WithStdout(out).
		WithStderr(out).
		WithRandSource(rand.NewChaCha8(seed)).
		WithWalltime(clk.walltime, res).
		WithNanotime(clk.nanotime, res).
		WithNanosleep(clk.sleep).
		WithOsyield(func() {})
	// Deliberately absent: WithFS/WithFSConfig, WithArgs, WithEnv, WithSys*.
}

// captureBuffer keeps the first captureLimit bytes a guest writes to stdout/stderr since the
// last reset: enough for a Go panic message and the top of its stack.
type captureBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const captureLimit = 8 << 10

func (c *captureBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := captureLimit - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil // never fail the guest's write
}

func (c *captureBuffer) reset() {
	c.mu.Lock()
	c.buf.Reset()
	c.mu.Unlock()
}

func (c *captureBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// summary is the most telling line of captured output: a Go "panic:" or "fatal error:"
// line if there is one, else the first non-empty line; at most 300 bytes.
func (c *captureBuffer) summary() string {
	var first string
	for line := range strings.Lines(c.String()) {
		l := strings.TrimSpace(line)
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
			first = l
			break
		}
		if first == "" {
			first = l
		}
	}
	if len(first) > 300 {
		first = first[:300] + "…"
	}
	return first
}
