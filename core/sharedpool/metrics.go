package sharedpool

import (
	"sync/atomic"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// metrics are the allocator's Prometheus metrics, plus plain counters for Stats.
type metrics struct {
	requests    *prometheus.HistogramVec
	allocated   *prometheus.CounterVec
	released    *prometheus.CounterVec
	conflicts   *prometheus.CounterVec
	apiRequests *prometheus.CounterVec
	apiLatency  *prometheus.HistogramVec

	nAPI, nConflicts, nAllocated, nReused atomic.Int64
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "allot_shared_request_duration_seconds",
			Help:    "Time to serve a CNI request for a shared-pool network, by operation and result code.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"op", "code"}),
		allocated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_shared_addresses_allocated_total",
			Help: "Addresses of shared pools claimed by this agent (new claims), by pool.",
		}, []string{"pool"}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_shared_addresses_released_total",
			Help: "Claims of shared pools deleted by this agent (CNI DEL and GC), by pool.",
		}, []string{"pool"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_shared_conflicts_total",
			Help: "Claim creates refused because another agent held the address first (retried with another address), by pool.",
		}, []string{"pool"}),
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_shared_api_requests_total",
			Help: "API server requests made by the shared-pool allocator, by verb, kind and result (ok, conflict, exists, not_found, error).",
		}, []string{"verb", "kind", "result"}),
		apiLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "allot_shared_api_request_duration_seconds",
			Help:    "Latency of the shared-pool allocator's API server requests, by verb and kind.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5},
		}, []string{"verb", "kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.allocated, m.released, m.conflicts, m.apiRequests, m.apiLatency)
	}
	return m
}

func (m *metrics) observe(op string, begin time.Time, err error) {
	code := "ok"
	if err != nil {
		code = string(api.CodeOf(err))
	}
	m.requests.WithLabelValues(op, code).Observe(time.Since(begin).Seconds())
}

func (m *metrics) api(verb, kind string, begin time.Time, err error) {
	m.nAPI.Add(1)
	m.apiLatency.WithLabelValues(verb, kind).Observe(time.Since(begin).Seconds())
	m.apiRequests.WithLabelValues(verb, kind, apiResult(err)).Inc()
}

func apiResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsAlreadyExists(err):
		return "exists"
	case apierrors.IsNotFound(err):
		return "not_found"
	}
	return "error"
}

// Stats are running totals of one allocator (benchmarks, tests).
type Stats struct {
	// APIRequests is every request this allocator sent to the API server.
	APIRequests int64
	// Conflicts is the claim creates that lost to another agent and were retried.
	Conflicts int64
	// Allocated is the addresses newly claimed; Reused the ADDs answered from claims the
	// pod already held (repeats, recovery, StatefulSet takeover).
	Allocated int64
	Reused    int64
}

// Stats returns the allocator's running totals.
func (a *Allocator) Stats() Stats {
	return Stats{
		APIRequests: a.m.nAPI.Load(),
		Conflicts:   a.m.nConflicts.Load(),
		Allocated:   a.m.nAllocated.Load(),
		Reused:      a.m.nReused.Load(),
	}
}
