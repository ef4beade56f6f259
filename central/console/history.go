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
	fin := newFinished(d.DB, time.Now())
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
//
// finished_at is stamped before the job's transaction commits, so a job
// may become visible after a job stamped later was already read; and a
// page may end inside a run of equal stamps (a batch finishes its jobs
// together). Each read therefore starts finishedLag behind the latest
// stamp counted, pages by (finished_at, id), and skips the jobs it has
// already counted.
type finished struct {
	db    *sqldb.DB
	floor time.Time // jobs stamped before the console started are not counted

	mu     sync.Mutex
	since  time.Time        // latest finished_at counted
	seen   map[string]int64 // finished_at of the jobs counted within finishedLag of since, by finishedKey
	count  float64
	counts []float64 // cumulative per durationBounds
	last   time.Time // when the last read ran, so a Rate and a Histogram read share one query
}

// finishedLag is how long after its finished_at a job's commit may still
// be counted: well past SQLite's busy wait (15 s), which a finishing
// transaction may spend waiting for the write lock after its stamp, and
// past any commit of a healthy Postgres.
const finishedLag = time.Minute

// finishedPage is how many jobs one query of a read takes; a read goes on
// until a page comes back short. A variable so that tests can shorten it.
var finishedPage = 10000

func newFinished(db *sqldb.DB, start time.Time) *finished {
	return &finished{db: db, floor: start, since: start}
}

// finishedKey names one finish of a job: a job redriven after it finished
// finishes again under a new stamp, and counts again.
func finishedKey(id string, fin int64) string {
	return id + "@" + strconv.FormatInt(fin, 10)
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
	if f.seen == nil {
		f.seen = map[string]int64{}
	}
	lo := max(sqldb.Micros(f.since.Add(-finishedLag)), sqldb.Micros(f.floor))
	curFin, curID := lo, ""
	for {
		n, err := f.page(ctx, &curFin, &curID)
		if err != nil {
			return err
		}
		if n < finishedPage {
			break
		}
	}
	// What is now further behind the latest stamp than the lag cannot be
	// read again.
	cut := sqldb.Micros(f.since.Add(-finishedLag))
	for k, fin := range f.seen {
		if fin < cut {
			delete(f.seen, k)
		}
	}
	f.last = now
	return nil
}

// page reads the jobs after (*curFin, *curID) in (finished_at, id) order,
// counts those not counted before and moves the cursor to the last one;
// it returns how many it read.
func (f *finished) page(ctx context.Context, curFin *int64, curID *string) (int, error) {
	rows, err := f.db.QueryContext(ctx, f.db.Rebind(`SELECT id, started_at, finished_at FROM inbox_jobs
		WHERE status IN ('succeeded', 'failed', 'dead_letter') AND pruned_at IS NULL
		AND finished_at >= ? AND (finished_at > ? OR id > ?)
		ORDER BY finished_at, id LIMIT `+strconv.Itoa(finishedPage)), *curFin, *curFin, *curID)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		var started *int64
		var fin int64
		if err := rows.Scan(&id, &started, &fin); err != nil {
			return n, err
		}
		n++
		*curFin, *curID = fin, id
		k := finishedKey(id, fin)
		if _, dup := f.seen[k]; dup {
			continue
		}
		f.seen[k] = fin
		if t := sqldb.FromMicros(fin); t.After(f.since) {
			f.since = t
		}
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
	return n, rows.Err()
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
