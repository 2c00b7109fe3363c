package pluginrpc

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/sdk/wire"
)

var (
	// ErrTransport: the call did not reach the plugin or its answer did not come back
	// (process crashed, killed, connection closed). The host restarts the plugin.
	ErrTransport = errors.New("plugin unreachable")
	// ErrPluginPanic: the plugin's implementation panicked; the panic was recovered.
	ErrPluginPanic = errors.New("plugin panicked")
	// ErrPlugin wraps every error the plugin's implementation returned.
	ErrPlugin = errors.New("plugin error")
)

const errorDomain = "allot.io"

// Reasons carried in errdetails.ErrorInfo so sentinels survive the process boundary.
var sentinelReasons = []struct {
	err    error
	reason string
	code   codes.Code
}{
	{cloud.ErrNodeNotFound, "CLOUD_NODE_NOT_FOUND", codes.NotFound},
	{cloud.ErrLimitReached, "CLOUD_LIMIT_REACHED", codes.ResourceExhausted},
	{cloud.ErrSubnetFull, "CLOUD_SUBNET_FULL", codes.ResourceExhausted},
	{cloud.ErrThrottled, "CLOUD_THROTTLED", codes.ResourceExhausted},
	{cloud.ErrUnsupported, "CLOUD_UNSUPPORTED", codes.Unimplemented},
	{cloud.ErrNoFreePrefix, "CLOUD_NO_FREE_PREFIX", codes.ResourceExhausted},
	{errPoolRefUnknown, "POOL_REF_UNKNOWN", codes.FailedPrecondition}, // before ErrInvalid, which it wraps
	{wire.ErrInvalid, "INVALID_MESSAGE", codes.InvalidArgument},
	{ErrPluginPanic, "PANIC", codes.Internal},
}

// toStatus turns an implementation's error into a gRPC status error (plugin side).
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Unknown
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	for _, s := range sentinelReasons {
		if errors.Is(err, s.err) {
			st, derr := status.New(s.code, err.Error()).WithDetails(&errdetails.ErrorInfo{Reason: s.reason, Domain: errorDomain})
			if derr == nil {
				return st.Err()
			}
			break
		}
	}
	return status.Error(code, err.Error())
}

// remoteError is an error that came back from a plugin, with the sentinel it stands for.
type remoteError struct {
	op       string
	msg      string
	sentinel error
	kind     error // ErrPlugin, ErrTransport or a context error
}

func (e *remoteError) Error() string { return e.op + ": " + e.msg }

func (e *remoteError) Unwrap() []error {
	if e.sentinel != nil {
		return []error{e.kind, e.sentinel}
	}
	return []error{e.kind}
}

// fromStatus turns a gRPC call error into a Go error (host side). op names the call,
// e.g. "pool-policy SelectPodPools".
func fromStatus(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w: %w", op, ErrTransport, err)
	}
	re := &remoteError{op: op, msg: st.Message(), kind: ErrPlugin}
	switch st.Code() {
	case codes.DeadlineExceeded:
		re.kind = context.DeadlineExceeded
		if ctx.Err() != nil {
			re.msg = "deadline exceeded waiting for plugin: " + st.Message()
		}
	case codes.Canceled:
		re.kind = context.Canceled
	case codes.Unavailable:
		// Unavailable is what gRPC reports for a dead connection; plugins should not use it.
		re.kind = ErrTransport
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.Domain != errorDomain {
			continue
		}
		for _, s := range sentinelReasons {
			if s.reason == info.Reason {
				re.sentinel = s.err
			}
		}
	}
	return re
}
