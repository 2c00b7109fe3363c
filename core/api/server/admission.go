package server

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits bound the requests the server works on at once, over every connection and both
// protocols. Without them a burst (a node starting hundreds of pods, a runtime retrying in a
// loop) piles up goroutines and store writes until every caller times out at once; with
// them the excess waits a bounded time and then hears "busy, retry" while there is still
// time to retry within the CNI timeout.
type Limits struct {
	// MaxInFlight is how many requests run at once; 0 means no limit.
	MaxInFlight int
	// MaxQueued is how many requests may wait for a slot; beyond it a request is refused at
	// once.
	MaxQueued int
	// QueueWait is how long a request waits for a slot before it is refused.
	QueueWait time.Duration
}

// DefaultLimits are allotd's defaults (config api.*): 128 requests at once is well above
// what a node's runtime sends (kubelet starts pods a few at a time) and enough for the
// store to batch many commits into one fsync; a 2 s wait leaves most of the CNI timeout
// (30 s by default) to the runtime's retry.
var DefaultLimits = Limits{MaxInFlight: 128, MaxQueued: 1024, QueueWait: 2 * time.Second}

// Metrics are the server's Prometheus metrics.
type Metrics struct {
	inFlight  prometheus.Gauge
	queued    prometheus.Gauge
	rejected  *prometheus.CounterVec
	queueWait prometheus.Histogram
}

// Reasons a request is refused as busy (label reason of allot_api_requests_rejected_total).
const (
	RejectQueueFull   = "queue_full"
	RejectWaitTimeout = "wait_timeout"
)

// NewMetrics creates the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_api_requests_in_flight", Help: "Local API requests being served.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_api_requests_queued", Help: "Local API requests waiting for a slot (api.maxInFlight).",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_api_requests_rejected_total",
			Help: "Local API requests refused as busy: the queue was full (queue_full) or no slot came within api.queueWait (wait_timeout).",
		}, []string{"reason"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "allot_api_queue_wait_seconds",
			Help:    "Time a local API request waited for a slot, for requests that had to wait.",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1, .25, .5, 1, 2, 5},
		}),
	}
	for _, r := range []string{RejectQueueFull, RejectWaitTimeout} {
		m.rejected.WithLabelValues(r) // present at 0, so a rate() sees the first refusal
	}
	if reg != nil {
		reg.MustRegister(m.inFlight, m.queued, m.rejected, m.queueWait)
	}
	return m
}

// limiter is the admission control of Limits: a counting semaphore with a bounded wait.
type limiter struct {
	lim    Limits
	slots  chan struct{}
	queued atomic.Int64
	m      *Metrics
}

func newLimiter(l Limits, m *Metrics) *limiter {
	if l.MaxInFlight <= 0 {
		return nil
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	return &limiter{lim: l, slots: make(chan struct{}, l.MaxInFlight), m: m}
}

// acquire takes a slot, waiting at most QueueWait, and returns the function that gives it
// back. Refusals are api.Busy errors (code unavailable: allot-cni answers "try again
// later"), returned without further delay. A nil limiter admits everything.
func (l *limiter) acquire(ctx context.Context) (func(), error) {
	if l == nil {
		return func() {}, nil
	}
	select {
	case l.slots <- struct{}{}:
		l.m.inFlight.Inc()
		return l.release, nil
	default:
	}
	if n := l.queued.Add(1); n > int64(l.lim.MaxQueued) {
		l.queued.Add(-1)
		l.m.rejected.WithLabelValues(RejectQueueFull).Inc()
		return nil, api.Busy(len(l.slots), int(n-1))
	}
	l.m.queued.Inc()
	defer func() { l.queued.Add(-1); l.m.queued.Dec() }()
	begin := time.Now()
	t := time.NewTimer(l.lim.QueueWait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		l.m.queueWait.Observe(time.Since(begin).Seconds())
		l.m.inFlight.Inc()
		return l.release, nil
	case <-t.C:
		l.m.queueWait.Observe(time.Since(begin).Seconds())
		l.m.rejected.WithLabelValues(RejectWaitTimeout).Inc()
		return nil, api.Busy(len(l.slots), int(l.queued.Load()-1))
	case <-ctx.Done():
		// The caller is gone (allot-cni closed the connection): nobody reads the answer.
		return nil, api.Errorf(api.CodeUnavailable, "request abandoned while waiting for a slot: %v", ctx.Err())
	}
}

func (l *limiter) release() {
	l.m.inFlight.Dec()
	<-l.slots
}
