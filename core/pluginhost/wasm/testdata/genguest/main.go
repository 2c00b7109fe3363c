// Command genguest is a probe, not a product: the WASM guest SDK's transport redone with
// generated code, to settle whether the SDK should drop its hand protobuf codec. It decodes
// requests with UnmarshalVT of pluginv1lite (protoc-gen-go-lite: vtprotobuf's
// marshal/unmarshal/size without protoc-gen-go's descriptors, so no reflection runtime is
// linked), converts them to sdk/policy types as sdk/wire does, answers the constant decision
// of testdata/constant, and encodes it with MarshalVT. It exports no allot_features: a
// generated decoder knows nothing of pool references, so every request carries every pool.
//
// BenchmarkGuestCodec (codec_bench_test.go) compares it with testdata/constant, the same
// policy on the SDK's hand codec. It is its own module so that protobuf-go-lite is a
// dependency of this probe only.
package main

import (
	"unsafe"

	"github.com/allot-ipam/allot/core/pluginhost/wasm/testdata/genguest/pluginv1lite"
	"github.com/allot-ipam/allot/sdk/policy"
)

var (
	version = []byte(policy.ContractVersion)
	reqBuf  []byte
	respBuf []byte
)

func pack(b []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))<<32 | uint64(len(b))
}

//go:wasmexport allot_contract_version
func contractVersion() uint64 { return pack(version) }

//go:wasmexport allot_alloc
func alloc(n uint32) uint32 {
	reqBuf = make([]byte, max(n, 1))
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(reqBuf))))
}

//go:wasmexport allot_select_pod_pools
func selectPodPools(ptr, n uint32) uint64 {
	respBuf = answer(reqBuf[:n])
	return pack(respBuf)
}

//go:wasmexport allot_select_node_cidr_config
func selectNodeCIDRConfig(ptr, n uint32) uint64 {
	respBuf = errorFrame("genguest: node requests are not part of the probe")
	return pack(respBuf)
}

// decision is testdata/constant's.
var decision = policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: "pool-v4-07"}},
	Source: "pod label allot.io/pool"}

// answer decodes and converts the request, as an SDK built on generated code would before
// calling the policy, and encodes the decision. The request is copied once and decoded with
// UnmarshalVTUnsafe, whose strings alias the copy: the generated path at its cheapest (the
// host rewrites reqBuf on the next call, so strings may not alias it).
func answer(req []byte) []byte {
	var m pluginv1lite.PodRequest
	if err := m.UnmarshalVTUnsafe(append([]byte(nil), req...)); err != nil {
		return errorFrame(err.Error())
	}
	r, err := podRequestFromProto(&m)
	if err != nil {
		return errorFrame(err.Error())
	}
	_ = r // the constant policy does not look at it
	out := podDecisionToProto(decision)
	b, err := out.MarshalVT()
	if err != nil {
		return errorFrame(err.Error())
	}
	return append([]byte{0}, b...)
}

func errorFrame(msg string) []byte { return append([]byte{1}, msg...) }

func main() {}
