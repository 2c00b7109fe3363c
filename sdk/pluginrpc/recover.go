package pluginrpc

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"

	"google.golang.org/grpc"
)

// recoverUnary turns a panic in a handler into an ErrPluginPanic error, so one bad request
// costs one error, not the plugin process (and every call in flight with it). The stack goes
// to stderr, which the host logs.
func recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, panicked(info.FullMethod, r)
		}
	}()
	return handler(ctx, req)
}

// panicked logs a handler's panic r with its stack and returns the error the call answers.
func panicked(method string, r any) error {
	fmt.Fprintf(os.Stderr, "panic in %s: %v\n%s", method, r, debug.Stack())
	return toStatus(fmt.Errorf("%w in %s: %v", ErrPluginPanic, method, r))
}

// recoverUnaryPC identifies recoverUnary among interceptors: a handler given it as the
// server's only interceptor may recover inline instead (see fastSelectPodPoolsHandler).
var recoverUnaryPC = reflect.ValueOf(recoverUnary).Pointer()

func isRecoverUnary(i grpc.UnaryServerInterceptor) bool {
	return reflect.ValueOf(i).Pointer() == recoverUnaryPC
}
