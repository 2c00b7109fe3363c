package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Deadline enforcement without wazero's WithCloseOnContextDone.
//
// WithCloseOnContextDone makes wazero's compiler put, at every wasm loop header, a call that
// leaves machine code, checks in Go whether the module was closed, and comes back. The Go
// wasm backend compiles every function with jumps into a dispatch `loop` and every jump into
// a branch to it, so a Go guest takes that exit at almost every branch: it made a pool
// decision cost ~340 µs of CPU instead of ~40, and an empty call 12 µs instead of 4.
//
// Instead, before compiling, the host rewrites the module (the pinned file is verified
// first; only the in-memory copy changes). It appends two mutable i32 globals: stop (0,
// exported as interruptGlobal) and fuel (fuelPerExit), and at every loop header inserts
//
//	fuel -= 1
//	if fuel == 0 {
//		sched_yield()          // a call into Go: see below
//		fuel = fuelPerExit
//		if stop { unreachable } // trap
//	}
//
// which costs a decrement and a branch in machine code per iteration instead of an exit.
//
// To stop a call, a watchdog (the per-call timer, or the caller's context) sets stop from
// another goroutine; the guest traps within fuelPerExit loop iterations. Code without loops
// runs for a bounded time (recursion ends in a stack overflow), as with wazero's check. The
// instance is then discarded, never reused, like any instance that trapped.
//
// Why the periodic call: machine code cannot be preempted by the Go scheduler. A guest that
// never left it would hold up every stop-the-world of the host (garbage collection) until the
// deadline, and the deadline's timer cannot fire while the world is stopping: a deadlock.
// sched_yield is a wasip1 import every Go guest has, and the sandbox makes it a no-op Go
// function, so calling it is an ordinary host call: the goroutine reaches a safe point in
// Go, and the guest sees nothing. A module that does not import it is not rewritten.
//
// The rewriter decodes every instruction (it must, to tell a loop opcode from an immediate
// byte). A module using an instruction it does not know (a proposal newer than this file)
// is not rewritten either: the plugin then runs with WithCloseOnContextDone, slower but just
// as safe.

// fuelPerExit is how many loop iterations run in machine code between two exits to Go: a
// few microseconds of a tight loop, so the exit costs little and a stop-the-world or a
// deadline waits at most that long.
const fuelPerExit = 1 << 14

// interruptGlobal is the export name of the added global. The "__allot_" prefix is
// reserved (sdk/ABI.md); a module already exporting the name is not rewritten.
const interruptGlobal = "__allot_interrupt"

// errUnsupported: the module uses something the rewriter does not know.
var errUnsupported = errors.New("unsupported by the deadline instrumentation")

// Section ids.
const (
	secCustom = 0
	secImport = 2
	secGlobal = 6
	secExport = 7
	secCode   = 10
)

// sectionOrder is the position of each known section id in a module (the binary format
// requires this order; data count (12) and tag (13) sections sit between others).
var sectionOrder = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

// instrument returns a copy of the module with the interrupt global and loop checks.
func instrument(code []byte) ([]byte, error) {
	secs, err := splitSections(code)
	if err != nil {
		return nil, err
	}
	sc, err := scanSections(secs)
	if err != nil {
		return nil, err
	}
	return sc.rewrite(code, secs)
}

// section is one section of a module: its id and body.
type section struct {
	id   byte
	body []byte
}

// splitSections checks the module header and cuts the module into its sections.
func splitSections(code []byte) ([]section, error) {
	if len(code) < 8 || string(code[:4]) != "\x00asm" || binary.LittleEndian.Uint32(code[4:8]) != 1 {
		return nil, fmt.Errorf("%w: not a version 1 wasm binary", errUnsupported)
	}
	var secs []section
	for b := code[8:]; len(b) > 0; {
		id := b[0]
		size, n := uleb(b[1:])
		if n == 0 || uint64(len(b)-1-n) < size {
			return nil, fmt.Errorf("%w: malformed section header", errUnsupported)
		}
		secs = append(secs, section{id, b[1+n : 1+n+int(size)]})
		b = b[1+n+int(size):]
	}
	return secs, nil
}

// moduleScan is what the rewrite needs to know about a module.
type moduleScan struct {
	importedGlobals, localGlobals, yield uint64
	hasGlobal                            bool
}

