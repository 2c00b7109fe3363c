// Package wasm hosts pool policy plugins compiled to WebAssembly (GOOS=wasip1, reactor
// mode) on wazero, and presents each as a policy.PoolPolicy.
//
// A plugin's module is compiled once per Open. Calls are served by a bounded pool of
// instances; each call writes the protobuf-encoded request into the instance's memory, calls
// the guest export and decodes the protobuf decision it returns (the ABI is specified in
// sdk/ABI.md). The guest is sandboxed: a memory cap, a per-call deadline after which the
// instance is closed, no filesystem, no network, a virtual clock and seeded randomness. An
// instance that traps or times out is discarded and replaced in the background, never
// reused; the error is reported on that call only and the plugin keeps serving.
package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/version"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// Kind and Transport are what Status reports for every plugin of this package.
const (
	Kind      = "pool-policy"
	Transport = "wasm"
)

// Defaults for zero Config fields.
const (
	DefaultMemoryLimitMiB = 64
	DefaultTimeout        = 200 * time.Millisecond
)

// Limits on Config fields.
const (
	maxInstances      = 1024
	maxMemoryLimitMiB = 4096 // wasm32 addresses 4 GiB
	maxModuleBytes    = 256 << 20
)

// Config says which module to load and how to sandbox it.
type Config struct {
	// Name identifies the plugin in errors, logs and Status.
	Name string
	// Path is the .wasm file, built with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared.
	Path string
	// SHA256 is the hex sha256 of the file (an optional "sha256:" prefix is accepted). The
	// module is refused unless it matches. Required: a policy decides where addresses go.
	SHA256 string
	// Instances bounds how many calls run at once (one instance each). 0 means GOMAXPROCS.
	Instances int
	// MemoryLimitMiB caps each instance's linear memory. 0 means DefaultMemoryLimitMiB.
	MemoryLimitMiB int
	// Timeout is the per-call deadline. 0 means DefaultTimeout.
	Timeout time.Duration
}

