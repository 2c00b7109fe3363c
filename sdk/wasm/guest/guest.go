// Package guest is the allot WASM guest SDK: it turns a plain Go policy.PoolPolicy into a
// WebAssembly module the allot host can load.
//
// A plugin is a main package that registers its policy from init and is built in reactor
// mode:
//
//	package main
//
//	import "github.com/allot-ipam/allot/sdk/wasm/guest"
//
//	func init() { guest.RegisterPoolPolicy(myPolicy{}, guest.Name("my-policy"), guest.Version("0.1.0")) }
//
//	func main() {} // required by the toolchain, never called in reactor mode
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o policy.wasm .
//
// The SDK exports the ABI functions (see sdk/ABI.md), manages the request and response
// buffers, and converts between the wire format and the Go types of sdk/policy, so the
// policy never sees a pointer or a protobuf message.
//
// A policy that panics is not recovered: the host sees a trap, reports it as that call's
// error and replaces the instance, so no state a panic left half-updated is ever reused.
// Policies must be pure functions of their request: the sandbox offers no filesystem, no
// network and a virtual clock. The request is read-only and lives until the policy
// returns: the SDK reuses the *PodRequest and its Pools array for the next call (per-call
// allocations are expensive in a wasm guest), so a policy must not keep r or r.Pools.
package guest

import (
	"context"

	"github.com/allot-ipam/allot/sdk/policy"
)

// plugin is the registered policy and what allot_plugin_info reports about it.
var plugin struct {
	policy  policy.PoolPolicy
	name    string
	version string
}

// Option sets what the plugin reports about itself.
type Option func()

// Name sets the plugin name the host shows in `allotctl plugins`.
func Name(name string) Option { return func() { plugin.name = name } }

// Version sets the plugin's own version (semver recommended), shown by the host.
func Version(v string) Option { return func() { plugin.version = v } }

// RegisterPoolPolicy makes p the policy this module serves. Call it from an init function:
// modules built with -buildmode=c-shared never run main. A second call replaces the first.
func RegisterPoolPolicy(p policy.PoolPolicy, opts ...Option) {
	plugin.policy = p
	for _, o := range opts {
		o()
	}
}

// ctx is the context every policy call gets: the host enforces the deadline from outside
// (it stops the instance), so there is nothing for the guest to cancel.
var ctx = context.Background()
