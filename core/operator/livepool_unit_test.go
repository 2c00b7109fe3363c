package operator

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

func TestMissingPools(t *testing.T) {
	rq := func(pool string, v4, v6 int64) allotv1.PoolRequest {
		return allotv1.PoolRequest{Pool: pool, Needed: allotv1.AddressCounts{IPv4: v4, IPv6: v6}}
	}
	cached := map[string]bool{"default": true}
	tests := []struct {
		name string
		reqs []allotv1.PoolRequest
		want []string
	}{
		{"all cached", []allotv1.PoolRequest{rq("default", 10, 0)}, nil},
		{"one missing", []allotv1.PoolRequest{rq("default", 10, 0), rq("fresh", 0, 4)}, []string{"fresh"}},
		{"nothing needed: not read", []allotv1.PoolRequest{rq("fresh", 0, 0)}, nil},
		{"named twice: read once", []allotv1.PoolRequest{rq("b", 1, 0), rq("a", 1, 0), rq("b", 0, 1)}, []string{"b", "a"}},
	}
	for _, tc := range tests {
		if got := missingPools(tc.reqs, cached); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// poolReader is a client.Reader of IPPools that counts its GETs; gate, when set, holds each
// GET until it is closed.
type poolReader struct {
	client.Reader
	mu    sync.Mutex
	pools map[string]allotv1.IPPool
	err   error
	gets  int
	gate  chan struct{}
}

func (r *poolReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.mu.Lock()
	r.gets++
	gate, err := r.gate, r.err
	p, ok := r.pools[key.Name]
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	switch {
	case err != nil:
		return err
	case !ok:
		return apierrors.NewNotFound(schema.GroupResource{Group: "allot.io", Resource: "ippools"}, key.Name)
	}
	*obj.(*allotv1.IPPool) = p
	return nil
}

func (r *poolReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets
}

// TestLivePools: a pool the API server has is returned, one it lacks is nil; within the
// window neither is read again, after it both are; a failed read counts and answers nil (the
// request is reported unmet, as the cache says).
func TestLivePools(t *testing.T) {
	reads := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reads_total", Help: "h"}, []string{"result"})
	rd := &poolReader{pools: map[string]allotv1.IPPool{"fresh": {ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}}}
	l := newLivePools(rd, reads, slog.New(slog.DiscardHandler))
	now := time.Unix(1000, 0)
	l.last.Now = func() time.Time { return now }
	ctx := context.Background()
	get := func(name string, wantFound bool, wantGets int) {
		t.Helper()
		p := l.get(ctx, name)
		if (p != nil) != wantFound || (p != nil && p.Name != name) {
			t.Fatalf("get %s: %+v; want found=%v", name, p, wantFound)
		}
		if n := rd.count(); n != wantGets {
			t.Fatalf("get %s: %d GETs in all, want %d", name, n, wantGets)
		}
	}
	get("fresh", true, 1)
	get("nosuch", false, 2)
	now = now.Add(l.last.Window / 2)
	get("fresh", true, 2)
	get("nosuch", false, 2)
	now = now.Add(l.last.Window)
	get("nosuch", false, 3)
	get("fresh", true, 4)
	if f, n := testutil.ToFloat64(reads.WithLabelValues("found")), testutil.ToFloat64(reads.WithLabelValues("none")); f != 2 || n != 2 {
		t.Fatalf("reads: found %v none %v, want 2 and 2", f, n)
	}

	now = now.Add(l.last.Window)
	rd.err = errors.New("connection refused")
	if p := l.get(ctx, "fresh"); p != nil || testutil.ToFloat64(reads.WithLabelValues("error")) != 1 {
		t.Fatalf("a failed read: %+v (want nil: reported unmet, as the cache says), %v errors counted", p, testutil.ToFloat64(reads.WithLabelValues("error")))
	}
	rd.err = nil

	if n := l.last.Len(); n != 1 {
		t.Fatalf("names remembered: %d, want only fresh (nosuch's read is older than the window)", n)
	}
}

// TestLivePoolsShareRead: reconciles that miss a pool while its read is in flight wait for
// that read rather than making their own.
func TestLivePoolsShareRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reads := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reads_total", Help: "h"}, []string{"result"})
		rd := &poolReader{pools: map[string]allotv1.IPPool{"fresh": {ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}}, gate: make(chan struct{})}
		l := newLivePools(rd, reads, slog.New(slog.DiscardHandler))
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if p := l.get(context.Background(), "fresh"); p == nil {
					t.Error("shared read: no pool")
				}
			})
		}
		synctest.Wait() // one GET held at the gate, the others waiting for it
		if n := rd.count(); n != 1 {
			t.Fatalf("%d GETs in flight for 8 reconciles missing the pool at once, want 1", n)
		}
		close(rd.gate)
		wg.Wait()
		if n := rd.count(); n != 1 {
			t.Fatalf("%d GETs for 8 reconciles missing the pool at once, want 1", n)
		}
	})
}
