package console

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/edge/library"
)

// Metric names the console exports to /metrics (and charts).
const (
	MetricBacklog    = "euterpe_edge_backlog"
	MetricPending    = "euterpe_edge_pending"
	MetricDead       = "euterpe_edge_dead_letters"
	MetricConsumers  = "euterpe_edge_consumers"
	MetricWALBytes   = "euterpe_edge_library_wal_bytes"
	MetricDupGroups  = "euterpe_edge_library_duplicate_groups"
	MetricFinished   = "euterpe_edge_jobs_finished_total" // from edge/worker
	MetricRunSeconds = "euterpe_edge_job_run_seconds"     // from edge/worker
)

// queueCollector reads the queue's gauges from Redis at each scrape, with
// a short deadline: a slow Redis makes the scrape miss these series, not
// hang.
type queueCollector struct {
	store                             *jobs.Store
	lib                               func() *library.Library
	backlog, pending, dead, consumers *prometheus.Desc
	wal, groups                       *prometheus.Desc
}

func newQueueCollector(store *jobs.Store, lib func() *library.Library) *queueCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &queueCollector{
		store: store, lib: lib,
		backlog:   d(MetricBacklog, "Queue entries not finished: undelivered plus pending (what POST /v1/jobs limits)."),
		pending:   d(MetricPending, "Queue entries delivered to a worker and not yet acknowledged."),
		dead:      d(MetricDead, "Entries of jobs:dead (dead-lettered queue messages)."),
		consumers: d(MetricConsumers, "Consumers of the worker group (worker processes seen recently)."),
		wal:       d(MetricWALBytes, "Size of the library database's write-ahead log."),
		groups:    d(MetricDupGroups, "Duplicate groups (content hashes with more than one live file)."),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.backlog, c.pending, c.dead, c.consumers, c.wal, c.groups} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	rdb := c.store.Redis()
	if n, err := c.store.Backlog(ctx, 1<<40); err == nil {
		gauge(c.backlog, float64(n))
	}
	if n, err := rdb.XLen(ctx, jobs.DeadStream).Result(); err == nil {
		gauge(c.dead, float64(n))
	}
	if groups, err := rdb.XInfoGroups(ctx, jobs.QueueStream).Result(); err == nil {
		for _, g := range groups {
			if g.Name == jobs.Group {
				gauge(c.pending, float64(g.Pending))
				gauge(c.consumers, float64(g.Consumers))
			}
		}
	} else if isNoGroup(err) {
		gauge(c.pending, 0)
		gauge(c.consumers, 0)
	}
	if l := c.lib(); l != nil {
		if n, err := fileSize(l.Scheduler.WALPath); err == nil {
			gauge(c.wal, float64(n))
		}
		var n int64
		if err := l.Store.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM dedup_groups WHERE file_count > 1`).Scan(&n); err == nil {
			gauge(c.groups, float64(n))
		}
	}
}
