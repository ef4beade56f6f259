package console

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/serve"
	dconsole "github.com/vesta-cx/euterpe/daemon/console"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// History sampling: every 10 s, an hour kept.
const (
	sampleEvery = 10 * time.Second
	sampleSpan  = time.Hour
)

// Series names the console's charts read.
const (
	SeriesTranscodeBacklog  = "transcode_backlog"
	SeriesTranscodeFinished = "transcode_finished"
	SeriesTranscodeDuration = "transcode_duration"
	SeriesWebhookBacklog    = "webhook_backlog"
	SeriesFleetEvents       = "fleet_events"
	SeriesPipelineBacklog   = "pipeline_backlog"
	SeriesPipelineFinished  = "pipeline_finished"
	SeriesPipelineDuration  = "pipeline_duration"
)

// newHistory registers the chart series. Transcode numbers come from the
// database, so every pod's console shows the whole cluster; the fleet and
// pipeline ones from this process's registry, whose collectors (backlog,
// DLQ) query the database too and whose counters belong to the roles that
// run here.
func newHistory(log *slog.Logger, d *serve.Deps, r *Role) *dconsole.History {
	h := dconsole.NewHistory(log, sampleEvery, sampleSpan)
	h.Gauge(SeriesTranscodeBacklog, "jobs", func(ctx context.Context) (float64, error) {
		var n int64
		err := d.DB.QueryRowContext(ctx, d.DB.Rebind(`SELECT COUNT(*) FROM inbox_jobs WHERE status = ?`), schema.StatusQueued).Scan(&n)
		return float64(n), err
	})
	h.Gauge(SeriesWebhookBacklog, "events", func(ctx context.Context) (float64, error) {
		var n int64
		err := d.DB.QueryRowContext(ctx, d.DB.Rebind(`SELECT COUNT(*) FROM job_outbox_events WHERE status = ?`), schema.OutboxPending).Scan(&n)
		return float64(n), err
	})
	fin := &finished{db: d.DB, since: time.Now()}
	h.Rate(SeriesTranscodeFinished, "jobs/s", fin.total)
	h.Histogram(SeriesTranscodeDuration, fin.buckets)
	if r.withFleet && d.Metrics != nil {
		h.Rate(SeriesFleetEvents, "events/s", dconsole.GatherValue(d.Metrics, "euterpe_sync_events_total", map[string]string{"result": "accepted"}))
	}
	if r.withPipeline && d.Metrics != nil {
		h.Gauge(SeriesPipelineBacklog, "jobs", dconsole.GatherValue(d.Metrics, "euterpe_pipeline_backlog", nil))
		h.Rate(SeriesPipelineFinished, "jobs/s", dconsole.GatherValue(d.Metrics, "euterpe_pipeline_finished_total", map[string]string{"status": "succeeded"}))
		h.Histogram(SeriesPipelineDuration, dconsole.GatherHistogram(d.Metrics, "euterpe_pipeline_job_duration_seconds", "s"))
	}
	return h
}

// durationBounds are the transcode duration buckets, in seconds.
var durationBounds = []float64{1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, math.Inf(1)}

// finished turns the inbox's finished jobs into counters: each read adds
// the jobs that finished since the previous one (by finished_at, through
// the finished-jobs index), so the history's window over them is the last
// hour's throughput and duration distribution, for every pod's jobs.
type finished struct {
	db *sqldb.DB

	mu     sync.Mutex
	since  time.Time // finished_at watermark
	count  float64
	counts []float64 // cumulative per durationBounds
	last   time.Time // when the last read ran, so a Rate and a Histogram read share one query
}

func (f *finished) read(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if now.Sub(f.last) < sampleEvery/2 {
		return nil
	}
	if f.counts == nil {
		f.counts = make([]float64, len(durationBounds))
	}
	rows, err := f.db.QueryContext(ctx, f.db.Rebind(`SELECT started_at, finished_at FROM inbox_jobs
		WHERE status IN ('succeeded', 'failed', 'dead_letter') AND pruned_at IS NULL AND finished_at > ?
		ORDER BY finished_at LIMIT 10000`), sqldb.Micros(f.since))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var started *int64
		var fin int64
		if err := rows.Scan(&started, &fin); err != nil {
			return err
		}
		f.since = sqldb.FromMicros(fin)
		f.count++
		if started == nil {
			continue
		}
		secs := float64(fin-*started) / 1e6
		for i, le := range durationBounds {
			if secs <= le {
				f.counts[i]++
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	f.last = now
	return nil
}

func (f *finished) total(ctx context.Context) (float64, error) {
	if err := f.read(ctx); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count, nil
}

func (f *finished) buckets(ctx context.Context) ([]dconsole.Bucket, error) {
	if err := f.read(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]dconsole.Bucket, len(durationBounds))
	for i, le := range durationBounds {
		label := "more"
		if !math.IsInf(le, 1) {
			label = "≤" + strconv.FormatFloat(le, 'g', 4, 64) + "s"
		}
		out[i] = dconsole.Bucket{Label: label, LE: le, Value: f.counts[i]}
	}
	return out, nil
}
