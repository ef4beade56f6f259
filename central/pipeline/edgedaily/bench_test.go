package edgedaily

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/pipeline/objstore"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// BenchmarkEdgeDaily runs the whole edge_daily pipeline (fetch, transform,
// quality, storage to a directory) for one edge with EUTERPE_BENCH_EVENTS
// (default 100000) events in the day: jobs of running + done/error pairs
// across six tasks. It reports the run's seconds (the bound: 2 s).
func BenchmarkEdgeDaily(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("EUTERPE_BENCH_EVENTS")); err == nil && v > 0 {
		n = v
	}
	for _, e := range sqltest.Engines {
		b.Run(string(e), func(b *testing.B) {
			db := sqltest.Open(b, e, sets...)
			addEdge(b, db, "edge-bench")
			fillEvents(b, db, "edge-bench", n)
			typ := Type(db, objstore.Dir{Path: b.TempDir()})
			var worst time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, err := typ.Runner.Run(context.Background(), msg("edge-bench")); err != nil {
					b.Fatal(err)
				}
				worst = max(worst, time.Since(start))
			}
			b.ReportMetric(worst.Seconds(), "s/run")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func fillEvents(b *testing.B, db *sqldb.DB, edge string, n int) {
	ctx := context.Background()
	tasks := []string{"chat", "plan", "code", "tool", "rag", "embed"}
	for done := 0; done < n; {
		k := min(2000, n-done)
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			for i := done; i < done+k; i++ {
				job := i / 2
				typ, data := "running", "{}"
				at := day.Add(time.Duration(job) * 500 * time.Millisecond)
				if i%2 == 1 {
					typ = "done"
					at = at.Add(time.Duration(job%977) * time.Millisecond)
					if job%10 == 0 {
						typ, data = "error", `{"code":"backend_timeout"}`
					}
				}
				ts := at.UnixMilli()
				if _, err := db.ExecTx(ctx, tx, `INSERT INTO edge_events (event_id, edge_id, job_id, entry_id, entry_ms, entry_seq, type, step, task, ts, data, received_at)
					VALUES (?, ?, ?, ?, ?, ?, ?, 'worker', ?, ?, ?, ?)`,
					fmt.Sprintf("%s:%d:%d", edge, job, i), edge, fmt.Sprintf("job-%d", job), fmt.Sprintf("%d-%d", ts, i), ts, i,
					typ, tasks[job%len(tasks)], ts, data, ts*1000); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		done += k
	}
	if db.Engine == sqldb.Postgres {
		_, _ = db.ExecContext(ctx, "ANALYZE edge_events")
	}
}
