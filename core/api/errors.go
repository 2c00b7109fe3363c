package api

import (
	"errors"
	"fmt"
	"strings"
)

// ErrorCode classifies an API error so that allot-cni can map it to a CNI error code and
// allotctl can print it plainly.
type ErrorCode string

const (
	// CodeInvalid: the request is malformed; Field names the offending field.
	CodeInvalid ErrorCode = "invalid"
	// CodeExhausted: no candidate pool has a free address.
	CodeExhausted ErrorCode = "exhausted"
	// CodeConflict: a requested specific address is held by another owner.
	CodeConflict ErrorCode = "conflict"
	// CodeNotFound: the owner holds nothing (CHECK), or something an ADD depends on is gone:
	// the pod in the API server (agent mode), or the family in the pool the policy chose. A
	// pool named in the CNI config that does not exist is CodeNoPool (the policy's NoFit).
	CodeNotFound ErrorCode = "not_found"
	// CodeNoPool: the pool policy found no pool for this request.
	CodeNoPool ErrorCode = "no_pool"
	// CodeUnavailable: the daemon cannot serve now (starting, shutting down, store failure);
	// retrying later may succeed.
	CodeUnavailable ErrorCode = "unavailable"
	// CodeInternal: a bug or an unexpected failure.
	CodeInternal ErrorCode = "internal"
	// CodePermissionDenied: the caller may not use the API: its uid is not root (or allotd's
	// own) and it is not in the socket's group (socketGroup). The connection is closed.
	CodePermissionDenied ErrorCode = "permission_denied"
)

// Error is the body of every non-2xx answer and the error type the client returns.
type Error struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
	// Field is the request field at fault, for CodeInvalid (e.g. "ips[1]").
	Field string `json:"field,omitempty"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Message)
	}
	return e.Message
}

// Errorf builds an *Error.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidField builds a CodeInvalid error naming field.
func InvalidField(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err if it is (or wraps) an *Error, else CodeInternal.
func CodeOf(err error) ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// busyPrefix starts the message of every Busy error; IsBusy looks for it, since the code
// (unavailable) is shared with other transient failures and older clients know only codes.
const busyPrefix = "allotd busy: "

// Busy is the error of a request the daemon refused because inFlight requests already run
// (and waiting more wait for a slot). Its code is CodeUnavailable, so allot-cni answers
// "try again later" and a runtime retries, as for any transient failure.
func Busy(inFlight, waiting int) *Error {
	if waiting > 0 {
		return Errorf(CodeUnavailable, "%s%d requests in flight and %d waiting, retry", busyPrefix, inFlight, waiting)
	}
	return Errorf(CodeUnavailable, "%s%d requests in flight, retry", busyPrefix, inFlight)
}

// IsBusy reports whether err is (or wraps, or quotes) a Busy refusal.
func IsBusy(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Code == CodeUnavailable && strings.HasPrefix(e.Message, busyPrefix)
	}
	return err != nil && strings.Contains(err.Error(), busyPrefix)
}
