package eni

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// Metrics are the engine's Prometheus metrics. A nil *Metrics is valid and records nothing.
type Metrics struct {
	passes        prometheus.Counter
	passDuration  prometheus.Histogram
	timeToAddress prometheus.Histogram
	released      prometheus.Counter
	errors        *prometheus.CounterVec
	nodes         *prometheus.GaugeVec
}

// NewMetrics creates the engine's metrics and registers them on reg (nil: not registered).
//
//	allot_eni_passes_total                      passes run
//	allot_eni_pass_duration_seconds             time of one pass
//	allot_eni_time_to_address_seconds           from a node's need appearing to its being met
//	allot_eni_addresses_released_total          addresses unassigned after the handshake
//	allot_eni_errors_total{op,cause}            failed cloud calls (cause: throttled, limit, subnet-full, other)
//	allot_eni_nodes{state}                      nodes by state after the last pass (need, excess, ok)
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		passes: prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_eni_passes_total", Help: "ENI resync passes run."}),
		passDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "allot_eni_pass_duration_seconds",
			Help: "Duration of one ENI resync pass.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		timeToAddress: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "allot_eni_time_to_address_seconds",
			Help: "Time from a node needing addresses to the need being met.", Buckets: prometheus.ExponentialBuckets(0.01, 3, 12)}),
		released: prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_eni_addresses_released_total", Help: "Addresses unassigned after the release handshake."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_eni_errors_total", Help: "Failed cloud calls by operation and cause."},
			[]string{"op", "cause"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_eni_nodes", Help: "Nodes by state after the last pass."}, []string{"state"}),
	}
	if reg != nil {
		reg.MustRegister(m.passes, m.passDuration, m.timeToAddress, m.released, m.errors, m.nodes)
	}
	return m
}

func (m *Metrics) observePass(d time.Duration, items []*queued) {
	if m == nil {
		return
	}
	m.passes.Inc()
	m.passDuration.Observe(d.Seconds())
	var need, excess, ok float64
	for _, q := range items {
		switch st := q.n.status; {
		case st.Needed > 0:
			need++
		case st.Excess > 0:
			excess++
		default:
			ok++
		}
	}
	m.nodes.WithLabelValues("need").Set(need)
	m.nodes.WithLabelValues("excess").Set(excess)
	m.nodes.WithLabelValues("ok").Set(ok)
}

func (m *Metrics) observeTimeToAddress(d time.Duration) {
	if m != nil {
		m.timeToAddress.Observe(d.Seconds())
	}
}

func (m *Metrics) countReleased(n int) {
	if m != nil && n > 0 {
		m.released.Add(float64(n))
	}
}

func (m *Metrics) countError(op string, err error) {
	if m == nil {
		return
	}
	cause := "other"
	switch {
	case errors.Is(err, cloud.ErrThrottled):
		cause = "throttled"
	case errors.Is(err, cloud.ErrLimitReached):
		cause = "limit"
	case errors.Is(err, cloud.ErrSubnetFull):
		cause = "subnet-full"
	}
	m.errors.WithLabelValues(op, cause).Inc()
}
