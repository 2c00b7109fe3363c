package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

type metrics struct {
	writes       *prometheus.CounterVec
	released     prometheus.Counter
	reclaimed    prometheus.Counter
	syncDuration prometheus.Histogram
	localState   prometheus.Gauge
	orphans      prometheus.Gauge
	dropped      prometheus.Counter
	offline      prometheus.Counter
	liveReads    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_agent_node_writes_total",
			Help: "Writes of the node's AllotNode, by part (create, spec, status) and result (ok, conflict, error).",
		}, []string{"part", "result"}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_agent_blocks_released_total", Help: "Blocks the agent gave back.",
		}),
		reclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_agent_reclaimed_total", Help: "Allocations freed because their pod no longer exists.",
		}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "allot_agent_sync_duration_seconds",
			Help:    "Time of one pass of the node sync loop.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5},
		}),
		localState: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_agent_serving_local_state",
			Help: "1 while the agent serves from blocks restored from the node store, not yet reconciled with the API server.",
		}),
		orphans: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_agent_orphaned_addresses",
			Help: "Addresses held by pods of the node outside every block the node holds (blocks taken away while in use).",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_agent_blocks_dropped_in_use_total",
			Help: "Blocks that stopped being the node's while pods held addresses of them.",
		}),
		offline: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_agent_offline_decisions_total",
			Help: "ADDs decided without the pod's metadata, the API server being unreachable.",
		}),
		liveReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_agent_live_pool_reads_total",
			Help: "Reads of the IPPools from the API server for ADDs that found no pool, by result (found: a pool the informer had not delivered; none; error).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.writes, m.released, m.reclaimed, m.syncDuration, m.localState, m.orphans, m.dropped, m.offline, m.liveReads)
	}
	return m
}

// writesSpec is the number of spec writes so far, whatever their result (tests, figures).
func (m *metrics) writesSpec() float64 {
	var total float64
	for _, r := range []string{"ok", "conflict", "error"} {
		var d dto.Metric
		if err := m.writes.WithLabelValues("spec", r).Write(&d); err == nil {
			total += d.GetCounter().GetValue()
		}
	}
	return total
}
