package k8s

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// WriteRefused says whether a write that failed with err was certainly not applied by the
// API server: it answered with a status that it gives before (or instead of) storing the
// object. Conflict (409) is the resourceVersion precondition failing in the storage layer;
// NotFound, Invalid (422), BadRequest, Forbidden (authorization or admission), Unauthorized,
// TooManyRequests (429: API Priority and Fairness refuses before the handler runs) and the
// request-shape errors are all returned before anything is stored.
//
// Everything else is ambiguous and false: a transport error (timeout, EOF, connection reset),
// the client's context ending after the request was sent, a 500, or a 504 / StatusReasonTimeout
// ("the request did not complete within the allowed duration", sent when the handler's
// deadline passed while the storage write may still complete: see the Kubernetes API
// concepts documentation on timeouts). Whoever handed something out for such a write must
// keep it reserved until a read shows whether the write landed.
func WriteRefused(err error) bool {
	if err == nil {
		return false
	}
	for _, refused := range []func(error) bool{
		apierrors.IsConflict, apierrors.IsNotFound, apierrors.IsInvalid, apierrors.IsBadRequest,
		apierrors.IsForbidden, apierrors.IsUnauthorized, apierrors.IsTooManyRequests,
		apierrors.IsAlreadyExists, apierrors.IsMethodNotSupported, apierrors.IsNotAcceptable,
		apierrors.IsUnsupportedMediaType, apierrors.IsRequestEntityTooLargeError,
	} {
		if refused(err) {
			return true
		}
	}
	return false
}
