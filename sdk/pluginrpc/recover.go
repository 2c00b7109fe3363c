package pluginrpc

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"

	"google.golang.org/grpc"
)

// recoverUnary turns a panic in a handler into an ErrPluginPanic error, so one bad request
// costs one error, not the plugin process (and every call in flight with it). The stack goes
// to stderr, which the host logs.
func recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "panic in %s: %v\n%s", info.FullMethod, r, debug.Stack())
			resp, err = nil, toStatus(fmt.Errorf("%w in %s: %v", ErrPluginPanic, info.FullMethod, r))
		}
	}()
	return handler(ctx, req)
}
