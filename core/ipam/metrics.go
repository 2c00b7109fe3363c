package ipam

import (
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the manager's Prometheus metrics.
type Metrics struct {
	requests   *prometheus.HistogramVec
	allocs     *prometheus.CounterVec
	releases   *prometheus.CounterVec
	exhaustion *prometheus.CounterVec
	usable     *prometheus.GaugeVec
	used       *prometheus.GaugeVec
	waiting    *prometheus.GaugeVec
	oldestWait prometheus.Gauge
	storeErrs  *prometheus.CounterVec
	timeouts   prometheus.Counter
	// allocateOK and releaseOK are requests' series for their usual outcome, looked up once.
	allocateOK, releaseOK prometheus.Observer
}

// poolMetrics are one pool's series, looked up by their labels once (pool.metrics): each
// lookup hashes the labels, and an ADD sets two gauges and a counter under the manager's lock.
type poolMetrics struct {
	usable, used prometheus.Gauge
	allocs       prometheus.Counter
}

func (m *Metrics) forPool(name, family string) *poolMetrics {
	return &poolMetrics{usable: m.usable.WithLabelValues(name, family), used: m.used.WithLabelValues(name, family),
		allocs: m.allocs.WithLabelValues(name)}
}

func (pm *poolMetrics) set(usable, used uint64) {
	pm.usable.Set(float64(usable))
	pm.used.Set(float64(used))
}

// NewMetrics creates the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "allot_ipam_request_duration_seconds",
			Help:    "Time to serve an IPAM request, by operation and result code.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"op", "code"}),
		allocs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_ipam_addresses_allocated_total", Help: "Addresses handed out, by pool.",
		}, []string{"pool"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_ipam_addresses_released_total", Help: "Addresses released, by pool.",
		}, []string{"pool"}),
		exhaustion: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_ipam_pool_exhausted_total", Help: "Times a pool had no free address for a request.",
		}, []string{"pool"}),
		usable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "allot_ipam_pool_addresses_usable", Help: "Addresses a pool can hand out (saturating at 2^64-1).",
		}, []string{"pool", "family"}),
		used: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "allot_ipam_pool_addresses_used", Help: "Addresses of a pool in use.",
		}, []string{"pool", "family"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "allot_ipam_requests_waiting",
			Help: "ADDs waiting for an address (the node's blocks are full and it asked the operator for another), by first candidate pool and family.",
		}, []string{"pool", "family"}),
		oldestWait: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_ipam_oldest_waiting_request_timestamp_seconds",
			Help: "Unix time the longest-waiting ADD began waiting; 0 when none waits. time() minus it is how long that pod has waited.",
		}),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_ipam_store_errors_total",
			Help: "Allocations or releases refused because the node store could not record them, by operation.",
		}, []string{"op"}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_ipam_wait_timeouts_total",
			Help: "ADDs that waited the whole pending timeout for a block and failed (the runtime retries them).",
		}),
	}
	m.allocateOK = m.requests.WithLabelValues("allocate", "ok")
	m.releaseOK = m.requests.WithLabelValues("release", "ok")
	if reg != nil {
		reg.MustRegister(m.requests, m.allocs, m.releases, m.exhaustion, m.usable, m.used, m.waiting, m.oldestWait, m.storeErrs, m.timeouts)
	}
	return m
}

func (m *Metrics) observe(op string, begin time.Time, err error) {
	if err != nil {
		m.requests.WithLabelValues(op, string(api.CodeOf(err))).Observe(time.Since(begin).Seconds())
		return
	}
	switch op {
	case "allocate":
		m.allocateOK.Observe(time.Since(begin).Seconds())
	case "release":
		m.releaseOK.Observe(time.Since(begin).Seconds())
	default:
		m.requests.WithLabelValues(op, "ok").Observe(time.Since(begin).Seconds())
	}
}

func (m *Metrics) allocated(pool string) { m.allocs.WithLabelValues(pool).Inc() }
func (m *Metrics) released(pool string)  { m.releases.WithLabelValues(pool).Inc() }
func (m *Metrics) exhausted(pool string) { m.exhaustion.WithLabelValues(pool).Inc() }

func (m *Metrics) dropPool(name, family string) {
	m.usable.DeleteLabelValues(name, family)
	m.used.DeleteLabelValues(name, family)
}

func (m *Metrics) storeError(op string) { m.storeErrs.WithLabelValues(op).Inc() }

// waits sets the waiting gauges: counts per pool and family (pools no longer waited on go
// to 0, so a dashboard sees the wait end) and the oldest wait's start.
func (m *Metrics) waits(counts map[[2]string]int, oldest time.Time) {
	for k, n := range counts {
		m.waiting.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
	if oldest.IsZero() {
		m.oldestWait.Set(0)
		return
	}
	m.oldestWait.Set(float64(oldest.UnixNano()) / 1e9)
}
