// Command process-policy is an allot pool policy served as a process plugin (go-plugin over
// gRPC). allotd starts it; run by hand it only says that it is a plugin.
package main

import (
	"os"

	"github.com/allot-ipam/allot/sdk/pluginrpc"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0"

func main() {
	pluginrpc.ServePoolPolicy(
		LabelPolicy{Label: os.Getenv("ALLOT_POOL_LABEL")},
		pluginrpc.Info{Name: "process-policy", Version: version},
	)
}
