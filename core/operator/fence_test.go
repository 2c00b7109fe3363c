package operator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// lockStub is a resourcelock.Interface whose writes fail while err is set.
type lockStub struct {
	resourcelock.Interface
	err error
}

func (l *lockStub) Create(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *lockStub) Update(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *lockStub) Describe() string                                                { return "kube-system/allot-operator" }

// TestFencerCheck: the fence passes from an accepted renewal naming this replica until
// LeaseDuration minus half a RenewDeadline after it was sent; failed renewals do not extend
// it, a release ends it at once.
func TestFencerCheck(t *testing.T) {
	now := time.Unix(1000, 0)
	lock := &lockStub{}
	f := newFencer(&Options{Identity: "a", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second},
		lock, &metrics{fenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "fenced"})})
	f.now = func() time.Time { return now }
	ctx := context.Background()
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "a"}
	check := func(step string, wantOK bool) {
		t.Helper()
		if err := f.check(ctx); (err == nil) != wantOK {
			t.Errorf("%s: check = %v; want ok %v", step, err, wantOK)
		} else if err != nil && !errors.Is(err, errFenced) {
			t.Errorf("%s: %v is not errFenced", step, err)
		}
	}
	check("never held", false)
	if err := f.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	check("just acquired", true)
	now = now.Add(9 * time.Second)
	check("9s later", true)
	now = now.Add(time.Second)
	check("10s later (15s - 10s/2)", false)

	if err := f.Update(ctx, mine); err != nil {
		t.Fatal(err)
	}
	check("renewed", true)
	lock.err = errors.New("timeout")
	now = now.Add(5 * time.Second)
	_ = f.Update(ctx, mine)
	check("a failed renewal 5s later", true)
	now = now.Add(5 * time.Second)
	_ = f.Update(ctx, mine)
	check("another failed renewal, 10s after the last good one", false)

	lock.err = nil
	if err := f.Update(ctx, mine); err != nil {
		t.Fatal(err)
	}
	check("renewed again", true)
	if err := f.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil {
		t.Fatal(err)
	}
	check("released", false)
}
