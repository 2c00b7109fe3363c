package awseni

import (
	"errors"
	"time"

	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are the backend's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	calls     *prometheus.CounterVec
	throttles *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered).
//
//	allot_aws_ec2_calls_total{action,outcome}    every attempt (retries included); outcome "ok" or the EC2 error code
//	allot_aws_ec2_throttles_total{action}         attempts answered with a throttling code
//	allot_aws_ec2_call_duration_seconds{action}   attempt latency
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_aws_ec2_calls_total",
			Help: "EC2 API attempts by action and outcome."}, []string{"action", "outcome"}),
		throttles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_aws_ec2_throttles_total",
			Help: "EC2 API attempts refused by throttling."}, []string{"action"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "allot_aws_ec2_call_duration_seconds",
			Help: "EC2 API attempt latency.", Buckets: prometheus.ExponentialBuckets(0.001, 3, 10)}, []string{"action"}),
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.throttles, m.latency)
	}
	return m
}

func (m *Metrics) observeCall(action string, err error, d time.Duration) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
		var ae smithy.APIError
		if errors.As(err, &ae) {
			outcome = ae.ErrorCode()
		}
		if throttleCodes[outcome] {
			m.throttles.WithLabelValues(action).Inc()
		}
	}
	m.calls.WithLabelValues(action, outcome).Inc()
	m.latency.WithLabelValues(action).Observe(d.Seconds())
}

// Counts returns the call counter per action and outcome (for tests and benchmarks).
func (m *Metrics) Counts() map[string]map[string]int {
	out := map[string]map[string]int{}
	if m == nil {
		return out
	}
	ch := make(chan prometheus.Metric, 256)
	go func() { m.calls.Collect(ch); close(ch) }()
	for mt := range ch {
		var pb dto.Metric
		if err := mt.Write(&pb); err != nil {
			continue
		}
		var action, outcome string
		for _, l := range pb.Label {
			switch l.GetName() {
			case "action":
				action = l.GetValue()
			case "outcome":
				outcome = l.GetValue()
			}
		}
		if out[action] == nil {
			out[action] = map[string]int{}
		}
		out[action][outcome] = int(pb.Counter.GetValue())
	}
	return out
}
