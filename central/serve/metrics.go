package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// QueueCollector exports the queue's state, read on each scrape with one
// query per table (no background polling, nothing cached):
//
//	euterpe_inbox_jobs{status}                 jobs queued or under a lease, by status
//	euterpe_inbox_oldest_queued_age_seconds    age of the oldest queued job (since accepted; 0 when none)
//	euterpe_outbox_events{status}              outbox events pending, delivering and dead-lettered
//
// Every count is over a partial index (terminal rows are never scanned).
type QueueCollector struct {
	DB  *sqldb.DB
	Log *slog.Logger
	Now func() time.Time // default time.Now

	jobs, oldest, events *prometheus.Desc
	inboxSQL, outboxSQL  string
}

// inboxActive are the statuses euterpe_inbox_jobs reports, in order.
var inboxActive = []string{schema.StatusQueued, schema.StatusClaimed, schema.StatusFetching, schema.StatusProcessing, schema.StatusUploading}

// outboxOpen are the statuses euterpe_outbox_events reports, in order.
var outboxOpen = []string{schema.OutboxPending, schema.OutboxDelivering, schema.OutboxDeadLetter}

// NewQueueCollector returns the collector for db.
func NewQueueCollector(db *sqldb.DB, log *slog.Logger) *QueueCollector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	leased := "'" + strings.Join(schema.InboxLease.Leased, "', '") + "'"
	c := &QueueCollector{DB: db, Log: log, Now: time.Now,
		jobs: prometheus.NewDesc("euterpe_inbox_jobs",
			"Transcode jobs queued or under a lease, by status.", []string{"status"}, nil),
		oldest: prometheus.NewDesc("euterpe_inbox_oldest_queued_age_seconds",
			"Age of the oldest queued job since it was accepted (0 when none is queued).", nil, nil),
		events: prometheus.NewDesc("euterpe_outbox_events",
			"Webhook outbox events pending, delivering and in the dead-letter.", []string{"status"}, nil),
		// The status predicates repeat the partial indexes' own (claim,
		// lease) so both engines count from the index.
		inboxSQL: fmt.Sprintf(`SELECT status, COUNT(*), MIN(created_at) FROM inbox_jobs WHERE status = '%s' GROUP BY status
			UNION ALL SELECT status, COUNT(*), MIN(created_at) FROM inbox_jobs WHERE status IN (%s) GROUP BY status`,
			schema.StatusQueued, leased),
	}
	var sub []string
	for _, s := range outboxOpen {
		sub = append(sub, fmt.Sprintf("(SELECT COUNT(*) FROM job_outbox_events WHERE status = '%s')", s))
	}
	c.outboxSQL = "SELECT " + strings.Join(sub, ", ")
	return c
}

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobs
	ch <- c.oldest
	ch <- c.events
}

// Collect implements prometheus.Collector. A failed query is reported as an
// invalid metric (that scrape omits the series) and logged.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.collectInbox(ctx, ch); err != nil {
		c.Log.Warn("metrics: reading inbox depth failed", "err", err)
		ch <- prometheus.NewInvalidMetric(c.jobs, err)
	}
	if err := c.collectOutbox(ctx, ch); err != nil {
		c.Log.Warn("metrics: reading outbox depth failed", "err", err)
		ch <- prometheus.NewInvalidMetric(c.events, err)
	}
}

func (c *QueueCollector) collectInbox(ctx context.Context, ch chan<- prometheus.Metric) error {
	rows, err := c.DB.QueryContext(ctx, c.inboxSQL)
	if err != nil {
		return err
	}
	defer rows.Close()
	counts := map[string]int64{}
	var oldestQueued int64
	for rows.Next() {
		var status string
		var n, minCreated int64
		if err := rows.Scan(&status, &n, &minCreated); err != nil {
			return err
		}
		counts[status] = n
		if status == schema.StatusQueued {
			oldestQueued = minCreated
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, s := range inboxActive {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(counts[s]), s)
	}
	age := 0.0
	if counts[schema.StatusQueued] > 0 {
		age = max(0, c.Now().Sub(sqldb.FromMicros(oldestQueued)).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
	return nil
}

func (c *QueueCollector) collectOutbox(ctx context.Context, ch chan<- prometheus.Metric) error {
	n := make([]int64, len(outboxOpen))
	dest := make([]any, len(n))
	for i := range n {
		dest[i] = &n[i]
	}
	if err := c.DB.QueryRowContext(ctx, c.outboxSQL).Scan(dest...); err != nil {
		return err
	}
	for i, s := range outboxOpen {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(n[i]), s)
	}
	return nil
}

// register adds c to reg unless an equal collector is already there.
func register(reg prometheus.Registerer, c prometheus.Collector) error {
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(c); err != nil && !errors.As(err, &are) {
		return err
	}
	return nil
}
