package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// errFenced: this replica may no longer hand anything out in this term.
var errFenced = errors.New("not the leader")

// fence checks, with a live read of the Lease, that this replica still holds it with time to
// spare before a write that hands out blocks or pod CIDRs.
//
// Lease-based election gives no mutual exclusion by itself (the client-go leaderelection
// package says as much: it relies on timing and has no fencing). A replica that lost the
// Lease (cut off from the API server past RenewDeadline) learns it only when its renewal
// gives up, and with ReleaseOnCancel after one more release attempt; when its connection
// comes back in that window, its controllers write from a state that misses everything the
// new leader handed out, and two nodes get the same block. The live read closes that window:
// a new leader has taken the Lease, or our renewal is too old for another replica not to
// take it while our write is in flight.
func (op *operator) fence(ctx context.Context) error {
	var l coordinationv1.Lease
	if err := op.reader.Get(ctx, types.NamespacedName{Namespace: op.opts.Namespace, Name: op.opts.LeaseName}, &l); err != nil {
		return fmt.Errorf("%w: reading Lease %s/%s: %v", errFenced, op.opts.Namespace, op.opts.LeaseName, err)
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder != op.opts.Identity {
		op.m.fenced.Inc()
		return fmt.Errorf("%w: Lease %s/%s is held by %q", errFenced, op.opts.Namespace, op.opts.LeaseName, holder)
	}
	if l.Spec.RenewTime == nil {
		op.m.fenced.Inc()
		return fmt.Errorf("%w: Lease %s/%s has no renew time", errFenced, op.opts.Namespace, op.opts.LeaseName)
	}
	// renewTime is written by this replica's clock, read against the same clock. Another
	// replica may take the Lease LeaseDuration after it last saw it change; keep half a
	// RenewDeadline for the write itself.
	if left := time.Until(l.Spec.RenewTime.Add(op.opts.LeaseDuration - op.opts.RenewDeadline/2)); left <= 0 {
		op.m.fenced.Inc()
		return fmt.Errorf("%w: Lease %s/%s last renewed %v ago", errFenced, op.opts.Namespace, op.opts.LeaseName, time.Since(l.Spec.RenewTime.Time).Round(time.Millisecond))
	}
	return nil
}
