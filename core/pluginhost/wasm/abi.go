package wasm

// The allot WASM ABI, host side. sdk/ABI.md is the specification and says why each choice
// was made; this file only names the pieces so the rest of the package never spells an
// export name or a bit shift twice.

const (
	// exportInitialize is the reactor entry point the Go toolchain emits for
	// -buildmode=c-shared. The host calls it once per instance, at instantiation.
	exportInitialize = "_initialize"
	// exportStart is what a command-mode build (no -buildmode=c-shared) exports instead. Its
	// presence without _initialize is a build mistake we can name.
	exportStart = "_start"

	exportContractVersion = "allot_contract_version"        // () -> packed UTF-8 string
	exportPluginInfo      = "allot_plugin_info"             // () -> packed pb.PluginInfo (optional)
	exportAlloc           = "allot_alloc"                   // (size u32) -> ptr u32
	exportSelectPodPools  = "allot_select_pod_pools"        // (ptr, len u32) -> packed frame
	exportSelectNodeCIDR  = "allot_select_node_cidr_config" // (ptr, len u32) -> packed frame
	// exportFeatures (optional, () -> i64 feature bits) is in poolrefs.go with its feature.

	// wasiModule is the only module a guest may import from.
	wasiModule = "wasi_snapshot_preview1"
)

// Response frame tags: the first byte of every select response.
const (
	frameOK    byte = 0 // rest is the protobuf-encoded decision
	frameError byte = 1 // rest is a UTF-8 error message from the policy
)

// maxResponseLen bounds what the host will read back from a guest, so a confused guest
// cannot make the host copy its whole memory.
const maxResponseLen = 16 << 20

// minRequestBuf is the smallest guest buffer the host asks for; it rounds up to powers of
// two from there so allot_alloc is called a handful of times per instance, not per call.
const minRequestBuf = 4 << 10

// unpack splits a packed (ptr<<32 | len) result.
func unpack(v uint64) (ptr, length uint32) {
	return uint32(v >> 32), uint32(v)
}

// requestBufSize is the buffer size to ask the guest for so that n bytes fit.
func requestBufSize(n int) uint32 {
	size := uint32(minRequestBuf)
	for int(size) < n {
		size <<= 1
	}
	return size
}

// declaredMinPages reads the initial size, in 64 KiB pages, of the memory a module defines,
// straight from its memory section (id 5), so a memory cap below it can be refused as a
// config error before compiling. ok is false when the module defines no memory or the
// binary is malformed (the compiler then reports the details).
func declaredMinPages(code []byte) (pages uint32, ok bool) {
	if len(code) < 8 || string(code[:4]) != "\x00asm" {
		return 0, false
	}
	b := code[8:]
	for len(b) > 0 {
		id := b[0]
		size, n := uleb(b[1:])
		if n == 0 || uint64(len(b)-1-n) < size {
			return 0, false
		}
		body := b[1+n : 1+n+int(size)]
		b = b[1+n+int(size):]
		if id != 5 {
			continue
		}
		count, n := uleb(body)
		if n == 0 || count == 0 || len(body) < n+1 {
			return 0, false
		}
		min, m := uleb(body[n+1:]) // skip the limits flag byte
		if m == 0 || min > 1<<16 {
			return 0, false
		}
		return uint32(min), true
	}
	return 0, false
}

// uleb decodes an unsigned LEB128 (at most 10 bytes); n is 0 on malformed input.
func uleb(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}