// scanSections counts the globals, finds the sched_yield import and checks that the
// module has what instrumenting needs.
func scanSections(secs []section) (moduleScan, error) {
	var sc moduleScan
	hasExport, hasCode, hasYield := false, false, false
	for _, s := range secs {
		switch s.id {
		case secImport:
			var err error
			if sc.importedGlobals, sc.yield, hasYield, err = scanImports(s.body); err != nil {
				return sc, err
			}
		case secGlobal:
			sc.hasGlobal = true
			n, m := uleb(s.body)
			if m == 0 {
				return sc, fmt.Errorf("%w: malformed global section", errUnsupported)
			}
			sc.localGlobals = n
		case secExport:
			hasExport = true
			if err := checkExportName(s.body); err != nil {
				return sc, err
			}
		case secCode:
			hasCode = true
		}
	}
	if !hasExport || !hasCode {
		return sc, fmt.Errorf("%w: no export or code section", errUnsupported)
	}
	if !hasYield {
		return sc, fmt.Errorf("%w: module does not import %s.sched_yield", errUnsupported, wasiModule)
	}
	return sc, nil
}

// rewrite writes the module with the two new globals (in the global section, created if
// there is none), the stop global exported and every function's loops checked.
func (sc moduleScan) rewrite(code []byte, secs []section) ([]byte, error) {
	stop, fuel := sc.importedGlobals+sc.localGlobals, sc.importedGlobals+sc.localGlobals+1
	// Two globals: i32 mutable = 0 (stop), i32 mutable = fuelPerExit (fuel).
	newGlobals := []byte{0x7f, 0x01, 0x41, 0x00, 0x0b, 0x7f, 0x01, 0x41}
	newGlobals = append(appendSleb(newGlobals, fuelPerExit), 0x0b)
	check := loopCheck(stop, fuel, sc.yield)

	out := append(make([]byte, 0, len(code)+len(code)/8), code[:8]...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = appendUleb(out, uint64(len(body)))
		out = append(out, body...)
	}
	hasGlobal := sc.hasGlobal
	for _, s := range secs {
		if !hasGlobal && s.id != secCustom && sectionOrder[s.id] > sectionOrder[secGlobal] {
			emit(secGlobal, append([]byte{2}, newGlobals...))
			hasGlobal = true
		}
		switch s.id {
		case secGlobal:
			_, m := uleb(s.body)
			body := appendUleb(nil, sc.localGlobals+2)
			emit(secGlobal, append(append(body, s.body[m:]...), newGlobals...))
		case secExport:
			emit(secExport, exportStop(s.body, stop))
		case secCode:
			body, err := instrumentCode(s.body, check)
			if err != nil {
				return nil, err
			}
			emit(secCode, body)
		default:
			emit(s.id, s.body)
		}
	}
	return out, nil
}

// exportStop returns the export section body with the stop global exported too.
func exportStop(exports []byte, stop uint64) []byte {
	n, m := uleb(exports)
	body := appendUleb(nil, n+1)
	body = append(body, exports[m:]...)
	body = appendUleb(body, uint64(len(interruptGlobal)))
	body = append(body, interruptGlobal...)
	body = append(body, 0x03) // export kind: global
	return appendUleb(body, stop)
}

// loopCheck is the code inserted at every loop header (see the comment at the top).
func loopCheck(stop, fuel, yield uint64) []byte {
	var b []byte
	op := func(code byte, idx uint64) { b = appendUleb(append(b, code), idx) }
	op(0x23, fuel)                               // global.get fuel
	b = append(b, 0x41, 0x01)                    // i32.const 1
	b = append(b, 0x6b)                          // i32.sub
	op(0x24, fuel)                               // global.set fuel
	op(0x23, fuel)                               // global.get fuel
	b = append(b, 0x45)                          // i32.eqz
	b = append(b, 0x04, 0x40)                    // if
	op(0x10, yield)                              //   call sched_yield
	b = append(b, 0x1a)                          //   drop (its errno)
	b = appendSleb(append(b, 0x41), fuelPerExit) // i32.const fuelPerExit
	op(0x24, fuel)                               //   global.set fuel
	op(0x23, stop)                               //   global.get stop
	b = append(b, 0x04, 0x40)                    //   if
	b = append(b, 0x00)                          //     unreachable
	b = append(b, 0x0b)                          //   end
	return append(b, 0x0b)                       // end
}

