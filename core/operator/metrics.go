package operator

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the operator's Prometheus series. kind is "ippool" or "clustercidrconfig",
// source the pool or config name.
type metrics struct {
	allocated *prometheus.CounterVec // blocks handed out
	released  *prometheus.CounterVec // blocks taken back (node released it or was deleted)
	exhausted *prometheus.CounterVec // a request found no free block
	refusals  *prometheus.CounterVec // refused changes and unservable nodes, by reason
	fenced    prometheus.Counter     // writes not made: the Lease was lost or too old (fence)
	blocks    *prometheus.GaugeVec   // blocks held by nodes now, by kind, source, family
	capacity  *prometheus.GaugeVec   // blocks a source can hand out in all (held + free)
	leader    prometheus.Gauge       // 1 while this replica leads
	convergeS prometheus.Histogram   // seconds from rebuild start to rebuild end
}

// Refusal reasons (label "reason" of allot_operator_refusals_total).
const (
	refusalCIDRRemoval    = "cidr_removal"
	refusalPoolDeletion   = "pool_deletion"
	refusalConfigDeletion = "config_deletion"
	refusalNoMatch        = "no_matching_config"
	refusalForeign        = "foreign_pod_cidr"
	refusalConflict       = "conflicting_allocation"
	refusalOverlap        = "cidr_overlap"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		allocated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "allot", Subsystem: "operator", Name: "blocks_allocated_total",
			Help: "Per-node CIDR blocks handed to nodes.",
		}, []string{"kind", "source"}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "allot", Subsystem: "operator", Name: "blocks_released_total",
			Help: "Per-node CIDR blocks taken back (released by the agent or the node deleted).",
		}, []string{"kind", "source"}),
		exhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "allot", Subsystem: "operator", Name: "exhausted_total",
			Help: "Requests that found no free block in a pool or ClusterCIDRConfig.",
		}, []string{"kind", "source"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "allot", Subsystem: "operator", Name: "refusals_total",
			Help: "Refused changes (in-use CIDR removal, in-use pool deletion) and unservable nodes.",
		}, []string{"reason"}),
		blocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "allot", Subsystem: "operator", Name: "blocks",
			Help: "Per-node CIDR blocks currently held by nodes.",
		}, []string{"kind", "source", "family"}),
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "allot", Subsystem: "operator", Name: "blocks_capacity",
			Help: "Per-node CIDR blocks a pool or ClusterCIDRConfig can hand out in all (held and free); blocks/blocks_capacity is how full it is.",
		}, []string{"kind", "source", "family"}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "allot", Subsystem: "operator", Name: "fenced_writes_total",
			Help: "Hand-outs not written because a live read of the Lease showed it lost or too old to renew in time.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "allot", Subsystem: "operator", Name: "leader",
			Help: "1 while this replica is the leader.",
		}),
		convergeS: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "allot", Subsystem: "operator", Name: "rebuild_seconds",
			Help:    "Time to rebuild the allocation state from the API server on becoming leader.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
	}
	var err error
	m.allocated, err = register(reg, m.allocated)
	if err == nil {
		m.released, err = register(reg, m.released)
	}
	if err == nil {
		m.exhausted, err = register(reg, m.exhausted)
	}
	if err == nil {
		m.refusals, err = register(reg, m.refusals)
	}
	if err == nil {
		m.blocks, err = register(reg, m.blocks)
	}
	if err == nil {
		m.capacity, err = register(reg, m.capacity)
	}
	if err == nil {
		m.fenced, err = register(reg, m.fenced)
	}
	if err == nil {
		m.leader, err = register(reg, m.leader)
	}
	if err == nil {
		m.convergeS, err = register(reg, m.convergeS)
	}
	if err != nil {
		return nil, fmt.Errorf("operator: metrics: %w", err)
	}
	return m, nil
}

// register registers c, or returns the collector already registered under the same
// description (two Runs sharing one registry share the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
