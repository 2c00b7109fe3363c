package operator

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// autoCreatePools creates the configured IPPools that do not exist (Cilium's
// autoCreateCiliumPodIPPools: "created if it does not exist; existing pools are not
// modified"). Create is the test: AlreadyExists leaves the pool a user may have edited
// untouched, and no read-modify-write can overwrite it.
func (op *operator) autoCreatePools(ctx context.Context) error {
	for _, p := range op.opts.AutoCreatePools {
		obj := &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: p.Name}, Spec: *p.Spec.DeepCopy()}
		err := op.client.Create(ctx, obj)
		switch {
		case err == nil:
			op.log.Info("IPPool created from the configuration (autoCreatePools)", "pool", p.Name)
		case apierrors.IsAlreadyExists(err):
			op.log.Debug("IPPool of autoCreatePools exists; left as it is", "pool", p.Name)
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
			// The API server refuses it for good (its rules, RBAC): say so, do not retry.
			op.log.Error("IPPool of autoCreatePools refused", "pool", p.Name, "err", err)
		default:
			return fmt.Errorf("create IPPool %s (autoCreatePools): %w", p.Name, err)
		}
	}
	return nil
}
