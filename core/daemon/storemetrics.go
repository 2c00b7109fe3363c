package daemon

import (
	"github.com/allot-ipam/allot/core/store"
	"github.com/prometheus/client_golang/prometheus"
)

// storeCollector turns the store's counters into metrics at scrape time, so the commit
// path carries no metric updates of its own.
type storeCollector struct {
	s                             *store.Store
	batches, ops, errors, seconds *prometheus.Desc
	queued, lastBatch             *prometheus.Desc
	checkpoints, ckptSeconds      *prometheus.Desc
}

func newStoreCollector(s *store.Store) *storeCollector {
	return &storeCollector{
		s:         s,
		batches:   prometheus.NewDesc("allot_store_commits_total", "Store group commits (each one frame of the write-ahead log and one fdatasync).", nil, nil),
		ops:       prometheus.NewDesc("allot_store_operations_total", "Writes committed; operations/commits is the mean group-commit size.", nil, nil),
		errors:    prometheus.NewDesc("allot_store_commit_errors_total", "Store group commits and checkpoints that failed.", nil, nil),
		seconds:   prometheus.NewDesc("allot_store_commit_seconds_total", "Time spent writing and syncing commits.", nil, nil),
		queued:    prometheus.NewDesc("allot_store_queued_operations", "Writes waiting for the next commit.", nil, nil),
		lastBatch: prometheus.NewDesc("allot_store_last_commit_operations", "Writes in the latest commit.", nil, nil),
		checkpoints: prometheus.NewDesc("allot_store_checkpoints_total",
			"Checkpoints of the write-ahead log into the store file (one bbolt transaction each).", nil, nil),
		ckptSeconds: prometheus.NewDesc("allot_store_checkpoint_seconds_total", "Time spent in checkpoints.", nil, nil),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.batches, c.ops, c.errors, c.seconds, c.queued, c.lastBatch, c.checkpoints, c.ckptSeconds} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(st.Batches))
	ch <- prometheus.MustNewConstMetric(c.ops, prometheus.CounterValue, float64(st.Ops))
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(st.Errors))
	ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, st.TotalCommit.Seconds())
	ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(st.Queued))
	ch <- prometheus.MustNewConstMetric(c.lastBatch, prometheus.GaugeValue, float64(st.LastBatchSize))
	ch <- prometheus.MustNewConstMetric(c.checkpoints, prometheus.CounterValue, float64(st.Checkpoints))
	ch <- prometheus.MustNewConstMetric(c.ckptSeconds, prometheus.CounterValue, st.CheckpointTime.Seconds())
}