// scanImports walks the import section: it counts global imports (they come first in the
// global index space) and finds the function index of wasi's sched_yield.
func scanImports(b []byte) (globals, yield uint64, hasYield bool, err error) {
	r := &wreader{b: b}
	n := r.u()
	var funcs uint64
	for i := uint64(0); i < n && r.err == nil; i++ {
		mod := r.name()
		name := r.name()
		switch kind := r.byte(); kind {
		case 0x00: // func: type index
			r.u()
			if string(mod) == wasiModule && string(name) == "sched_yield" {
				yield, hasYield = funcs, true
			}
			funcs++
		case 0x01: // table: reftype, limits
			r.valtype()
			r.limits()
		case 0x02: // memory: limits
			r.limits()
		case 0x03: // global: valtype, mutability
			r.valtype()
			r.byte()
			globals++
		case 0x04: // tag: attribute, type index
			r.byte()
			r.u()
		default:
			r.fail("import kind 0x%02x", kind)
		}
	}
	return globals, yield, hasYield, r.err
}

// checkExportName refuses a module that already exports interruptGlobal.
func checkExportName(b []byte) error {
	r := &wreader{b: b}
	n := r.u()
	for i := uint64(0); i < n && r.err == nil; i++ {
		if string(r.name()) == interruptGlobal {
			return fmt.Errorf("%w: module already exports %s", errUnsupported, interruptGlobal)
		}
		r.byte()
		r.u()
	}
	return r.err
}

// instrumentCode rewrites the code section, inserting check after every loop's block type.
func instrumentCode(b []byte, check []byte) ([]byte, error) {
	r := &wreader{b: b}
	count := r.u()
	out := appendUleb(make([]byte, 0, len(b)+len(b)/8), count)
	var body []byte
	for i := uint64(0); i < count && r.err == nil; i++ {
		size := r.u()
		if r.err != nil || uint64(len(r.b)) < size {
			return nil, fmt.Errorf("%w: function %d: truncated body", errUnsupported, i)
		}
		fn := &wreader{b: r.b[:size]}
		r.b = r.b[size:]
		var err error
		if body, err = instrumentFunc(body[:0], fn, check); err != nil {
			return nil, fmt.Errorf("function %d: %w", i, err)
		}
		out = appendUleb(out, uint64(len(body)))
		out = append(out, body...)
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: trailing bytes in code section", errUnsupported)
	}
	return out, nil
}

func instrumentFunc(out []byte, r *wreader, check []byte) ([]byte, error) {
	start := r.b
	groups := r.u() // local declarations: count, then (n, valtype) pairs
	for j := uint64(0); j < groups && r.err == nil; j++ {
		r.u()
		r.valtype()
	}
	out = append(out, start[:len(start)-len(r.b)]...)
	for len(r.b) > 0 && r.err == nil {
		insn := r.b
		op := r.byte()
		if op == 0x03 { // loop blocktype: the one instruction that gets a check
			r.blocktype()
			out = append(out, insn[:len(insn)-len(r.b)]...)
			out = append(out, check...)
			continue
		}
		r.immediates(op)
		out = append(out, insn[:len(insn)-len(r.b)]...)
	}
	return out, r.err
}

// immediates reads the immediates of the instruction op (other than loop).
func (r *wreader) immediates(op byte) {
	switch {
	case op <= 0x01 || op == 0x05 || op == 0x0a || op == 0x0b || op == 0x0f || op == 0x19 ||
		op == 0x1a || op == 0x1b || op == 0xd1 || op == 0xd3 || op == 0xd5 || (op >= 0x45 && op <= 0xc4):
		// no immediate
	case op == 0x02 || op == 0x04 || op == 0x06: // block, if, try
		r.blocktype()
	case op == 0x07 || op == 0x08 || op == 0x09 || op == 0x18 || op == 0x0c || op == 0x0d ||
		op == 0x10 || op == 0x12 || op == 0x14 || op == 0x15 || (op >= 0x20 && op <= 0x26) ||
		op == 0xd2 || op == 0xd4 || op == 0xd6 || op == 0x3f || op == 0x40:
		r.u() // one index (memory.size/grow: memory index)
	case op == 0x0e: // br_table
		n := r.u()
		for k := uint64(0); k <= n && r.err == nil; k++ {
			r.u()
		}
	case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
		r.u()
		r.u()
	case op == 0x1c: // select t*
		n := r.u()
		for k := uint64(0); k < n && r.err == nil; k++ {
			r.valtype()
		}
	case op == 0x1f: // try_table blocktype vec(catch)
		r.tryTable()
	case op >= 0x28 && op <= 0x3e: // loads and stores
		r.memarg()
	case op == 0x41, op == 0x42, op == 0xd0: // i32.const, i64.const, ref.null heaptype
		r.s()
	case op == 0x43:
		r.skip(4)
	case op == 0x44:
		r.skip(8)
	case op == 0xfc:
		r.misc()
	case op == 0xfd:
		r.simd()
	case op == 0xfe:
		r.threads()
	default:
		r.fail("opcode 0x%02x", op)
	}
}

