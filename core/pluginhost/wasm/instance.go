package wasm

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/allot-ipam/allot/sdk/wire"
	"github.com/tetratelabs/wazero/api"
)

// instance is one instantiated guest. It is used by one goroutine at a time (the pool hands
// it out exclusively) and is never reused after any call on it failed.
type instance struct {
	mod        api.Module
	mem        api.Memory
	alloc      api.Function
	selectPod  api.Function
	selectNode api.Function
	out        *captureBuffer

	// bufPtr/bufLen are the request buffer the guest handed out through allot_alloc. The
	// ABI guarantees it stays valid until the next allot_alloc call, so the host reuses it
	// for every request that fits instead of asking the guest to allocate per call.
	bufPtr, bufLen uint32

	// stack is reused for every CallWithStack so a call allocates nothing on the host side.
	stack [2]uint64

	// req is the buffer requests are encoded in. pools mirrors the guest's per-position
	// pool cache for pool references (poolrefs.go), views the pools behind it
	// (poolviews.go); fullReq is the buffer a request is encoded in before references
	// replace its pools.
	req     []byte
	pools   []pooledRecord
	views   []wire.PoolSnapshot
	fullReq []byte
	refRun  []uint64
	// parts mirrors the parts of a pod request the instance has (partrefs.go); partReq is
	// the buffer a request is encoded in before they are left out, podKeep and podRest
	// scratch for splitting the pod.
	parts            [numParts]partMirror
	partReq          []byte
	podKeep, podRest []byte

	// The watchdog of an instrumented module (interrupt.go); stop is nil when the module
	// could not be instrumented and wazero enforces deadlines itself.
	stop  api.MutableGlobal
	state atomic.Int32 // callIdle, callRunning, or why the call was interrupted
	timer *time.Timer  // per-call deadline, re-armed for every call
	// onCtxDone is in.interrupt(callCanceled) as a func value, made once so that arming
	// context.AfterFunc per call does not allocate a closure.
	onCtxDone func()
}

// Call states of an instrumented instance.
const (
	callIdle int32 = iota
	callRunning
	callTimedOut // the per-call deadline passed
	callCanceled // the caller's context ended
)

// errInterrupted is returned by run when the watchdog stopped the call (or fired just as
// the call ended: the instance is then suspect all the same). classify turns it into
// ErrTimeout or the context's error.
type errInterrupted struct {
	reason  int32
	ctxErr  error
	timeout time.Duration
}

func (e *errInterrupted) Error() string {
	if e.reason == callTimedOut {
		return fmt.Sprintf("interrupted after the %s deadline", e.timeout)
	}
	return fmt.Sprintf("interrupted: %v", e.ctxErr)
}

// interrupt stops the running call, if one is running: the guest traps at its next loop
// iteration. A watchdog that fires late (the call already ended) does nothing.
func (in *instance) interrupt(reason int32) {
	if in.state.CompareAndSwap(callRunning, reason) {
		in.stop.Set(1)
	}
}

// run calls fn under a deadline of timeout and the caller's ctx. For an instrumented module
// a timer (armed once per instance, re-armed per call) and, only when ctx can end at all,
// a context.AfterFunc are the watchdogs: nothing is allocated and no goroutine is started
// per call. Otherwise wazero watches a derived context (WithCloseOnContextDone).
func (in *instance) run(ctx context.Context, timeout time.Duration, fn api.Function, stack []uint64) error {
	if in.stop == nil {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return fn.CallWithStack(ctx, stack)
	}
	if err := ctx.Err(); err != nil {
		return &errInterrupted{reason: callCanceled, ctxErr: err, timeout: timeout}
	}
	in.state.Store(callRunning)
	in.timer.Reset(timeout)
	var stopCtx func() bool
	if ctx.Done() != nil {
		stopCtx = context.AfterFunc(ctx, in.onCtxDone)
	}
	err := fn.CallWithStack(ctx, stack)
	timerFired := !in.timer.Stop()
	ctxFired := stopCtx != nil && !stopCtx()
	state := in.state.Swap(callIdle)
	if state == callRunning && !timerFired && !ctxFired {
		return err
	}
	// Interrupted, or a watchdog fired as the call ended and may still set the global:
	// either way this instance must not serve another call.
	if state == callRunning {
		state = callTimedOut
		if ctxFired {
			state = callCanceled
		}
	}
	return &errInterrupted{reason: state, ctxErr: ctx.Err(), timeout: timeout}
}

