package operator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// errFenced: this replica may no longer hand anything out in this term.
var errFenced = errors.New("not the leader")

// fencer guards the writes that hand something out (fence.check). It is the term's Lease
// lock itself: leader election renews the Lease through it, and it remembers when the last
// renewal that kept this replica the holder was sent.
type fencer struct {
	resourcelock.Interface
	identity                     string
	leaseDuration, renewDeadline time.Duration
	fenced                       prometheus.Counter
	now                          func() time.Time

	mu      sync.Mutex
	renewed time.Time // when the last successful write naming us holder was sent; zero: none
}

func newFencer(o *Options, lock resourcelock.Interface, m *metrics) *fencer {
	return &fencer{Interface: lock, identity: o.Identity, leaseDuration: o.LeaseDuration,
		renewDeadline: o.RenewDeadline, fenced: m.fenced, now: time.Now}
}

// Create takes the Lease (leader election's acquire of an absent Lease).
func (f *fencer) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := f.now()
	err := f.Interface.Create(ctx, ler)
	f.record(sent, ler, err)
	return err
}

// Update acquires, renews or releases the Lease.
func (f *fencer) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := f.now()
	err := f.Interface.Update(ctx, ler)
	f.record(sent, ler, err)
	return err
}

// record notes a write of the Lease sent at sent: one naming this replica that the API server
// accepted starts a new lease period; a release (another holder, or none) ends ours at once.
// A failed write changes nothing: the period of the last one runs out by itself.
func (f *fencer) record(sent time.Time, ler resourcelock.LeaderElectionRecord, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case ler.HolderIdentity != f.identity:
		f.renewed = time.Time{}
	case err == nil:
		f.renewed = sent
	}
}

// check checks that this replica still holds the Lease with time to spare before a write
// that hands out blocks or pod CIDRs.
//
// Lease-based election gives no mutual exclusion by itself (the client-go leaderelection
// package says as much: it relies on timing and has no fencing). A replica that lost the
// Lease (cut off from the API server past RenewDeadline) learns it only when its renewal
// gives up, and with ReleaseOnCancel after one more release attempt; when its connection
// comes back in that window, its controllers would write from a state that misses
// everything the new leader handed out, and two nodes would get the same block.
//
// The check needs no request of its own (a live read of the Lease before every write cost
// the API server one GET per node at scale). Another replica takes the Lease only after it
// has seen it unchanged for LeaseDuration, and it sees our last renewal no earlier than we
// sent it; so until LeaseDuration after the send of our last accepted renewal, no other
// replica can hold it. Half a RenewDeadline is kept for the write itself (as clocks only
// measure intervals here, on one machine each, skew does not matter; rate drift is bounded
// by that margin). What this no longer sees at once is the Lease taken by force (deleted or
// edited by hand): the next renewal, RetryPeriod later, fails on it and ends the term.
func (f *fencer) check(context.Context) error {
	f.mu.Lock()
	renewed := f.renewed
	f.mu.Unlock()
	if renewed.IsZero() {
		f.fenced.Inc()
		return fmt.Errorf("%w: Lease %s not held", errFenced, f.Describe())
	}
	if left := renewed.Add(f.leaseDuration - f.renewDeadline/2).Sub(f.now()); left <= 0 {
		f.fenced.Inc()
		return fmt.Errorf("%w: Lease %s last renewed %v ago", errFenced, f.Describe(), f.now().Sub(renewed).Round(time.Millisecond))
	}
	return nil
}
