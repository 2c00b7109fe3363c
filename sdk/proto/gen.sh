#!/usr/bin/env bash
# Regenerates the Go code for the allot plugin wire format from allot/plugin/v1/*.proto.
# The generated files are committed: building allot never needs protoc, only changing the
# .proto files does. Needs protoc (Debian: protobuf-compiler), protoc-gen-go and
# protoc-gen-go-grpc on PATH:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2  (versions that generated the committed code)
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:$(go env GOPATH)/bin"
for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
	command -v "$tool" >/dev/null || { echo "gen.sh: $tool not found on PATH" >&2; exit 1; }
done
rm -f pluginv1/*.pb.go pluginv1/pluginv1grpc/*.pb.go
# module= strips the module path from go_package, so files land in pluginv1/ and
# pluginv1/pluginv1grpc/ under this directory's parent module layout.
protoc -I . \
	--go_out=.. --go_opt=module=github.com/allot-ipam/allot/sdk \
	--go-grpc_out=.. --go-grpc_opt=module=github.com/allot-ipam/allot/sdk \
	allot/plugin/v1/*.proto
gofmt -l pluginv1 >/dev/null