// withDefaults validates c and fills in defaults. Errors name the field.
func (c Config) withDefaults() (Config, error) {
	bad := func(field, format string, args ...any) (Config, error) {
		return c, fmt.Errorf("wasm: plugin %q: %w: %s: %s", c.Name, ErrConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case strings.TrimSpace(c.Name) == "":
		return bad("name", "empty")
	case c.Path == "":
		return bad("path", "empty")
	case c.Instances < 0 || c.Instances > maxInstances:
		return bad("instances", "%d is outside [0, %d]", c.Instances, maxInstances)
	case c.MemoryLimitMiB < 0 || c.MemoryLimitMiB > maxMemoryLimitMiB:
		return bad("memory_limit_mib", "%d is outside [0, %d]", c.MemoryLimitMiB, maxMemoryLimitMiB)
	case c.Timeout < 0:
		return bad("timeout", "%s is negative", c.Timeout)
	}
	if c.Instances == 0 {
		c.Instances = runtime.GOMAXPROCS(0)
	}
	if c.MemoryLimitMiB == 0 {
		c.MemoryLimitMiB = DefaultMemoryLimitMiB
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c, nil
}

// Plugin is one loaded WASM pool policy. It is safe for concurrent use.
type Plugin struct {
	cfg         Config
	log         *slog.Logger
	rt          wazero.Runtime
	compiled    wazero.CompiledModule
	seed        [32]byte
	initTimeout time.Duration
	info        pluginInfo
	contract    string
	// instrumented: the module carries the interrupt global and loop checks (interrupt.go)
	// and the runtime runs without WithCloseOnContextDone.
	instrumented bool
	// poolRefs: the guest takes pool references (allot_features, poolrefs.go), sameRuns:
	// runs of unchanged pools too; partRefs: part references (partrefs.go).
	poolRefs, sameRuns, partRefs bool

	// slots holds one entry per instance the plugin may have: an idle instance, or nil for
	// an empty slot that the next caller fills. Taking an entry is the right to run one
	// call, so len(slots) bounds concurrency and the instance count at once.
	slots   chan *instance
	closing chan struct{}
	closed  sync.Once
	bg      sync.WaitGroup // background replacements

	live, calls, failures, traps, timeouts atomic.Int64

	mu          sync.Mutex
	lastErr     string
	lastErrAt   time.Time
	replaceErr  error // last failure to replace an instance; cleared on success
	closedState bool
}

var _ policy.PoolPolicy = (*Plugin)(nil)

// instrumentModule is instrument, replaceable by tests to exercise the fallback.
var instrumentModule = instrument

// compilationCache is shared by every Plugin of the process, so re-opening a plugin (a
// config reload, a test) reuses the machine code instead of compiling again.
var compilationCache = wazero.NewCompilationCache()

// Open loads, verifies and instantiates the plugin described by cfg. It fails, with an error
// naming the problem, if the file's sha256 is not the pinned one, the module does not
// implement the ABI, or it speaks a contract version this host cannot.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*Plugin, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	wrap := func(err error) error { return fmt.Errorf("wasm: plugin %q: %w", cfg.Name, err) }

	code, sum, err := readPinned(cfg.Path, cfg.SHA256)
	if err != nil {
		return nil, wrap(err)
	}
	code, instrumented := instrumentOrFallBack(code, cfg.Name, logger)
	rtCfg := wazero.NewRuntimeConfig(). // the compiler where wazero supports it, else the interpreter
						WithCompilationCache(compilationCache).
						WithCloseOnContextDone(!instrumented).
						WithMemoryLimitPages(uint32(cfg.MemoryLimitMiB) * 16) // 64 KiB pages
	rt := wazero.NewRuntimeWithConfig(ctx, rtCfg)
	p := &Plugin{
		cfg:          cfg,
		instrumented: instrumented,
		log:          logger.With("plugin", cfg.Name, "transport", Transport),
		rt:           rt,
		seed:         sum,
		initTimeout:  max(10*cfg.Timeout, 5*time.Second),
		slots:        make(chan *instance, cfg.Instances),
		closing:      make(chan struct{}),
	}
	if err := p.compile(ctx, code); err != nil {
		_ = rt.Close(ctx)
		return nil, wrap(err)
	}
	if err := p.startInstances(ctx); err != nil {
		_ = rt.Close(ctx)
		return nil, wrap(err)
	}
	p.log.Info("wasm plugin loaded", "path", cfg.Path, "sha256", hex.EncodeToString(sum[:]),
		"plugin_version", p.info.version, "contract_version", p.contract,
		"instances", cfg.Instances, "memory_limit_mib", cfg.MemoryLimitMiB, "timeout", cfg.Timeout)
	return p, nil
}

// instrumentOrFallBack returns the module instrumented for deadlines (interrupt.go), or,
// for a module the instrumentation cannot handle, the module as it is and false: wazero's
// own, much slower, mechanism then enforces them.
func instrumentOrFallBack(code []byte, name string, logger *slog.Logger) ([]byte, bool) {
	ic, err := instrumentModule(code)
	if err != nil {
		logger.Warn("wasm module not instrumented; deadlines enforced by wazero instead (slower calls)",
			"plugin", name, "reason", err)
		return code, false
	}
	return ic, true
}

// compile sets up WASI and compiles and checks the module against the memory limit and
// the ABI's exports.
func (p *Plugin) compile(ctx context.Context, code []byte) error {
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, p.rt); err != nil {
		return fmt.Errorf("instantiate wasi: %w", err)
	}
	if pages, ok := declaredMinPages(code); ok && pages > uint32(p.cfg.MemoryLimitMiB)*16 {
		return fmt.Errorf("%w: memory_limit_mib: %d MiB is below the module's initial memory of %d MiB",
			ErrConfig, p.cfg.MemoryLimitMiB, (pages+15)/16)
	}
	var err error
	if p.compiled, err = p.rt.CompileModule(ctx, code); err != nil {
		return fmt.Errorf("compile %s: %w", p.cfg.Path, err)
	}
	return checkModule(p.compiled)
}