// newInstance instantiates the compiled module, runs _initialize once (under the init
// deadline and the watchdog, so a guest looping in init is stopped too) and looks up the
// exports. Exports were already checked against the ABI when the module was compiled.
func (p *Plugin) newInstance(ctx context.Context) (*instance, error) {
	out := &captureBuffer{}
	mod, err := p.rt.InstantiateModule(ctx, p.compiled, moduleConfig(p.seed, out))
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w: %v%s", ErrTrap, err, outputSuffix(out))
	}
	in := &instance{
		mod:        mod,
		mem:        mod.Memory(),
		alloc:      mod.ExportedFunction(exportAlloc),
		selectPod:  mod.ExportedFunction(exportSelectPodPools),
		selectNode: mod.ExportedFunction(exportSelectNodeCIDR),
		out:        out,
	}
	if p.instrumented {
		g, ok := mod.ExportedGlobal(interruptGlobal).(api.MutableGlobal)
		if !ok {
			in.close(ctx)
			return nil, fmt.Errorf("instantiate: %w: global %s missing after instrumentation", ErrABI, interruptGlobal)
		}
		in.stop = g
		in.onCtxDone = func() { in.interrupt(callCanceled) }
		in.timer = time.AfterFunc(time.Hour, func() { in.interrupt(callTimedOut) })
		in.timer.Stop()
	}
	if in.mem == nil || in.alloc == nil || in.selectPod == nil || in.selectNode == nil {
		in.close(ctx)
		return nil, fmt.Errorf("instantiate: %w: exports missing after instantiation", ErrABI)
	}
	if init := mod.ExportedFunction(exportInitialize); init != nil {
		if err := in.run(ctx, p.initTimeout, init, in.stack[:0]); err != nil {
			in.close(ctx)
			var intr *errInterrupted
			if errors.As(err, &intr) {
				return nil, fmt.Errorf("instantiate: %s: %w%s", exportInitialize, err, outputSuffix(out))
			}
			return nil, fmt.Errorf("instantiate: %s: %w: %v%s", exportInitialize, ErrTrap, err, outputSuffix(out))
		}
	}
	return in, nil
}

func outputSuffix(out *captureBuffer) string {
	if s := out.summary(); s != "" {
		return " (guest output: " + s + ")"
	}
	return ""
}

// call writes req into the guest's request buffer, calls fn(ptr, len) and returns the
// response frame. The frame is a view into guest memory: valid only until the instance is
// used again, so the caller decodes it before giving the instance back.
func (in *instance) call(ctx context.Context, timeout time.Duration, fn api.Function, req []byte) ([]byte, error) {
	in.out.reset()
	if len(req) > int(in.bufLen) {
		size := requestBufSize(len(req))
		in.stack[0] = uint64(size)
		if err := in.run(ctx, timeout, in.alloc, in.stack[:]); err != nil {
			return nil, fmt.Errorf("%s: %w", exportAlloc, err)
		}
		ptr := uint32(in.stack[0])
		if ptr == 0 {
			return nil, fmt.Errorf("%w: %s(%d) returned a null pointer", ErrABI, exportAlloc, size)
		}
		in.bufPtr, in.bufLen = ptr, size
	}
	if !in.mem.Write(in.bufPtr, req) {
		return nil, fmt.Errorf("%w: %s buffer [%d, +%d) is outside guest memory (%d bytes)",
			ErrABI, exportAlloc, in.bufPtr, len(req), in.mem.Size())
	}
	in.stack[0], in.stack[1] = uint64(in.bufPtr), uint64(len(req))
	if err := in.run(ctx, timeout, fn, in.stack[:]); err != nil {
		return nil, err
	}
	return in.read(in.stack[0], fn.Definition().Name())
}

// read returns the guest memory a packed (ptr<<32 | len) result points at.
func (in *instance) read(packed uint64, what string) ([]byte, error) {
	ptr, n := unpack(packed)
	if n > maxResponseLen {
		return nil, fmt.Errorf("%w: %s returned %d bytes, more than the %d the host accepts",
			ErrABI, what, n, maxResponseLen)
	}
	b, ok := in.mem.Read(ptr, n)
	if !ok {
		return nil, fmt.Errorf("%w: %s returned [%d, +%d), outside guest memory (%d bytes)",
			ErrABI, what, ptr, n, in.mem.Size())
	}
	return b, nil
}

// callString calls a () -> packed export and copies out the bytes it points at.
func (in *instance) callString(ctx context.Context, timeout time.Duration, name string) (string, error) {
	fn := in.mod.ExportedFunction(name)
	if fn == nil {
		return "", fmt.Errorf("%w: export %s missing", ErrABI, name)
	}
	if err := in.run(ctx, timeout, fn, in.stack[:]); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	b, err := in.read(in.stack[0], name)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func (in *instance) close(ctx context.Context) {
	if in.timer != nil {
		in.timer.Stop()
	}
	_ = in.mod.Close(ctx) // closing a trapped module may report the trap again: nothing to do
}
