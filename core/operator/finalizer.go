package operator

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// ensureFinalizer puts finalizer f on obj (a pool or config the operator hands addresses
// out of) before anything is handed out of it, so it cannot disappear while in use. A
// terminating object gets none. done reports that the reconcile should return res, err now:
// the write conflicted (retry shortly with the fresh object) or failed.
func ensureFinalizer(ctx context.Context, c client.Client, obj client.Object, f, kind string) (res reconcile.Result, done bool, err error) {
	if obj.GetDeletionTimestamp() != nil || controllerutil.ContainsFinalizer(obj, f) {
		return reconcile.Result{}, false, nil
	}
	controllerutil.AddFinalizer(obj, f)
	if err := c.Update(ctx, obj); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, true, nil
		}
		return reconcile.Result{}, true, fmt.Errorf("add finalizer to %s %s: %w", kind, obj.GetName(), err)
	}
	return reconcile.Result{}, false, nil
}
