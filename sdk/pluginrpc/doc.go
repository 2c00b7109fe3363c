// Package pluginrpc is the go-plugin (gRPC) glue of allot's process plugins.
//
// Plugin authors implement a contract's Go interface and hand it to one call in main:
//
//	func main() {
//		pluginrpc.ServePoolPolicy(myPolicy{}, pluginrpc.Info{Name: "by-label", Version: "0.1.0"})
//	}
//
// The host (core/pluginhost/process) launches the binary with go-plugin, dispenses the kind
// it expects and gets back a value of the same Go interface (PoolPolicyClient,
// CloudBackendClient, DatapathClient): the core never sees gRPC. Protobuf exists only inside
// this package, converted at the edge by sdk/wire, which validates everything the other side
// sends (a plugin's bad output becomes an error naming the field).
//
// Guarantees on every call:
//   - the caller's context travels with the call: its deadline becomes the gRPC deadline and
//     cancelling it cancels the plugin's context;
//   - a panic in the plugin's implementation is recovered into an error (ErrPluginPanic)
//     instead of killing the plugin process;
//   - errors keep their identity across the process boundary where it matters: the cloud
//     sentinels (cloud.ErrThrottled, ...), context.DeadlineExceeded / context.Canceled, and
//     ErrTransport for a broken connection (crashed or killed plugin);
//   - a pool policy sees every pool view of the request in full, though the host sends the
//     views the plugin already holds as references (poolrefs.go): the plugin shares those
//     views' slices and maps between requests, which is why pool views are read-only;
//   - writes to the plugin's stdout cannot break the go-plugin handshake: before Serve they
//     are diverted to stderr (which the host logs), after Serve go-plugin forwards them to the
//     host's logger.
//
// Every plugin also serves the Meta service: its name, version, kind and the contract
// version it was built against, which the host checks before the first call.
package pluginrpc
