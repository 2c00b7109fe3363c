package operator

import (
	"context"
	"fmt"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// poolCreator is the leader hook of cluster.autoCreatePools: each term, before any reconcile,
// it creates the configured IPPools that do not exist.
type poolCreator struct {
	client client.Client
	log    *slog.Logger
	pools  []allotv1.IPPool
}

// Rebuild creates the configured IPPools that do not exist (Cilium's
// autoCreateCiliumPodIPPools: "created if it does not exist; existing pools are not
// modified"). Create is the test: AlreadyExists leaves the pool a user may have edited
// untouched, and no read-modify-write can overwrite it.
func (c poolCreator) Rebuild(ctx context.Context) error {
	for _, p := range c.pools {
		obj := &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: p.Name}, Spec: *p.Spec.DeepCopy()}
		err := c.client.Create(ctx, obj)
		switch {
		case err == nil:
			c.log.Info("IPPool created from the configuration (autoCreatePools)", "pool", p.Name)
		case apierrors.IsAlreadyExists(err):
			c.log.Debug("IPPool of autoCreatePools exists; left as it is", "pool", p.Name)
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
			// The API server refuses it for good (its rules, RBAC): say so, do not retry.
			c.log.Error("IPPool of autoCreatePools refused", "pool", p.Name, "err", err)
		default:
			return fmt.Errorf("create IPPool %s (autoCreatePools): %w", p.Name, err)
		}
	}
	return nil
}
