// Command rawversion is a test guest written against the ABI without the SDK: it speaks a
// contract version the host must refuse (2.0.0), which shows the handshake is checked
// before any request is sent. Built without -buildmode=c-shared it is a wasip1 command,
// which the host must also refuse, naming the build flag.
package main

import "unsafe"

var (
	version = []byte("2.0.0")
	buf     []byte
	resp    = []byte{1, 'n', 'o'}
)

func pack(b []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))<<32 | uint64(len(b))
}

//go:wasmexport allot_contract_version
func contractVersion() uint64 { return pack(version) }

//go:wasmexport allot_alloc
func alloc(n uint32) uint32 {
	buf = make([]byte, n)
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
}

//go:wasmexport allot_select_pod_pools
func selectPodPools(ptr, n uint32) uint64 { return pack(resp) }

//go:wasmexport allot_select_node_cidr_config
func selectNodeCIDRConfig(ptr, n uint32) uint64 { return pack(resp) }

func main() {}