// startInstances instantiates the first instance and shakes hands with it, then fills the
// other slots now, so the first concurrent requests do not pay for instantiation (a Go
// guest's runtime start takes milliseconds).
func (p *Plugin) startInstances(ctx context.Context) error {
	first, err := p.newInstance(ctx)
	if err != nil {
		return err
	}
	p.live.Add(1)
	if err := p.handshake(ctx, first); err != nil {
		return err
	}
	p.slots <- first
	for i := 1; i < p.cfg.Instances; i++ {
		in, err := p.newInstance(ctx)
		if err != nil {
			return err
		}
		p.live.Add(1)
		p.slots <- in
	}
	return nil
}

// readPinned reads the module and checks it against the pinned sha256.
func readPinned(path, want string) ([]byte, [32]byte, error) {
	var sum [32]byte
	f, err := os.Open(path)
	if err != nil {
		return nil, sum, fmt.Errorf("path: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, sum, fmt.Errorf("path: %w", err)
	}
	if st.Size() > maxModuleBytes {
		return nil, sum, fmt.Errorf("path: %s is %d bytes, more than the %d allowed", path, st.Size(), maxModuleBytes)
	}
	code := make([]byte, st.Size())
	if _, err := f.ReadAt(code, 0); err != nil {
		return nil, sum, fmt.Errorf("path: read %s: %w", path, err)
	}
	sum = sha256.Sum256(code)
	actual := hex.EncodeToString(sum[:])
	want = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(want), "sha256:"))
	if want == "" {
		return nil, sum, fmt.Errorf("%w: sha256: empty; pin the module with sha256 %s", ErrConfig, actual)
	}
	if want != actual {
		return nil, sum, fmt.Errorf("%w: %s: expected %s, actual %s", ErrChecksum, path, want, actual)
	}
	return code, sum, nil
}

// checkModule verifies, before anything runs, that the module has the ABI's exports with
// the right signatures and imports nothing but wasip1.
func checkModule(cm wazero.CompiledModule) error {
	exports := cm.ExportedFunctions()
	if _, ok := exports[exportInitialize]; !ok {
		if _, ok := exports[exportStart]; ok {
			return fmt.Errorf("%w: module is a wasip1 command (exports %s, not %s); build it with -buildmode=c-shared",
				ErrABI, exportStart, exportInitialize)
		}
		return fmt.Errorf("%w: export %s missing; build with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared", ErrABI, exportInitialize)
	}
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	want := []struct {
		name     string
		params   []api.ValueType
		results  []api.ValueType
		optional bool
	}{
		{exportContractVersion, nil, []api.ValueType{i64}, false},
		{exportPluginInfo, nil, []api.ValueType{i64}, true},
		{exportFeatures, nil, []api.ValueType{i64}, true},
		{exportAlloc, []api.ValueType{i32}, []api.ValueType{i32}, false},
		{exportSelectPodPools, []api.ValueType{i32, i32}, []api.ValueType{i64}, false},
		{exportSelectNodeCIDR, []api.ValueType{i32, i32}, []api.ValueType{i64}, false},
	}
	for _, w := range want {
		def, ok := exports[w.name]
		if !ok {
			if w.optional {
				continue
			}
			return fmt.Errorf("%w: export %s missing; is the guest built with sdk/wasm/guest?", ErrABI, w.name)
		}
		if !sameTypes(def.ParamTypes(), w.params) || !sameTypes(def.ResultTypes(), w.results) {
			return fmt.Errorf("%w: export %s has signature %s, want %s", ErrABI, w.name,
				signature(def.ParamTypes(), def.ResultTypes()), signature(w.params, w.results))
		}
	}
	for _, imp := range cm.ImportedFunctions() {
		if mod, name, _ := imp.Import(); mod != wasiModule {
			return fmt.Errorf("%w: module imports %s.%s; only %s is provided", ErrABI, mod, name, wasiModule)
		}
	}
	if _, ok := cm.ExportedMemories()["memory"]; !ok {
		return fmt.Errorf("%w: export memory missing", ErrABI)
	}
	return nil
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func signature(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return strings.Join(s, ", ")
	}
	return "(" + names(params) + ") -> (" + names(results) + ")"
}

