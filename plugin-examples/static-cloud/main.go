// Command static-cloud is an allot cloud backend served as a process plugin: it hands out
// addresses from a static list.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/allot-ipam/allot/sdk/pluginrpc"
)

var version = "0.1.0"

func main() {
	fs := flag.NewFlagSet("static-cloud", flag.ExitOnError)
	list := fs.String("addresses", os.Getenv("STATIC_CLOUD_ADDRESSES"), "addresses and ranges to hand out, e.g. 10.0.0.10-10.0.0.50,fd00::10-fd00::20 (env STATIC_CLOUD_ADDRESSES)")
	perNode := fs.Int("per-node", envInt("STATIC_CLOUD_PER_NODE"), "most addresses of one family a node may hold, 0 = no limit (env STATIC_CLOUD_PER_NODE)")
	state := fs.String("state", os.Getenv("STATIC_CLOUD_STATE"), "file keeping assignments across restarts; without it a restarted plugin forgets them (env STATIC_CLOUD_STATE)")
	_ = fs.Parse(os.Args[1:])

	addrs, err := ParseAddresses(*list)
	if err != nil {
		fatal(err)
	}
	if *perNode < 0 {
		fatal(fmt.Errorf("per-node: %d is negative", *perNode))
	}
	b, err := NewStatic(addrs, *perNode, *state)
	if err != nil {
		fatal(err)
	}
	if *state == "" {
		fmt.Fprintln(os.Stderr, "[WARN] static-cloud: no -state file: assignments are lost when the plugin restarts")
	}
	pluginrpc.ServeCloudBackend(b, pluginrpc.Info{Name: "static-cloud", Version: version})
}

func envInt(k string) int {
	v := os.Getenv(k)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fatal(fmt.Errorf("%s: %q is not a number", k, v))
	}
	return n
}

// fatal reports a configuration error on stderr, which allotd logs, and exits.
func fatal(err error) {
	fmt.Fprintln(os.Stderr, "static-cloud:", err)
	os.Exit(1)
}
