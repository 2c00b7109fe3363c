package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// errFenced: this replica may no longer hand anything out in this term.
var errFenced = errors.New("not the leader")

// fencer guards the writes that hand something out (fence.check).
type fencer struct {
	reader                       client.Reader // the API server itself
	lease                        types.NamespacedName
	identity                     string
	leaseDuration, renewDeadline time.Duration
	fenced                       prometheus.Counter
}

func newFencer(o *Options, reader client.Reader, m *metrics) *fencer {
	return &fencer{reader: reader, lease: types.NamespacedName{Namespace: o.Namespace, Name: o.LeaseName},
		identity: o.Identity, leaseDuration: o.LeaseDuration, renewDeadline: o.RenewDeadline, fenced: m.fenced}
}

// check checks, with a live read of the Lease, that this replica still holds it with time to
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
func (f *fencer) check(ctx context.Context) error {
	var l coordinationv1.Lease
	if err := f.reader.Get(ctx, f.lease, &l); err != nil {
		return fmt.Errorf("%w: reading Lease %s/%s: %v", errFenced, f.lease.Namespace, f.lease.Name, err)
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder != f.identity {
		f.fenced.Inc()
		return fmt.Errorf("%w: Lease %s/%s is held by %q", errFenced, f.lease.Namespace, f.lease.Name, holder)
	}
	if l.Spec.RenewTime == nil {
		f.fenced.Inc()
		return fmt.Errorf("%w: Lease %s/%s has no renew time", errFenced, f.lease.Namespace, f.lease.Name)
	}
	// renewTime is written by this replica's clock, read against the same clock. Another
	// replica may take the Lease LeaseDuration after it last saw it change; keep half a
	// RenewDeadline for the write itself.
	if left := time.Until(l.Spec.RenewTime.Add(f.leaseDuration - f.renewDeadline/2)); left <= 0 {
		f.fenced.Inc()
		return fmt.Errorf("%w: Lease %s/%s last renewed %v ago", errFenced, f.lease.Namespace, f.lease.Name, time.Since(l.Spec.RenewTime.Time).Round(time.Millisecond))
	}
	return nil
}
