// Command allot-cni is the CNI IPAM plugin of allot. All logic is in core/cniplugin; this
// main only runs Plugin.Main, which reads the CNI environment and stdin, checks the CNI
// version and prints errors as CNI error JSON (the protocol of the library's skel).
//
// The process lives a few milliseconds and runs one goroutine: GOMAXPROCS is not derived
// from the cgroup (the runtime would read /proc/self/cgroup and mountinfo at every start).
//
//go:debug containermaxprocs=0
package main

import (
	"os"
	"runtime/debug"

	"github.com/allot-ipam/allot/core/cniplugin"
)

// version is set at build time with -ldflags "-X main.version=..."; otherwise it comes from
// the build info (module version or VCS revision).
var version string

func main() {
	p := &cniplugin.Plugin{}
	// Main prints the about text only without CNI_COMMAND; reading the build info costs
	// every other call for nothing.
	about := ""
	if os.Getenv("CNI_COMMAND") == "" {
		about = cniplugin.About(buildVersion())
	}
	p.Main(about)
}

func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return s.Value[:12]
		}
	}
	return "dev"
}
