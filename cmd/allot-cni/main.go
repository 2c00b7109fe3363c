// Command allot-cni is the CNI IPAM plugin of allot. All logic is in core/cniplugin; this
// main only hands the command functions to skel, which reads the CNI environment and stdin,
// checks the CNI version and prints errors as CNI error JSON.
//
// The process lives a few milliseconds, most of them Go's start-up and the wait for
// allotd's answer, and runs one goroutine: GOMAXPROCS is not derived from the cgroup (the
// runtime would read /proc/self/cgroup and mountinfo at every start) and is set to 1.
//
//go:debug containermaxprocs=0
package main

import (
	"os"
	"runtime"
	"runtime/debug"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/allot-ipam/allot/core/cniplugin"
)

// version is set at build time with -ldflags "-X main.version=..."; otherwise it comes from
// the build info (module version or VCS revision).
var version string

func main() {
	// With one P, the P of the goroutine blocked reading allotd's answer is handed off at
	// once, all Ps are idle and sysmon sleeps until the answer comes. With an idle second
	// P, sysmon leaves the P in the syscall for up to 10 ms and polls it every 20 µs and
	// more: tens of wake-ups per ADD, about a tenth of the process's CPU time (cnibench).
	// That needs no runtime timer pending either: the plugin's ipam.timeout is the
	// socket's (core/cniplugin newTimedDaemon).
	runtime.GOMAXPROCS(1)
	p := &cniplugin.Plugin{}
	// skel prints the about text only without CNI_COMMAND; reading the build info costs
	// every other call for nothing.
	about := ""
	if os.Getenv("CNI_COMMAND") == "" {
		about = cniplugin.About(buildVersion())
	}
	skel.PluginMainFuncs(p.Funcs(), cniplugin.VersionInfo, about)
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
