module github.com/allot-ipam/allot/plugin-examples/wasm-label-policy

go 1.26.6

require github.com/allot-ipam/allot/sdk v0.0.0

require google.golang.org/protobuf v1.36.12 // indirect

replace github.com/allot-ipam/allot/sdk => ../../sdk
