package wasm

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// spinModule is a hand-written module: it imports wasi's sched_yield (import name given)
// and exports "spin", an infinite loop, and has no global section (the instrumentation
// must add one in the right place). body replaces spin's code when not nil.
func spinModule(importName string, body []byte) []byte {
	if body == nil {
		body = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b} // loop; br 0; end
	}
	section := func(id byte, b []byte) []byte { return append(appendUleb([]byte{id}, uint64(len(b))), b...) }
	str := func(s string) []byte { return append(appendUleb(nil, uint64(len(s))), s...) }
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, section(1, []byte{0x02, 0x60, 0x00, 0x01, 0x7f, 0x60, 0x00, 0x00})...) // ()->i32, ()->()
	imp := append(append(append([]byte{0x01}, str(wasiModule)...), str(importName)...), 0x00, 0x00)
	m = append(m, section(2, imp)...)
	m = append(m, section(3, []byte{0x01, 0x01})...)
	m = append(m, section(7, append(append([]byte{0x01}, str("spin")...), 0x00, 0x01))...)
	fn := append(append([]byte{0x00}, body...), 0x0b) // no locals, body, end
	m = append(m, section(10, append(appendUleb([]byte{0x01}, uint64(len(fn))), fn...))...)
	return m
}

// TestInstrumentedLoopStops: an infinite loop in machine code is stopped by setting the
// interrupt global from another goroutine, while garbage collections (stop-the-world) run
// all along: the periodic exits to Go keep the host from deadlocking.
func TestInstrumentedLoopStops(t *testing.T) {
	code, err := instrument(spinModule("sched_yield", nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig())
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	mod, err := rt.InstantiateWithConfig(ctx, code, wazero.NewModuleConfig())
	if err != nil {
		t.Fatal(err)
	}
	stop, ok := mod.ExportedGlobal(interruptGlobal).(api.MutableGlobal)
	if !ok {
		t.Fatalf("%s is not an exported mutable global", interruptGlobal)
	}
	var gcs atomic.Int64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
				runtime.GC()
				gcs.Add(1)
			}
		}
	}()
	defer close(done)
	errc := make(chan error, 1)
	go func() { _, err := mod.ExportedFunction("spin").Call(ctx); errc <- err }()
	// Stop the loop once collections have completed while it ran (or after a long wait, on
	// a machine too loaded to run one: the check below then fails).
	var gcsWhileLooping atomic.Int64
	go func() {
		time.Sleep(50 * time.Millisecond) // sleep: lets the guest enter its loop (nothing to wait on)
		start := gcs.Load()
		for deadline := time.Now().Add(10 * time.Second); gcs.Load()-start < 2 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond) // sleep: polls the collection count
		}
		gcsWhileLooping.Store(gcs.Load() - start)
		stop.Set(1)
	}()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("spin returned %v, want an unreachable trap", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the loop was not stopped")
	}
	if gcsWhileLooping.Load() == 0 {
		t.Error("no garbage collection completed while the guest was looping")
	}
}

func TestInstrumentRefuses(t *testing.T) {
	tests := []struct {
		name string
		code []byte
		want string
	}{
		{"not wasm", []byte("hello world"), "not a version 1 wasm binary"},
		{"no sched_yield", spinModule("fd_write", nil), "does not import"},
		{"unknown opcode", spinModule("sched_yield", []byte{0xfb, 0x00}), "opcode 0xfb"},
		{"truncated immediate", spinModule("sched_yield", []byte{0x44}), "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := instrument(tt.code)
			if !errors.Is(err, errUnsupported) {
				t.Fatalf("got %v, want errUnsupported", err)
			}
			mustContain(t, err.Error(), tt.want)
		})
	}
}

// TestInstrumentGoGuests: the real guests instrument, compile, and keep every export.
func TestInstrumentGoGuests(t *testing.T) {
	for _, dir := range []string{labelPolicyDir, faultyDir} {
		orig, err := os.ReadFile(buildGuest(t, dir, true))
		if err != nil {
			t.Fatal(err)
		}
		code, err := instrument(orig)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		ctx := context.Background()
		rt := wazero.NewRuntime(ctx)
		cm, err := rt.CompileModule(ctx, code)
		if err != nil {
			t.Fatalf("%s: instrumented module does not compile: %v", dir, err)
		}
		if err := checkModule(cm); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
		if _, ok := cm.ExportedFunctions()[exportSelectPodPools]; !ok {
			t.Errorf("%s: export lost", dir)
		}
		rt.Close(ctx)
	}
}

// TestFallbackWithoutInstrumentation: a module the rewriter refuses still runs, with
// wazero enforcing the deadline, and faults are still contained.
func TestFallbackWithoutInstrumentation(t *testing.T) {
	old := instrumentModule
	instrumentModule = func([]byte) ([]byte, error) { return nil, errUnsupported }
	t.Cleanup(func() { instrumentModule = old })
	p := openGuest(t, buildGuest(t, faultyDir, true), func(c *Config) { c.Timeout, c.Instances = 100*time.Millisecond, 1 })
	if p.instrumented {
		t.Fatal("plugin reports an instrumented module")
	}
	_, err := p.SelectPodPools(context.Background(), podRequest("loop", nil))
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("loop: got %v, want ErrTimeout", err)
	}
	d, err := p.SelectPodPools(context.Background(), podRequest("ok", nil))
	if err != nil || d.Code != policy.Decided {
		t.Fatalf("after the loop: %+v, %v", d, err)
	}
}

// TestCallerCanceled: cancelling the caller's context stops a looping guest.
func TestCallerCanceled(t *testing.T) {
	p := openGuest(t, buildGuest(t, faultyDir, true), func(c *Config) { c.Instances = 1 })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := p.SelectPodPools(ctx, podRequest("loop", nil))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if _, err := p.SelectPodPools(context.Background(), podRequest("ok", nil)); err != nil {
		t.Fatal(err)
	}
}

// FuzzInstrument: no input makes the rewriter panic (it parses the module before wazero
// validates it).
func FuzzInstrument(f *testing.F) {
	f.Add(spinModule("sched_yield", nil))
	f.Add(spinModule("sched_yield", []byte{0x02, 0x40, 0x03, 0x7f, 0x41, 0x01, 0x0b, 0x1a, 0x0b}))
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = instrument(b)
	})
}
