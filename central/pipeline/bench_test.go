package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkBurnDown drains EUTERPE_BENCH_JOBS (default 100000) queued
// pipeline jobs of a no-op type with the real worker: each is claimed
// under the visibility lease (queued -> running, attempt counted, started_at
// stamped), run under heartbeats, and succeeded with a fenced write
// (batched by the finisher). It reports jobs/s.
func BenchmarkBurnDown(b *testing.B) {
	for _, e := range sqltest.Engines {
		b.Run(string(e), func(b *testing.B) {
			jobs := envInt("EUTERPE_BENCH_JOBS", 100000)
			conc := envInt("EUTERPE_BENCH_WORKERS", 1000)
			var total time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				db := sqltest.Open(b, e, migrationSets...)
				f := newFixture(b, db, nil)
				f.store.Log = discardLog()
				fillJobs(b, db, jobs)
				// As autovacuum (Postgres) or PRAGMA optimize (SQLite) would have.
				_, _ = db.ExecContext(context.Background(), "ANALYZE pipeline_jobs")
				w := NewWorker(f.store, f.types, WorkerConfig{ID: "bench", Visibility: time.Minute, Concurrency: conc, Poll: 5 * time.Millisecond})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				b.StartTimer()
				start := time.Now()
				go func() { defer close(done); _ = w.Run(ctx) }()
				for {
					var n int
					_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pipeline_jobs WHERE status = 'succeeded'").Scan(&n)
					if n == jobs {
						break
					}
					time.Sleep(250 * time.Millisecond)
				}
				total += time.Since(start)
				b.StopTimer()
				cancel()
				<-done
				_ = db.Close()
			}
			b.ReportMetric(float64(jobs*b.N)/total.Seconds(), "jobs/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// fillJobs inserts n queued, visible noop jobs in transactions of 1000.
func fillJobs(b *testing.B, db *sqldb.DB, n int) {
	ctx := context.Background()
	now := sqldb.Micros(time.Now())
	for done := 0; done < n; {
		k := min(1000, n-done)
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			for i := 0; i < k; i++ {
				asof := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, done+i).Format(DateLayout)
				if _, err := db.ExecTx(ctx, tx, `INSERT INTO pipeline_jobs (job_id, idempotency_key, job_type, symbol, asof, requested_by,
					status, max_attempts, visible_at, created_at, updated_at) VALUES (?, ?, 'noop', 'S', ?, 'bench', 'queued', 5, ?, ?, ?)`,
					NewJobID(), MakeIdempotencyKey("noop", "S", asof), asof, now, now, now); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(fmt.Errorf("fill: %w", err))
		}
		done += k
	}
}
