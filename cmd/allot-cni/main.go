// Command allot-cni is the CNI IPAM plugin of allot. All logic is in core/cniplugin; this
// main only hands the command functions to skel, which reads the CNI environment and stdin,
// checks the CNI version and prints errors as CNI error JSON.
package main

import (
	"runtime/debug"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/allot-ipam/allot/core/cniplugin"
)

// version is set at build time with -ldflags "-X main.version=..."; otherwise it comes from
// the build info (module version or VCS revision).
var version string

func main() {
	p := &cniplugin.Plugin{}
	skel.PluginMainFuncs(p.Funcs(), cniplugin.VersionInfo, cniplugin.About(buildVersion()))
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
