// Package process hosts allot plugins that run as separate processes, over
// hashicorp/go-plugin (gRPC only).
//
// Open starts the plugin binary and returns a *Plugin whose PoolPolicy, CloudBackend and
// Datapath methods yield values of the sdk's Go interfaces: the core uses them exactly like
// a built-in or WASM plugin and never learns which transport it is talking to. Behind those
// values a supervisor owns the process:
//
//   - the binary is pinned by sha256 (checked by us with a clear message, and again by
//     go-plugin's SecureConfig right before exec) and the connection uses AutoMTLS;
//   - at start the plugin's kind and contract version (Meta service) are checked against the
//     host's; a mismatch refuses the plugin, naming both versions;
//   - every call carries the caller's context (its deadline reaches the plugin) and is
//     bounded by the configured per-call timeout, which the supervisor enforces; a call that
//     times out is treated as a hung plugin: the process is killed and restarted;
//   - a crashed process (connection lost, process exited, health check failed) is restarted
//     with exponential backoff; while it is down, calls fail at once with ErrRestarting
//     ("plugin x is restarting (last error: ...)") instead of hanging;
//   - plugins get Pdeathsig=SIGKILL and their own process group, so they die with allotd
//     even when allotd is SIGKILLed, and a restart kills everything the plugin spawned;
//   - the plugin's stdout and stderr are logged through slog and cannot break the protocol.
//
// Status reports what `allotctl plugins` shows: kind, transport, versions, health, restarts
// and the last error.
package process
