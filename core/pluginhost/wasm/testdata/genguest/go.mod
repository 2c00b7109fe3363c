module github.com/allot-ipam/allot/core/pluginhost/wasm/testdata/genguest

go 1.26.6

require (
	github.com/allot-ipam/allot/sdk v0.0.0
	github.com/aperturerobotics/protobuf-go-lite v0.14.0
)

replace github.com/allot-ipam/allot/sdk => ../../../../../sdk