// handshake reads the guest's contract version (refusing an incompatible one) and its
// optional plugin info.
func (p *Plugin) handshake(ctx context.Context, in *instance) error {
	v, err := in.callString(ctx, p.initTimeout, exportContractVersion)
	if err != nil {
		return fmt.Errorf("read contract version: %w", p.classify(err, in))
	}
	if err := version.Compatible(policy.ContractVersion, v); err != nil {
		return err // names both versions and wraps ErrContractVersion
	}
	p.contract = v
	if in.mod.ExportedFunction(exportFeatures) != nil {
		if err := in.run(ctx, p.initTimeout, in.mod.ExportedFunction(exportFeatures), in.stack[:]); err != nil {
			return fmt.Errorf("read features: %w", p.classify(fmt.Errorf("%s: %w", exportFeatures, err), in))
		}
		p.poolRefs = in.stack[0]&featurePoolRefs != 0
		p.partRefs = in.stack[0]&featurePartRefs != 0
		p.sameRuns = p.poolRefs && in.stack[0]&featureSameRuns != 0
	}
	if in.mod.ExportedFunction(exportPluginInfo) != nil {
		b, err := in.callString(ctx, p.initTimeout, exportPluginInfo)
		if err != nil {
			return fmt.Errorf("read plugin info: %w", p.classify(err, in))
		}
		if p.info, err = decodePluginInfo([]byte(b)); err != nil {
			return err
		}
	}
	return nil
}

// PoolPolicy returns the plugin as the contract's interface; the core never needs to know
// the transport.
func (p *Plugin) PoolPolicy() policy.PoolPolicy { return p }

// SelectPodPools implements policy.PoolPolicy.
func (p *Plugin) SelectPodPools(ctx context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	const op = "select pod pools"
	if req == nil {
		return policy.PodDecision{}, fmt.Errorf("wasm: plugin %q: %s: request is nil", p.cfg.Name, op)
	}
	var dec policy.PodDecision
	err := p.invoke(ctx, op, selectPod, func(in *instance, dst []byte) ([]byte, error) {
		if !p.partRefs {
			return in.encodePod(dst, req, p.poolRefs, p.sameRuns)
		}
		full, err := in.encodePod(in.partReq[:0], req, p.poolRefs, p.sameRuns)
		if err != nil {
			return dst, err
		}
		in.partReq = full[:0]
		return in.withPartRefs(dst, full), nil
	}, func(body []byte) (err error) {
		dec, err = decodePodDecision(body)
		return err
	})
	return dec, err
}

// SelectNodeCIDRConfig implements policy.PoolPolicy.
func (p *Plugin) SelectNodeCIDRConfig(ctx context.Context, req *policy.NodeRequest) (policy.NodeDecision, error) {
	const op = "select node cidr config"
	if req == nil {
		return policy.NodeDecision{}, fmt.Errorf("wasm: plugin %q: %s: request is nil", p.cfg.Name, op)
	}
	var dec policy.NodeDecision
	err := p.invoke(ctx, op, selectNode, func(_ *instance, dst []byte) ([]byte, error) {
		return appendNodeRequest(dst, req)
	}, func(body []byte) (err error) {
		dec, err = decodeNodeDecision(body)
		return err
	})
	return dec, err
}

type export int

const (
	selectPod export = iota
	selectNode
)

