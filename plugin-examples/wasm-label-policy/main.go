// Command wasm-label-policy is an example allot pool policy compiled to WebAssembly: a pod's
// pools come from its allot.io/pool labels, with a fallback to the default pools. See
// README.md.
package main

import "github.com/allot-ipam/allot/sdk/wasm/guest"

// version is the plugin's own version, shown by `allotctl plugins`.
const version = "0.1.0"

func init() {
	guest.RegisterPoolPolicy(labelPolicy{}, guest.Name("wasm-label-policy"), guest.Version(version))
}

// main is never called: the module is built as a reactor (-buildmode=c-shared).
func main() {}
