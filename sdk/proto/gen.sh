#!/usr/bin/env bash
# Regenerates the Go code for the allot plugin wire format from allot/plugin/v1/*.proto (and
# the repository's other .proto files): hack/gen-proto.sh pins protoc-gen-go,
# protoc-gen-go-grpc and protoc-gen-go-vtproto and builds them from the Go module proxy;
# protoc comes from Debian (protobuf-compiler). `make generate` at the root runs it with the
# other generators. The generated files are committed: building allot never needs protoc.
set -euo pipefail
exec "$(dirname "$0")/../../hack/gen-proto.sh"