// invoke runs one call: take an instance, encode the request for it, call the export,
// decode the response frame while the instance is still held (the frame lives in its
// memory), and give the instance back, or discard it if the call failed in a way that
// leaves it suspect.
func (p *Plugin) invoke(ctx context.Context, op string, which export,
	encode func(*instance, []byte) ([]byte, error), decode func([]byte) error) error {
	p.calls.Add(1)
	fail := func(err error) error {
		err = fmt.Errorf("wasm: plugin %q: %s: %w", p.cfg.Name, op, err)
		p.failures.Add(1)
		p.recordError(err)
		return err
	}
	in, err := p.acquire(ctx)
	if err != nil {
		return fail(err)
	}
	req, err := encode(in, in.req[:0])
	if err != nil {
		in.forget() // the mirrors may be half updated
		p.release(in)
		return fail(fmt.Errorf("encode request: %w", err))
	}
	in.req = req[:0]
	fn := in.selectPod
	if which == selectNode {
		fn = in.selectNode
	}
	frame, err := in.call(ctx, p.cfg.Timeout, fn, req)
	if err != nil {
		err = p.classify(err, in)
		p.discard(in)
		return fail(err)
	}
	if err := p.answer(in, frame, decode); err != nil {
		return fail(err)
	}
	return nil
}

// answer decodes the response frame and gives the instance back, or discards it when the
// frame is malformed.
func (p *Plugin) answer(in *instance, frame []byte, decode func([]byte) error) error {
	if len(frame) == 0 {
		p.discard(in)
		return fmt.Errorf("%w: empty response frame; instance replaced", ErrABI)
	}
	switch frame[0] {
	case frameOK:
		err := decode(frame[1:])
		p.release(in) // a well-framed but invalid decision is the policy's bug, not corruption
		return err
	case frameError:
		msg := string(frame[1:])
		in.forget() // the guest may have failed to decode: its cache is unknown
		p.release(in)
		return fmt.Errorf("%w: %s", ErrPolicy, msg)
	default:
		p.discard(in)
		return fmt.Errorf("%w: response frame tag %d, want %d or %d; instance replaced",
			ErrABI, frame[0], frameOK, frameError)
	}
}

// classify turns an error from a guest call into this package's errors, counting traps and
// timeouts. The instance the error came from is about to be discarded.
func (p *Plugin) classify(err error, in *instance) error {
	if errors.Is(err, ErrABI) {
		return fmt.Errorf("%w; instance replaced", err)
	}
	var intr *errInterrupted
	if errors.As(err, &intr) {
		switch {
		case intr.reason == callTimedOut:
			p.timeouts.Add(1)
			return fmt.Errorf("%w (per-call timeout %s): %w; instance replaced", ErrTimeout, intr.timeout, context.DeadlineExceeded)
		case errors.Is(intr.ctxErr, context.DeadlineExceeded):
			p.timeouts.Add(1)
			return fmt.Errorf("%w (caller's deadline): %w; instance replaced", ErrTimeout, context.DeadlineExceeded)
		default:
			return fmt.Errorf("call canceled: %w; instance replaced", context.Canceled)
		}
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			p.timeouts.Add(1)
			return fmt.Errorf("%w (per-call timeout %s): %w; instance replaced", ErrTimeout, p.cfg.Timeout, context.DeadlineExceeded)
		case sys.ExitCodeContextCanceled:
			return fmt.Errorf("call canceled: %w; instance replaced", context.Canceled)
		}
		p.traps.Add(1)
		return fmt.Errorf("%w: exit code %d%s; instance replaced", ErrTrap, exit.ExitCode(), outputNote(in))
	}
	p.traps.Add(1)
	msg, _, _ := strings.Cut(err.Error(), "\n") // drop wazero's multi-line wasm stack trace
	return fmt.Errorf("%w: %s%s; instance replaced", ErrTrap, msg, outputNote(in))
}

func outputNote(in *instance) string {
	if s := in.out.summary(); s != "" {
		return " (guest output: " + s + ")"
	}
	return ""
}

