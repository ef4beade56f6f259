package inbox_test

import (
	"context"
	"database/sql"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkBurnDown drains EUTERPE_BENCH_JOBS (default 100000) queued jobs
// with a no-op executor: each job is claimed (queued -> claimed) and moved
// along fetching, processing, uploading to succeeded, every transition
// with its outbox row, fenced by claim_version. It reports jobs/s and the
// p99 latency of a claim call. EUTERPE_BENCH_WORKERS and
// EUTERPE_BENCH_BATCH override the per-engine defaults.
func BenchmarkBurnDown(b *testing.B) {
	for _, e := range sqltest.Engines {
		b.Run(string(e), func(b *testing.B) {
			// Postgres: two claimers; on two cores more of them only queue a
			// claim behind the others' 2,000-row moves (docs/central.md).
			workers, batch := 2, 500
			if e == sqldb.SQLite {
				workers, batch = 2, 100 // one writer at a time: two overlap claim and finish
			}
			workers = envInt("EUTERPE_BENCH_WORKERS", workers)
			batch = envInt("EUTERPE_BENCH_BATCH", batch)
			jobs := envInt("EUTERPE_BENCH_JOBS", 100000)
			var total time.Duration
			var lat []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				db := sqltest.Open(b, e, schema.Migrations())
				s := inbox.New(db, testKeys(b), inbox.DefaultPolicy())
				fill(b, s, addRequester(b, db), jobs)
				analyze(b, db) // as autovacuum would have by the time a backlog is drained
				b.StartTimer()
				d, l := drain(b, s, workers, batch, envInt("EUTERPE_BENCH_COMPLETE_BATCH", 0))
				b.StopTimer()
				total += d
				lat = append(lat, l...)
				if n := count(b, db, `SELECT COUNT(*) FROM inbox_jobs WHERE status = 'succeeded'`); n != jobs {
					b.Fatalf("succeeded %d of %d", n, jobs)
				}
				if n := count(b, db, `SELECT COUNT(*) FROM job_outbox_events`); n != jobs*5 {
					b.Fatalf("outbox rows %d, want %d", n, jobs*5)
				}
				_ = db.Close()
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(jobs*b.N)/total.Seconds(), "jobs/s")
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "claim-p99-ms")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// fill enqueues n jobs (each with its own sealed credentials) in
// transactions of 1000.
func fill(b *testing.B, s *inbox.Store, requester string, n int) {
	ctx := context.Background()
	for done := 0; done < n; {
		k := min(1000, n-done)
		err := s.DB().Tx(ctx, func(tx *sql.Tx) error {
			for i := 0; i < k; i++ {
				if err := s.Insert(ctx, tx, newJob(requester, true)); err != nil {
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
}

func drain(b *testing.B, s *inbox.Store, workers, batch, completeBatch int) (time.Duration, []time.Duration) {
	ctx := context.Background()
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	// With completeBatch set, claimers hand their jobs to one completer
	// that finishes them completeBatch at a time (River's completer shape);
	// otherwise each claimer finishes its own batch.
	var claimed chan []*inbox.Job
	var completed sync.WaitGroup
	if completeBatch > 0 {
		claimed = make(chan []*inbox.Job, 2)
		completed.Go(func() {
			var pending []*inbox.Job
			flush := func() {
				if len(pending) == 0 {
					return
				}
				if stale, err := s.SucceedMany(ctx, pending, nil); err != nil || len(stale) > 0 {
					b.Errorf("succeed: %v (%d stale)", err, len(stale))
				}
				pending = pending[:0]
			}
			for js := range claimed {
				pending = append(pending, js...)
				if len(pending) >= completeBatch || len(claimed) == 0 {
					flush()
				}
			}
			flush()
		})
	}
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			worker := "bench-" + strconv.Itoa(w)
			for {
				t0 := time.Now()
				js, err := s.Claim(ctx, worker, batch, time.Minute)
				mine = append(mine, time.Since(t0))
				if err != nil {
					b.Error(err)
					return
				}
				if len(js) == 0 {
					return
				}
				if claimed != nil {
					claimed <- js
					continue
				}
				if stale, err := s.SucceedMany(ctx, js, nil); err != nil || len(stale) > 0 {
					b.Errorf("succeed: %v (%d stale)", err, len(stale))
					return
				}
			}
		}()
	}
	wg.Wait()
	if claimed != nil {
		close(claimed)
		completed.Wait()
	}
	return time.Since(start), lat
}

func analyze(b *testing.B, db *sqldb.DB) {
	q := "ANALYZE"
	if db.Engine == sqldb.Postgres {
		q = "ANALYZE inbox_jobs"
	}
	if _, err := db.Exec(q); err != nil {
		b.Fatal(err)
	}
}
