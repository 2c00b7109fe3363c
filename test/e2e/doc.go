// Package e2e holds allot's end-to-end tests: the real allotd and allot-cni binaries, built
// by TestMain, driven by the real cnitool and reference CNI plugins in network namespaces
// the tests create and remove. They need root and the CNI tools
// (hack/install-cni-tools.sh); without them, or with -short, they skip and say why.
//
// Environment:
//
//	ALLOT_CNI_BIN_DIR  reference plugins (bridge, ptp, host-local); default $ALLOT_CACHE/cni-v1.9.1
//	ALLOT_CNITOOL      cnitool binary; default $ALLOT_CACHE/cni-tools/cnitool
//	ALLOT_CACHE        default $HOME/.cache/allot
//	ALLOT_ALLOTD       a prebuilt allotd to use instead of building ./cmd/allotd
//
// Run: make e2e, or go test -count=1 -v ./test/e2e/
package e2e
