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
	liveReads *prometheus.CounterVec // requested IPPools the cache lacked, read from the API server
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
		allocated: counterVec("blocks_allocated_total", "Per-node CIDR blocks handed to nodes.", "kind", "source"),
		released: counterVec("blocks_released_total",
			"Per-node CIDR blocks taken back (released by the agent or the node deleted).", "kind", "source"),
		exhausted: counterVec("exhausted_total", "Requests that found no free block in a pool or ClusterCIDRConfig.", "kind", "source"),
		refusals: counterVec("refusals_total",
			"Refused changes (in-use CIDR removal, in-use pool deletion) and unservable nodes.", "reason"),
		blocks: gaugeVec("blocks", "Per-node CIDR blocks currently held by nodes.", "kind", "source", "family"),
		capacity: gaugeVec("blocks_capacity",
			"Per-node CIDR blocks a pool or ClusterCIDRConfig can hand out in all (held and free); blocks/blocks_capacity is how full it is.",
			"kind", "source", "family"),
		liveReads: counterVec("live_pool_reads_total",
			"Reads of an IPPool from the API server for a node's request the informer cache had no such pool for, by result "+
				"(found: the cache lagged, the request is served; none: the pool does not exist; error).", "result"),
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
	err := registerAll(reg, into(&m.allocated), into(&m.released), into(&m.exhausted), into(&m.refusals),
		into(&m.blocks), into(&m.capacity), into(&m.fenced), into(&m.leader), into(&m.convergeS), into(&m.liveReads))
	if err != nil {
		return nil, fmt.Errorf("operator: metrics: %w", err)
	}
	return m, nil
}

// counterVec and gaugeVec are allot_operator_<name> series.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "allot", Subsystem: "operator", Name: name, Help: help}, labels)
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "allot", Subsystem: "operator", Name: name, Help: help}, labels)
}

// into registers *p, replacing it with the collector already registered under the same
// description (register).
func into[C prometheus.Collector](p *C) func(prometheus.Registerer) error {
	return func(reg prometheus.Registerer) error {
		c, err := register(reg, *p)
		*p = c
		return err
	}
}

// registerAll registers every collector, stopping at the first error.
func registerAll(reg prometheus.Registerer, regs ...func(prometheus.Registerer) error) error {
	for _, r := range regs {
		if err := r(reg); err != nil {
			return err
		}
	}
	return nil
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