func (r *wreader) tryTable() {
	r.blocktype()
	n := r.u()
	for k := uint64(0); k < n && r.err == nil; k++ {
		switch kind := r.byte(); kind {
		case 0x00, 0x01:
			r.u()
			r.u()
		case 0x02, 0x03:
			r.u()
		default:
			r.fail("catch kind 0x%02x", kind)
		}
	}
}

// misc reads the immediates of a 0xfc-prefixed instruction (saturating truncation, bulk
// memory, tables).
func (r *wreader) misc() {
	switch sub := r.u(); {
	case sub <= 7:
	case sub == 8 || sub == 10 || sub == 12 || sub == 14:
		r.u()
		r.u()
	case sub == 9 || sub == 11 || sub == 13 || (sub >= 15 && sub <= 17):
		r.u()
	default:
		r.fail("opcode 0xfc %d", sub)
	}
}

// simd reads the immediates of a 0xfd-prefixed (SIMD) instruction.
func (r *wreader) simd() {
	switch sub := r.u(); {
	case sub <= 11 || sub == 92 || sub == 93:
		r.memarg()
	case sub == 12 || sub == 13:
		r.skip(16)
	case sub >= 21 && sub <= 34:
		r.skip(1)
	case sub >= 84 && sub <= 91:
		r.memarg()
		r.skip(1)
	case sub <= 0x113:
	default:
		r.fail("opcode 0xfd %d", sub)
	}
}

// threads reads the immediates of a 0xfe-prefixed (threads) instruction.
func (r *wreader) threads() {
	switch sub := r.u(); {
	case sub == 3:
		r.skip(1)
	case sub <= 2 || (sub >= 0x10 && sub <= 0x4e):
		r.memarg()
	default:
		r.fail("opcode 0xfe %d", sub)
	}
}

// wreader reads the primitive encodings of the wasm binary format. The first error sticks.
type wreader struct {
	b   []byte
	err error
}

func (r *wreader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errUnsupported, fmt.Sprintf(format, args...))
	}
	r.b = nil
}

func (r *wreader) byte() byte {
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *wreader) skip(n int) {
	if len(r.b) < n {
		r.fail("truncated")
		return
	}
	r.b = r.b[n:]
}

// u reads an unsigned LEB128.
func (r *wreader) u() uint64 {
	v, n := uleb(r.b)
	if n == 0 {
		r.fail("bad LEB128")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// s skips a signed LEB128 (the same byte structure as an unsigned one).
func (r *wreader) s() { r.u() }

func (r *wreader) name() []byte {
	n := r.u()
	if uint64(len(r.b)) < n {
		r.fail("truncated name")
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

// valtype reads a value type: one byte, or a (ref null? ht) pair.
func (r *wreader) valtype() {
	switch c := r.byte(); c {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
	case 0x63, 0x64:
		r.s() // heap type
	default:
		r.fail("value type 0x%02x", c)
	}
}

// blocktype reads an empty type (0x40), a value type, or a signed type index.
func (r *wreader) blocktype() {
	if len(r.b) == 0 {
		r.fail("truncated")
		return
	}
	switch c := r.b[0]; c {
	case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		r.b = r.b[1:]
	case 0x63, 0x64:
		r.valtype()
	default:
		r.s()
	}
}

func (r *wreader) limits() {
	flags := r.byte()
	r.u()
	if flags&1 != 0 {
		r.u()
	}
}

// memarg reads an alignment (bit 6 set: a memory index follows) and an offset.
func (r *wreader) memarg() {
	if align := r.u(); align&0x40 != 0 {
		r.u()
	}
	r.u()
}

// appendSleb appends a signed LEB128 (for i32.const immediates).
func appendSleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendUleb(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}
