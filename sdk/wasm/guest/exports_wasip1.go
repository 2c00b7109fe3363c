//go:build wasip1

package guest

import (
	"unsafe"

	"github.com/allot-ipam/allot/sdk/policy"
)

// The ABI exports (sdk/ABI.md). The host calls them one at a time per instance, so the
// package-level buffers below need no locking.

var (
	// reqBuf is the buffer handed to the host by allot_alloc. It must stay reachable (and
	// Go's collector does not move objects) until the next allot_alloc call.
	reqBuf []byte
	// respBuf holds the last response; the host reads it before the next call.
	respBuf []byte
	// versionBuf and infoBuf keep the handshake answers alive while the host reads them.
	versionBuf = []byte(policy.ContractVersion)
	infoBuf    []byte
)

// pack returns the (ptr<<32 | len) of b, which must stay reachable until the host read it.
func pack(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))<<32 | uint64(len(b))
}

//go:wasmexport allot_contract_version
func allotContractVersion() uint64 { return pack(versionBuf) }

//go:wasmexport allot_plugin_info
func allotPluginInfo() uint64 {
	infoBuf = pluginInfo()
	return pack(infoBuf)
}

// features is what allot_features reports (sdk/ABI.md): bit 0, pool references; bit 1,
// part references; bit 2, runs of unchanged pools (cache.go).
const features uint64 = 1<<0 | 1<<1 | 1<<2

//go:wasmexport allot_features
func allotFeatures() uint64 { return features }

//go:wasmexport allot_alloc
func allotAlloc(size uint32) uint32 {
	if size == 0 {
		size = 1
	}
	if uint32(cap(reqBuf)) < size {
		reqBuf = make([]byte, size)
	}
	reqBuf = reqBuf[:size]
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(reqBuf))))
}

// request is the view of reqBuf the host filled: ptr must be the one allot_alloc returned.
func request(ptr, n uint32) []byte {
	if n > uint32(len(reqBuf)) || uintptr(ptr) != uintptr(unsafe.Pointer(unsafe.SliceData(reqBuf))) {
		return nil
	}
	return reqBuf[:n]
}

//go:wasmexport allot_select_pod_pools
func allotSelectPodPools(ptr, n uint32) uint64 {
	req := request(ptr, n)
	if req == nil && n > 0 {
		respBuf = errorFrame(respBuf, errBadBuffer)
	} else {
		respBuf = handlePodPools(respBuf, req)
	}
	return pack(respBuf)
}

//go:wasmexport allot_select_node_cidr_config
func allotSelectNodeCIDRConfig(ptr, n uint32) uint64 {
	req := request(ptr, n)
	if req == nil && n > 0 {
		respBuf = errorFrame(respBuf, errBadBuffer)
	} else {
		respBuf = handleNodeCIDRConfig(respBuf, req)
	}
	return pack(respBuf)
}

const errBadBuffer = sdkError("guest: request is not inside the buffer allot_alloc returned")
