package peers

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.done.Add(1)
	return nil
}

// BenchmarkRiver drains EUTERPE_BENCH_JOBS (default 100,000, like central's
// inbox burn-down) no-op jobs inserted beforehand into a fresh database,
// with EUTERPE_PEER_RIVER_WORKERS workers (default 5,000) and River's
// batched completer. The clock stops when Stop has returned, that is when
// every completion is committed. EUTERPE_PEER_RIVER_COOLDOWN is the fetch
// cooldown: 2ms by default (River's minimum is 1ms, its default 100ms), so
// that a burn-down does not wait between fetches on River's side.
func BenchmarkRiver(b *testing.B) {
	jobs := envInt("EUTERPE_BENCH_JOBS", 100000)
	workers := envInt("EUTERPE_PEER_RIVER_WORKERS", 5000)
	cooldown := 2 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("EUTERPE_PEER_RIVER_COOLDOWN")); err == nil && d > 0 {
		cooldown = d
	}
	ctx := context.Background()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		pool, err := pgxpool.New(ctx, testsvc.Postgres(b))
		if err != nil {
			b.Fatal(err)
		}
		driver := riverpgxv5.New(pool)
		m, err := rivermigrate.New(driver, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			b.Fatal(err)
		}
		var done atomic.Int64
		ws := river.NewWorkers()
		river.AddWorker(ws, &noopWorker{done: &done})
		client, err := river.NewClient(driver, &river.Config{
			Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
			Workers:       ws,
			FetchCooldown: cooldown,
			Logger:        quietLogger(),
		})
		if err != nil {
			b.Fatal(err)
		}
		params := make([]river.InsertManyParams, 0, 1000)
		for n := 0; n < jobs; {
			params = params[:0]
			for k := 0; k < 1000 && n < jobs; k++ {
				params = append(params, river.InsertManyParams{Args: noopArgs{}})
				n++
			}
			if _, err := client.InsertManyFast(ctx, params); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := pool.Exec(ctx, "ANALYZE river_job"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := client.Start(ctx); err != nil {
			b.Fatal(err)
		}
		for done.Load() < int64(jobs) {
			time.Sleep(2 * time.Millisecond)
		}
		stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
		err = client.Stop(stopCtx)
		cancel()
		total += time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		var completed int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&completed); err != nil {
			b.Fatal(err)
		}
		if completed != jobs {
			b.Fatalf("completed %d of %d", completed, jobs)
		}
		pool.Close()
	}
	report(b, jobs, total)
}
