package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestWriteRefused: the statuses the API server gives before storing anything are refusals;
// timeouts, 5xx and transport errors are ambiguous (the write may have landed).
func TestWriteRefused(t *testing.T) {
	gr := schema.GroupResource{Group: "allot.io", Resource: "allotnodes"}
	put := func(err error) error { return &url.Error{Op: "Put", URL: "https://127.0.0.1/x", Err: err} }
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"conflict", apierrors.NewConflict(gr, "n", errors.New("rv")), true},
		{"conflict wrapped", fmt.Errorf("update: %w", apierrors.NewConflict(gr, "n", errors.New("rv"))), true},
		{"not found", apierrors.NewNotFound(gr, "n"), true},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Group: "allot.io", Kind: "AllotNode"}, "n", nil), true},
		{"bad request", apierrors.NewBadRequest("x"), true},
		{"forbidden", apierrors.NewForbidden(gr, "n", errors.New("webhook denied")), true},
		{"unauthorized", apierrors.NewUnauthorized("x"), true},
		{"too many requests (APF)", apierrors.NewTooManyRequests("x", 1), true},
		{"504 timeout", apierrors.NewTimeoutError("the request did not complete within the allowed duration", 0), false},
		{"500 server timeout", apierrors.NewServerTimeout(gr, "update", 1), false},
		{"500 internal", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), false},
		{"503", apierrors.NewServiceUnavailable("x"), false},
		{"EOF", put(io.EOF), false},
		{"unexpected EOF", put(io.ErrUnexpectedEOF), false},
		{"connection reset", put(syscall.ECONNRESET), false},
		{"client deadline", put(context.DeadlineExceeded), false},
		{"canceled", fmt.Errorf("update: %w", context.Canceled), false},
	} {
		if got := WriteRefused(c.err); got != c.want {
			t.Errorf("%s: WriteRefused(%v) = %v; want %v", c.name, c.err, got, c.want)
		}
	}
}
