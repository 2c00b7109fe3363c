#!/usr/bin/env bash
# Regenerates the Go code of every .proto in the repository (committed; building allot never
# needs protoc, only changing a .proto does):
#   sdk/proto/allot/plugin/v1/*.proto -> sdk/proto/pluginv1 (plugin contracts; vtprotobuf codecs
#     for the process and WASM transports, gRPC stubs for go-plugin)
#   core/api/proto/allot/api/v1/*.proto -> core/api/apiv1 (the local API's framed protocol)
#   sdk/proto/allot/plugin/v1/policy.proto -> core/pluginhost/wasm/testdata/genguest/pluginv1lite
#     (protoc-gen-go-lite, for the WASM guest codec benchmark only)
# protoc comes from Debian (protobuf-compiler, installed by hack/install-deps.sh); the
# generators are built from the Go module proxy at the versions pinned here, into
# $ALLOT_CACHE/tools, so every machine generates the same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
PROTOC_GEN_GO_VTPROTO_VERSION=v0.6.0
PROTOC_GEN_GO_LITE_VERSION=v0.14.0
# The messages' sizes, encoders and decoders vtprotobuf generates (no pools, no equality).
VTPROTO_FEATURES=marshal+unmarshal+size

bash hack/install-deps.sh
tools="${ALLOT_CACHE:-$HOME/.cache/allot}/tools/protoc-gen"
install_tool() { # name package version
	local bin="$tools/$1-$3"
	if [ ! -x "$bin" ]; then
		mkdir -p "$tools"
		GOBIN="$tools/tmp" GOFLAGS=-mod=mod go install "$2@$3"
		mv "$tools/tmp/$1" "$bin"
	fi
	ln -sf "$bin" "$tools/$1"
}
install_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"
install_tool protoc-gen-go-vtproto github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto "$PROTOC_GEN_GO_VTPROTO_VERSION"
install_tool protoc-gen-go-lite github.com/aperturerobotics/protobuf-go-lite/cmd/protoc-gen-go-lite "$PROTOC_GEN_GO_LITE_VERSION"
export PATH="$tools:$PATH"

# module= strips the module path from go_package, so files land in the package's folder.
rm -f sdk/proto/pluginv1/*.pb.go sdk/proto/pluginv1/pluginv1grpc/*.pb.go
(cd sdk/proto && protoc -I . \
	--go_out=.. --go_opt=module=github.com/allot-ipam/allot/sdk \
	--go-grpc_out=.. --go-grpc_opt=module=github.com/allot-ipam/allot/sdk \
	--go-vtproto_out=.. --go-vtproto_opt=module=github.com/allot-ipam/allot/sdk,features=$VTPROTO_FEATURES \
	allot/plugin/v1/*.proto)

rm -f core/api/apiv1/*.pb.go
(cd core/api/proto && protoc -I . \
	--go_out=../../.. --go_opt=module=github.com/allot-ipam/allot \
	--go-vtproto_out=../../.. --go-vtproto_opt=module=github.com/allot-ipam/allot,features=$VTPROTO_FEATURES \
	allot/api/v1/*.proto)

# The WASM guest codec probe (core/pluginhost/wasm/testdata/genguest, its own module): the
# pool-policy messages by protoc-gen-go-lite, vtprotobuf's codecs without protoc-gen-go's
# descriptors, to measure a generated guest against the SDK's hand codec; unmarshal_unsafe
# gives it its best chance (strings that alias the request instead of one allocation each).
lite=github.com/allot-ipam/allot/core/pluginhost/wasm/testdata/genguest
rm -f core/pluginhost/wasm/testdata/genguest/pluginv1lite/*.pb.go
(cd sdk/proto && protoc -I . \
	--go-lite_out=../../core/pluginhost/wasm/testdata/genguest \
	--go-lite_opt=module=$lite,features=$VTPROTO_FEATURES+unmarshal_unsafe,"Mallot/plugin/v1/policy.proto=$lite/pluginv1lite;pluginv1lite" \
	allot/plugin/v1/policy.proto)
