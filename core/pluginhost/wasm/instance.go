package wasm

import (
	"context"
	"fmt"

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
}

// newInstance instantiates the compiled module (running _initialize once) and looks up the
// exports. Exports were already checked against the ABI when the module was compiled.
func (p *Plugin) newInstance(ctx context.Context) (*instance, error) {
	out := &captureBuffer{}
	ctx, cancel := context.WithTimeout(ctx, p.initTimeout)
	defer cancel()
	mod, err := p.rt.InstantiateModule(ctx, p.compiled, moduleConfig(p.seed, out))
	if err != nil {
		if s := out.summary(); s != "" {
			return nil, fmt.Errorf("instantiate: %w: %v (guest output: %s)", ErrTrap, err, s)
		}
		return nil, fmt.Errorf("instantiate: %w: %v", ErrTrap, err)
	}
	in := &instance{
		mod:        mod,
		mem:        mod.Memory(),
		alloc:      mod.ExportedFunction(exportAlloc),
		selectPod:  mod.ExportedFunction(exportSelectPodPools),
		selectNode: mod.ExportedFunction(exportSelectNodeCIDR),
		out:        out,
	}
	if in.mem == nil || in.alloc == nil || in.selectPod == nil || in.selectNode == nil {
		in.close(ctx)
		return nil, fmt.Errorf("instantiate: %w: exports missing after instantiation", ErrABI)
	}
	return in, nil
}

// call writes req into the guest's request buffer, calls fn(ptr, len) and returns the
// response frame. The frame is a view into guest memory: valid only until the instance is
// used again, so the caller decodes it before giving the instance back.
func (in *instance) call(ctx context.Context, fn api.Function, req []byte) ([]byte, error) {
	in.out.reset()
	if len(req) > int(in.bufLen) {
		size := requestBufSize(len(req))
		in.stack[0] = uint64(size)
		if err := in.alloc.CallWithStack(ctx, in.stack[:]); err != nil {
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
	if err := fn.CallWithStack(ctx, in.stack[:]); err != nil {
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
func (in *instance) callString(ctx context.Context, name string) (string, error) {
	fn := in.mod.ExportedFunction(name)
	if fn == nil {
		return "", fmt.Errorf("%w: export %s missing", ErrABI, name)
	}
	if err := fn.CallWithStack(ctx, in.stack[:]); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	b, err := in.read(in.stack[0], name)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func (in *instance) close(ctx context.Context) {
	_ = in.mod.Close(ctx) // closing a trapped module may report the trap again: nothing to do
}