// acquire takes a slot, instantiating into it if it is empty.
func (p *Plugin) acquire(ctx context.Context) (*instance, error) {
	select {
	case <-p.closing:
		return nil, ErrClosed
	default:
	}
	select {
	case <-p.closing:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for an instance: %w", ctx.Err())
	case in := <-p.slots:
		if in != nil {
			return in, nil
		}
		in, err := p.newInstance(ctx)
		if err != nil {
			p.slots <- nil
			p.setReplaceErr(err)
			return nil, err
		}
		p.live.Add(1)
		p.setReplaceErr(nil)
		return in, nil
	}
}

func (p *Plugin) release(in *instance) { p.slots <- in }

// discard closes a suspect instance and refills its slot in the background, so the failed
// call returns at once and the next call finds a fresh instance. The slot stays taken until
// the replacement is ready, which keeps the instance count bounded.
func (p *Plugin) discard(in *instance) {
	if s := in.out.String(); s != "" {
		p.log.Warn("wasm guest output before failure", "output", s)
	}
	in.close(context.Background())
	p.live.Add(-1)
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		select {
		case <-p.closing:
			p.slots <- nil
			return
		default:
		}
		fresh, err := p.newInstance(context.Background())
		if err != nil {
			p.log.Error("wasm instance replacement failed; will retry on next call", "error", err)
			p.setReplaceErr(err)
			p.slots <- nil
			return
		}
		p.live.Add(1)
		p.setReplaceErr(nil)
		p.slots <- fresh
	}()
}

func (p *Plugin) recordError(err error) {
	p.mu.Lock()
	p.lastErr, p.lastErrAt = err.Error(), time.Now()
	p.mu.Unlock()
}

func (p *Plugin) setReplaceErr(err error) {
	p.mu.Lock()
	p.replaceErr = err
	p.mu.Unlock()
}

// Health values reported by Status.
const (
	HealthOK       = "ok"
	HealthDegraded = "degraded" // an instance could not be (re)created; calls may fail
	HealthClosed   = "closed"
)

// Status is a snapshot of the plugin for `allotctl plugins` and metrics.
type Status struct {
	Kind            string
	Transport       string
	Name            string
	PluginVersion   string // from the guest's allot_plugin_info, "" if it exports none
	ContractVersion string
	Health          string
	// Instances is how many instances exist now; MaxInstances the configured bound.
	Instances    int
	MaxInstances int
	Calls        int64
	Failures     int64 // calls that returned an error, whatever the cause
	Traps        int64
	Timeouts     int64
	LastError    string
	LastErrorAt  time.Time
}

// Status reports the plugin's health and counters.
func (p *Plugin) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	health := HealthOK
	switch {
	case p.closedState:
		health = HealthClosed
	case p.replaceErr != nil:
		health = HealthDegraded
	}
	return Status{
		Kind:            Kind,
		Transport:       Transport,
		Name:            p.cfg.Name,
		PluginVersion:   p.info.version,
		ContractVersion: p.contract,
		Health:          health,
		Instances:       int(p.live.Load()),
		MaxInstances:    p.cfg.Instances,
		Calls:           p.calls.Load(),
		Failures:        p.failures.Load(),
		Traps:           p.traps.Load(),
		Timeouts:        p.timeouts.Load(),
		LastError:       p.lastErr,
		LastErrorAt:     p.lastErrAt,
	}
}

// Close stops new calls, waits (until ctx is done) for calls in flight and replacements in
// progress, then frees every instance and the compiled module. Calls still running when ctx
// ends are aborted. Close is idempotent.
func (p *Plugin) Close(ctx context.Context) error {
	var err error
	p.closed.Do(func() {
		close(p.closing)
		p.mu.Lock()
		p.closedState = true
		p.mu.Unlock()
	collect:
		for range cap(p.slots) {
			select {
			case in := <-p.slots:
				if in != nil {
					in.close(ctx)
					p.live.Add(-1)
				}
			case <-ctx.Done():
				break collect
			}
		}
		err = p.rt.Close(ctx) // also aborts anything still running
		p.bg.Wait()
		if err != nil {
			err = fmt.Errorf("wasm: plugin %q: close: %w", p.cfg.Name, err)
		}
	})
	return err
}
